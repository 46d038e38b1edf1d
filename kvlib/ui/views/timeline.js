// The serving timeline: per run, rows are batch slots and columns steps; a cell names the request in that slot.
// Prefill cells are hatched, bold and marked ▸ (↺ when they read cached blocks: prefix caching), a chunk of a longer
// prefill (step_tokens) with its token count under the letter; decode cells plain; a preempted request's cell, at the
// step it gave its blocks back, dashed and marked ✕; idle slots dotted, a grey ·: colour is never the only cue. Hover
// a cell for its request and what the step cost it; its cells light up in every run. Under the slots, per step the
// blocks in use and, above them, those the index keeps that nobody holds.
// DOM hooks: .kv-sv-run[data-policy][data-name], td.kv-sv-cell[data-slot][data-step] with data-request, data-kind
// (prefill | decode | preempted | idle), data-fed (tokens fed) and, on a prefill, data-reused (prompt tokens read
// from cached blocks) and, on a chunk, data-chunk (its number in its prefill, from 1) with span.kv-sv-n;
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

  function figures(run) {  // with preemption or a step budget, also what they cost in tokens fed
    const costs = run.preemptions || run.step_tokens ? [say("fed", { preemptions: count(run.preemptions, "preemption"),
      fed: KV.int(run.tokens_fed) }), run.step_tokens ? say("budget", { n: KV.int(run.step_tokens) }) : ""] : [];
    return [say("figures", { name: run.name, slots: count(run.max_batch, "slot"), steps: count(run.cells.length, "step"),
      tokens: KV.int(run.tokens), ms: ms(run.ms), rate: KV.int(Math.round(run.tokens_per_second)),
      latency: ms(run.mean_latency_ms), ttft: ms(run.mean_ttft_ms), idle: pct(run.idle) }), ...costs]
      .filter(Boolean).join(" · ");
  }

  // request i's cell at step k, in whichever slot (null: none); a prefill's chunks: the steps of its prefill around k
  const cellOf = (run, i, k) => (run.cells[k] || []).find((c) => c && c[0] === i) || null;
  const prefilling = (run, i, k) => (cellOf(run, i, k) || [])[1] === "prefill";
  function chunks(run, i, k) {  // -> [steps] of the prefill that step k is part of, in order
    let a = k, b = k;
    while (prefilling(run, i, a - 1)) a -= 1;
    while (prefilling(run, i, b + 1)) b += 1;
    return [...Array(b - a + 1).keys()].map((j) => a + j);
  }
  const fedIn = (run, i, ks) => ks.reduce((n, k) => n + cellOf(run, i, k)[2], 0);

  function grid(run, requests) {
    const start = requests.map(() => -1), made = requests.map(() => 0), token = run.cells.map(() => ({}));
    run.cells.forEach((step, k) => step.forEach((c) => {  // each request's first step; the token each cell picked
      if (!c) return;
      if (start[c[0]] < 0) start[c[0]] = k;
      if (c[1] === "decode" || c[1] === "prefill" && !prefilling(run, c[0], k + 1)) token[k][c[0]] = made[c[0]] += 1;
    }));
    const waiting = (k) => start.filter((f) => f > k).length;
    const preemptedBefore = (i, k) => run.cells.slice(0, k).some((step) =>
      step.some((c) => c && c[0] === i && c[1] === "preempted"));
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
        const [i, , fed] = c, q = requests[i], s = run.served[i];
        const part = kind === "prefill" ? chunks(run, i, k) : [], again = kind === "prefill" && preemptedBefore(i, k);
        td.dataset.request = i;
        td.dataset.fed = fed;
        td.style.background = kind === "prefill" ? hatched(i) : kind === "decode" ? KV.TINTS[i % KV.TINTS.length] : "";
        if (kind === "prefill") td.dataset.reused = s.reused;
        td.textContent = `${kind === "prefill" ? (s.reused ? "↺" : "▸") : kind === "preempted" ? "✕" : ""}${q.label}`;
        if (part.length > 1) {  // a chunk: its token count under the letter, so the row reads 4, 13, 13, ... 5
          td.dataset.chunk = part.indexOf(k) + 1;
          td.append(KV.h("span", { class: "kv-sv-n" }, String(fed)));
        }
        td.addEventListener("mouseenter", () => lightRequest(i));
        td.addEventListener("mouseleave", () => lightRequest(null));
        const what = () => {
          if (kind === "decode") return [say("decode_tip", { k: token[k][i], n: q.answer })];
          const back = run.cells.findIndex((step, j) => j > k && step.some((x) => x && x[0] === i));  // readmitted
          if (kind === "preempted") return [w.preempted_tip, back < 0 ? "" : say("preempted_cost", {
            steps: count(back - k, "step"), again: back, tokens: count(fedIn(run, i, chunks(run, i, back)), "token") })];
          return [again ? say("recompute_tip", { tokens: count(fedIn(run, i, part), "token") }) : s.reused ?
            say("reused_tip", { reused: KV.int(s.reused), prompt: count(q.prompt, "prompt_token"),
                                computed: KV.int(q.prompt - s.reused) }) : part.length > 1 ? "" : w.prefill,
          part.length > 1 ? say("chunk_tip", { m: part.length, budget: KV.int(run.step_tokens), j: part.indexOf(k) + 1,
            tokens: count(fed, "token"), done: KV.int(fedIn(run, i, part.slice(0, part.indexOf(k) + 1))),
            total: KV.int(fedIn(run, i, part)) }) : ""];
        };
        return KV.hoverable(td, tip, () => [say("cell_tip", { label: q.label, run: run.name, step: k, slot }), ...what(),
          say("lengths", { prompt: count(q.prompt, "token"), answer: count(q.answer, "token") }),
          s.preempted ? say("preempted_times", { n: count(s.preempted, "preemption") }) : "",
          say("times", { ttft: ms(s.ttft_ms), latency: ms(s.latency_ms) })].filter(Boolean));
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

  const legend = (runs) => {  // the reused, chunk and preempted keys only where a run shows them
    const has = (kind) => kind === "reused" ? runs.some((r) => r.served.some((s) => s.reused)) :
      runs.some((r) => r.cells.some((step, k) => step.some((c) => c && (kind === "preempted" ?
        c[1] === kind : c[1] === "prefill" && chunks(r, c[0], k).length > 1))));
    const keys = ["prefill", "reused", "chunk", "decode", "preempted", "idle"]
      .filter((k) => !["reused", "chunk", "preempted"].includes(k) || has(k));
    const box = (kind) => KV.h("span", { class: `kv-sv-cell kv-sv-${{ reused: "prefill", chunk: "prefill" }[kind] || kind}`,
      style: ["idle", "preempted"].includes(kind) ? {} : { background: kind === "decode" ? KV.TINTS[0] : hatched(0) } },
      { idle: "·", prefill: "▸A", reused: "↺A", chunk: "▸A", decode: "A", preempted: "✕A" }[kind],
      kind === "chunk" ? KV.h("span", { class: "kv-sv-n" }, "n") : []);
    return KV.h("div", { class: "kv-legend" },
      keys.map((kind) => KV.h("span", { class: "kv-key" }, box(kind), ` ${w[kind]}`)));
  };

  const draw = () => {
    try {
      const runs = model.get("runs"), requests = model.get("requests");
      if (!runs.length) {
        body.replaceChildren(KV.h("div", { class: "kv-empty" }, w.empty));
        return;
      }
      // no ratio line unless a static and a continuous run are both shown (replaceChildren would print a null)
      body.replaceChildren(...[KV.h("div", { class: "kv-title" }, model.get("title")), ratio(runs), legend(runs),
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
