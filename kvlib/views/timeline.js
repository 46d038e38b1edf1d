// The serving timeline: per run, rows are batch slots and columns steps; a cell names the request in that slot.
// Prefill cells are hatched, bold and marked ▸ (↺ when they read cached blocks: prefix caching); decode cells plain;
// idle slots dotted, a grey ·: colour is never the only cue. Hover a cell for its request; its cells light up in
// every run. Under the slots, per step the blocks in use and, above them, those the index keeps that nobody holds.
// DOM hooks: .kv-sv-run[data-policy][data-name], td.kv-sv-cell[data-slot][data-step] with data-request, data-kind
// (prefill | decode | idle) and, on a prefill, data-reused (prompt tokens read from cached blocks),
// td.kv-sv-blocks[data-step] (span.kv-sv-inuse, span.kv-sv-cached), .kv-sv-figures, .kv-sv-ratio;
// .kv-error / .kv-empty in place.

const KINDS = {
  prefill: "prefill: its whole prompt in one call, which gives its first token",
  reused: "prefill that read cached blocks (prefix caching): only the rest of its prompt computed",
  decode: "decode: one more token, in one call with every other running request",
  idle: "idle: no request in this slot",
};

const ms = (x) => `${KV.num(x, 1)} ms`;
const pct = (x) => `${Math.round(100 * x)}%`;

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "timeline");
  const lightRequest = (i) => {  // every cell of request i, in every run; null: none
    body.querySelectorAll(".kv-sv-cell.kv-linked").forEach((c) => c.classList.remove("kv-linked"));
    if (i !== null) body.querySelectorAll(`.kv-sv-cell[data-request="${i}"]`).forEach((c) => c.classList.add("kv-linked"));
  };
  const hatched = (i) => `repeating-linear-gradient(135deg, ${KV.TINTS[i % KV.TINTS.length]} 0 4px, #fff 4px 6px)`;

  function figures(run) {
    return `${run.name} · ${KV.plural(run.max_batch, "slot")} · ${KV.plural(run.cells.length, "step")} · ` +
      `${KV.int(run.tokens)} tokens in ${ms(run.ms)} = ${KV.int(Math.round(run.tokens_per_second))} tokens/s · ` +
      `mean latency ${ms(run.mean_latency_ms)} · mean time to first token ${ms(run.mean_ttft_ms)} · ` +
      `${pct(run.idle)} of slot-steps idle`;
  }

  function grid(run, requests) {
    const first = requests.map(() => -1);  // the step of each request's prefill
    run.cells.forEach((step, k) => step.forEach((c) => { if (c && c[1] === "prefill") first[c[0]] = k; }));
    const waiting = (k) => first.filter((f) => f > k).length;
    const head = KV.h("tr", {}, KV.h("th", { class: "kv-corner" }, "step"),
      run.cells.map((_, k) => KV.h("th", { class: "kv-sv-step" }, k % 10 === 0 ? String(k) : "")));
    const rows = [...Array(run.max_batch).keys()].map((slot) => KV.h("tr", { dataset: { slot } },
      KV.h("th", { class: "kv-rowhead" }, `slot ${slot}`),
      run.cells.map((step, k) => {
        const c = step[slot], kind = c ? c[1] : "idle";
        const td = KV.h("td", { class: `kv-sv-cell kv-sv-${kind}`, dataset: { slot, step: k, kind } });
        if (!c) {
          td.textContent = "·";
          return KV.hoverable(td, tip, () => [`${run.name} · step ${k} · slot ${slot}: idle`,
            `${KV.plural(waiting(k), "request")} still waiting to start`,
            run.policy === "static" ? "static batching: the slot waits until its batch's last request is done" : ""]
            .filter(Boolean));
        }
        const [i] = c, q = requests[i], s = run.served[i];
        td.dataset.request = i;
        td.style.background = kind === "prefill" ? hatched(i) : KV.TINTS[i % KV.TINTS.length];
        if (kind === "prefill") td.dataset.reused = s.reused;
        td.textContent = kind === "prefill" ? `${s.reused ? "↺" : "▸"}${q.label}` : q.label;
        td.addEventListener("mouseenter", () => lightRequest(i));
        td.addEventListener("mouseleave", () => lightRequest(null));
        return KV.hoverable(td, tip, () => [
          `request ${q.label} · ${run.name} · step ${k} · slot ${slot}`,
          kind === "decode" ? `decode: token ${k - first[i] + 1} of ${q.answer}` : !s.reused ? KINDS.prefill :
            `prefill: ${KV.int(s.reused)} of its ${KV.plural(q.prompt, "prompt token")} read from cached blocks, ` +
            `${KV.int(q.prompt - s.reused)} computed`,
          `prompt ${KV.plural(q.prompt, "token")} · answer ${KV.plural(q.answer, "token")}`,
          `time to first token ${ms(s.ttft_ms)} · latency ${ms(s.latency_ms)} (from its arrival, at 0)`]);
      })));
    const blocks = KV.h("tr", { class: "kv-sv-blockrow" }, KV.h("th", { class: "kv-rowhead" }, "blocks"),
      run.blocks.map((b, k) => KV.hoverable(KV.h("td", { class: "kv-sv-blocks", dataset: { step: k } },
        KV.h("span", { class: "kv-sv-cached", style: { height: `${100 * run.cached[k] / run.n_blocks}%` } }),
        KV.h("span", { class: "kv-sv-inuse", style: { height: `${100 * b / run.n_blocks}%` } })), tip,
        () => [`${run.name} · after step ${k}: ${b} of ${run.n_blocks} blocks in use (${run.block_size} tokens each)`,
               `${KV.plural(run.cached[k], "block")} kept by the index, held by no request (cached)`,
               `the step took ${ms(run.step_ms[k])}`])));
    return KV.h("div", { class: "kv-sv-run", dataset: { policy: run.policy, name: run.name } },
      KV.h("div", { class: "kv-sv-figures" }, figures(run)),
      KV.h("div", { class: "kv-caption" }, `blocks: ${KV.int(run.blocks_allocated)} allocated, ` +
        `${KV.int(run.blocks_freed)} freed, ${KV.int(run.blocks_cached)} kept by the index at the end; ` +
        `pool of ${run.n_blocks}`),
      KV.h("div", { class: "kv-sv-scroll" },
        KV.h("table", { class: "kv-table kv-sv-grid" }, KV.h("thead", {}, head), KV.h("tbody", {}, rows, blocks))));
  }

  function ratio(runs) {
    const by = Object.fromEntries(runs.map((r) => [r.policy, r]));
    if (!by.static || !by.continuous) return null;
    const [s, c] = [by.static, by.continuous];
    return KV.h("div", { class: "kv-sv-ratio" }, `continuous / static: tokens/s ${(c.tokens_per_second / s.tokens_per_second).toFixed(2)}× · ` +
      `mean latency ${(c.mean_latency_ms / s.mean_latency_ms).toFixed(2)}× · ` +
      `mean time to first token ${(c.mean_ttft_ms / s.mean_ttft_ms).toFixed(2)}× · steps ${c.cells.length} against ${s.cells.length}`);
  }

  const legend = () => KV.h("div", { class: "kv-legend" }, ["prefill", "reused", "decode", "idle"].map((kind) =>
    KV.h("span", { class: "kv-key" }, KV.h("span", { class: `kv-sv-cell kv-sv-${kind === "reused" ? "prefill" : kind}`,
      style: kind === "idle" ? {} : { background: kind === "decode" ? KV.TINTS[0] : hatched(0) } },
      { idle: "·", prefill: "▸A", reused: "↺A", decode: "A" }[kind]), ` ${KINDS[kind]}`)));

  const draw = () => {
    try {
      const runs = model.get("runs"), requests = model.get("requests");
      if (!runs.length) {
        body.replaceChildren(KV.h("div", { class: "kv-empty" },
          "No runs to show yet: give ServingTimeline.of the runs of serving.side_by_side (or serving.serve)."));
        return;
      }
      body.replaceChildren(KV.h("div", { class: "kv-title" }, model.get("title")), ratio(runs), legend(),
        ...runs.map((run) => grid(run, requests)));
    } catch (err) {
      body.replaceChildren(KV.h("div", { class: "kv-error" }, `This view could not draw its data: ${err.message}`));
    }
  };
  draw();
  const names = "change:runs change:requests change:title";
  model.on(names, draw);
  return () => { cleanup(); model.off(names, draw); };
}

export default { render };
