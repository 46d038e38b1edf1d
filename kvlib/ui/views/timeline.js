// The serving timeline: per run, rows are batch slots and columns steps; a cell names the request in that slot.
// Prefill cells are hatched, bold and marked ▸ (↺ when they read cached blocks: prefix caching); decode cells plain;
// idle slots dotted, a grey ·: colour is never the only cue. Hover a cell for its request; its cells light up in
// every run. Under the slots, per step the blocks in use and, above them, those the index keeps that nobody holds.
// DOM hooks: .kv-sv-run[data-policy][data-name], td.kv-sv-cell[data-slot][data-step] with data-request, data-kind
// (prefill | decode | idle) and, on a prefill, data-reused (prompt tokens read from cached blocks),
// td.kv-sv-blocks[data-step] (span.kv-sv-inuse, span.kv-sv-cached), .kv-sv-figures, .kv-sv-ratio;
// .kv-error / .kv-empty in place.

const ms = (x) => `${KV.num(x, 1)} ms`;
const pct = (x) => `${Math.round(100 * x)}%`;

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "timeline");
  const w = model.get("words");  // labels in the notebook's language (kvlib.i18n), {names} filled by KV.fill
  const say = (key, values) => KV.fill(w[key], values);
  const count = (n, what) => KV.count(n, w[what], w[`${what}s`]);  // "4 slots", "4 个槽位"
  const lightRequest = (i) => {  // every cell of request i, in every run; null: none
    body.querySelectorAll(".kv-sv-cell.kv-linked").forEach((c) => c.classList.remove("kv-linked"));
    if (i !== null) body.querySelectorAll(`.kv-sv-cell[data-request="${i}"]`).forEach((c) => c.classList.add("kv-linked"));
  };
  const hatched = (i) => `repeating-linear-gradient(135deg, ${KV.TINTS[i % KV.TINTS.length]} 0 4px, #fff 4px 6px)`;

  function figures(run) {
    return say("figures", { name: run.name, slots: count(run.max_batch, "slot"), steps: count(run.cells.length, "step"),
      tokens: KV.int(run.tokens), ms: ms(run.ms), rate: KV.int(Math.round(run.tokens_per_second)),
      latency: ms(run.mean_latency_ms), ttft: ms(run.mean_ttft_ms), idle: pct(run.idle) });
  }

  function grid(run, requests) {
    const first = requests.map(() => -1);  // the step of each request's prefill
    run.cells.forEach((step, k) => step.forEach((c) => { if (c && c[1] === "prefill") first[c[0]] = k; }));
    const waiting = (k) => first.filter((f) => f > k).length;
    const head = KV.h("tr", {}, KV.h("th", { class: "kv-corner" }, w.step_head),
      run.cells.map((_, k) => KV.h("th", { class: "kv-sv-step" }, k % 10 === 0 ? String(k) : "")));
    const rows = [...Array(run.max_batch).keys()].map((slot) => KV.h("tr", { dataset: { slot } },
      KV.h("th", { class: "kv-rowhead" }, say("slot_head", { slot })),
      run.cells.map((step, k) => {
        const c = step[slot], kind = c ? c[1] : "idle";
        const td = KV.h("td", { class: `kv-sv-cell kv-sv-${kind}`, dataset: { slot, step: k, kind } });
        if (!c) {
          td.textContent = "·";
          return KV.hoverable(td, tip, () => [say("idle_tip", { run: run.name, step: k, slot }),
            say("waiting", { requests: count(waiting(k), "request") }), run.policy === "static" ? w.static_wait : ""]
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
          say("cell_tip", { label: q.label, run: run.name, step: k, slot }),
          kind === "decode" ? say("decode_tip", { k: k - first[i] + 1, n: q.answer }) : !s.reused ? w.prefill :
            say("reused_tip", { reused: KV.int(s.reused), prompt: count(q.prompt, "prompt_token"),
                                computed: KV.int(q.prompt - s.reused) }),
          say("lengths", { prompt: count(q.prompt, "token"), answer: count(q.answer, "token") }),
          say("times", { ttft: ms(s.ttft_ms), latency: ms(s.latency_ms) })]);
      })));
    const blocks = KV.h("tr", { class: "kv-sv-blockrow" }, KV.h("th", { class: "kv-rowhead" }, w.blocks_head),
      run.blocks.map((b, k) => KV.hoverable(KV.h("td", { class: "kv-sv-blocks", dataset: { step: k } },
        KV.h("span", { class: "kv-sv-cached", style: { height: `${100 * run.cached[k] / run.n_blocks}%` } }),
        KV.h("span", { class: "kv-sv-inuse", style: { height: `${100 * b / run.n_blocks}%` } })), tip,
        () => [say("blocks_tip", { run: run.name, step: k, used: b, n: run.n_blocks, size: run.block_size }),
               say("cached_tip", { blocks: count(run.cached[k], "block") }), say("took", { ms: ms(run.step_ms[k]) })])));
    return KV.h("div", { class: "kv-sv-run", dataset: { policy: run.policy, name: run.name } },
      KV.h("div", { class: "kv-sv-figures" }, figures(run)),
      KV.h("div", { class: "kv-caption" }, say("caption", { allocated: KV.int(run.blocks_allocated),
        freed: KV.int(run.blocks_freed), cached: KV.int(run.blocks_cached), n: run.n_blocks })),
      KV.h("div", { class: "kv-sv-scroll" },
        KV.h("table", { class: "kv-table kv-sv-grid" }, KV.h("thead", {}, head), KV.h("tbody", {}, rows, blocks))));
  }

  function ratio(runs) {
    const by = Object.fromEntries(runs.map((r) => [r.policy, r]));
    if (!by.static || !by.continuous) return null;
    const [s, c] = [by.static, by.continuous];
    return KV.h("div", { class: "kv-sv-ratio" }, say("ratio", { rate: (c.tokens_per_second / s.tokens_per_second).toFixed(2),
      latency: (c.mean_latency_ms / s.mean_latency_ms).toFixed(2), ttft: (c.mean_ttft_ms / s.mean_ttft_ms).toFixed(2),
      steps: c.cells.length, static: s.cells.length }));
  }

  const legend = () => KV.h("div", { class: "kv-legend" }, ["prefill", "reused", "decode", "idle"].map((kind) =>
    KV.h("span", { class: "kv-key" }, KV.h("span", { class: `kv-sv-cell kv-sv-${kind === "reused" ? "prefill" : kind}`,
      style: kind === "idle" ? {} : { background: kind === "decode" ? KV.TINTS[0] : hatched(0) } },
      { idle: "·", prefill: "▸A", reused: "↺A", decode: "A" }[kind]), ` ${w[kind]}`)));

  const draw = () => {
    try {
      const runs = model.get("runs"), requests = model.get("requests");
      if (!runs.length) {
        body.replaceChildren(KV.h("div", { class: "kv-empty" }, w.empty));
        return;
      }
      // no ratio line unless a static and a continuous run are both shown (replaceChildren would print a null)
      body.replaceChildren(...[KV.h("div", { class: "kv-title" }, model.get("title")), ratio(runs), legend(),
        ...runs.map((run) => grid(run, requests))].filter(Boolean));
    } catch (err) {
      body.replaceChildren(KV.h("div", { class: "kv-error" }, say("broken", { error: err.message })));
    }
  };
  draw();
  const names = "change:runs change:requests change:title";
  model.on(names, draw);
  return () => { cleanup(); model.off(names, draw); };
}

export default { render };
