// View 4: the KV cache per layer, growing during decode.
// DOM hooks: the root carries data-step; each layer is .kv-layer[data-layer=l] holding one .kv-kvrow per
// cached token (data-pos = its position); .kv-total holds the measured bytes of the step shown;
// .kv-layer-bytes each layer's; the stepper's ◀, Play/Pause, ▶ and input.kv-slider (common.js).
// Above the layers, .kv-stack draws the same cache as a stack, layer 0 at the bottom: one .kv-stackcell per
// token and layer (data-t, data-layer; no data-pos, so it takes no part in linked highlighting); the new
// token's cells (.kv-climb) light up from the bottom layer to the top as it climbs the stack.

function render({ model, el }) {
  const { root, tip, body, redrawn, cleanup } = KV.frame(model, el, "cachegrowth");
  const w = model.get("words");  // labels in the notebook's language (kvlib.i18n)
  const sh = model.get("shape"), tokens = model.get("tokens"), fed = model.get("fed");
  const nbytes = model.get("nbytes"), layerBytes = model.get("layer_nbytes");
  const keys = model.get("k_rows"), values = model.get("v_rows"), link = model.get("link");
  const last = fed.length - 1, compact = sh.n_layer > 12;
  const perLine = compact ? 10 : Math.min(sh.n_layer, 6);  // layers side by side, in lines that fit the page
  // bytes per number from the data (kvlib's fp32 cache: 4; a page's fp16 one: 2), never assumed
  const perToken = 2 * sh.n_layer * sh.n_kv_head * sh.head_dim * sh.bytes_per_number;  // K and V, every layer
  const rowBytes = sh.n_kv_head * sh.head_dim * sh.bytes_per_number;  // one K (or V) row of one layer
  const held = (s) => fed.slice(0, s + 1).reduce((a, b) => a + b, 0);
  const max = Math.max(KV.absMax(keys.flat(2)), KV.absMax(values.flat(2)));
  let step = Math.min(model.get("step"), last), drawn = -1;

  const steps = KV.stepper(() => last, () => step, (s) => show(s), 900, w);
  const where = KV.h("span", { class: "kv-caption" });
  const headline = KV.h("div", { class: "kv-note" }), sum = KV.h("div", { class: "kv-note kv-mono" });
  const grid = KV.h("div", { class: "kv-tower" + (compact ? " kv-compact" : "") });
  const stack = KV.h("div", { class: "kv-stack" + (compact ? " kv-compact" : "") });
  const climbMs = Math.min(120, 600 / sh.n_layer);  // the climb ends well inside Play's step of 900 ms
  const since = (t) => Math.max(0, t - fed[0] + 1);  // the step that stored token t
  body.append(KV.h("div", { class: "kv-title" }, KV.fill(w.title, { model: model.get("model_name"), layers: sh.n_layer })),
              KV.h("div", { class: "kv-controls" }, steps.el, where), headline, sum, stack, grid);

  const strip = (vals, kind) => KV.h("span", { class: `kv-vec kv-${kind}` },
    vals.map((v) => KV.h("span", { class: "kv-px", style: { background: KV.heat(v, max) } })));

  function row(l, t, isNew) {
    const lines = () => [
      KV.fill(w.row, { q: KV.quoted(tokens[t]), t, l }),
      KV.fill(w.row_bytes, { nkv: sh.n_kv_head, hs: sh.head_dim, b: sh.bytes_per_number, total: KV.int(2 * rowBytes) }),
      KV.fill(w.k_nums, { last: sh.preview - 1, nums: keys[l][t].map((x) => KV.num(x)).join(" ") }),
      KV.fill(w.v_nums, { last: sh.preview - 1, nums: values[l][t].map((x) => KV.num(x)).join(" ") })];
    return KV.hoverable(KV.h("div", { class: "kv-kvrow" + (isNew ? " kv-new" : ""), dataset: { pos: t } },
      strip(keys[l][t], "k"), strip(values[l][t], "v")), tip, lines, link, t);
  }

  function labels(n, newFrom) {
    return KV.h("div", { class: "kv-labels" }, KV.h("div", { class: "kv-lhead" }, w.token), KV.h("div", { class: "kv-lhead" }, ""),
      [...Array(n).keys()].map((t) => KV.hoverable(KV.h("div", { class: "kv-tokname" + (t >= newFrom ? " kv-new" : ""), dataset: { pos: t } },
        (t >= newFrom ? "▶ " : "") + KV.label(tokens[t])), tip, () => KV.fill(w.tokname, { q: KV.quoted(tokens[t]), t }), link, t)),
      KV.h("div", { class: "kv-lfoot" }, w.bytes));
  }

  // the cache as a stack: rows are layers (the last on top), columns tokens; the history sits, the new token climbs
  function drawStack(s, n, newFrom, grew) {
    const rows = [];
    for (let l = sh.n_layer - 1; l >= 0; l--) {
      const named = sh.n_layer <= 12 || l % 5 === 0 || l === sh.n_layer - 1;
      const cells = [...Array(n).keys()].map((t) => {
        const climbing = t >= newFrom;  // the prefill's tokens all climb at step 0; later, the one fed
        const cell = KV.h("span", { class: "kv-stackcell" + (climbing ? " kv-climb" : ""), dataset: { t, layer: l },
                                    style: climbing && grew ? { animationDelay: `${Math.round(l * climbMs)}ms` } : {} });
        return KV.hoverable(cell, tip, () => KV.fill(climbing ? w.climbing : w.stored, { q: KV.quoted(tokens[t]), l, s: since(t) }));
      });
      rows.push(KV.h("div", { class: "kv-stackrow" }, KV.h("span", { class: "kv-stacklabel" }, named ? KV.fill(w.layer_n, { l }) : ""),
        cells, l === 0 ? KV.h("span", { class: "kv-stacknote" }, s === 0 ? w.prompt_enters
                                                                          : KV.fill(w.token_enters, { q: KV.quoted(tokens[n - 1]) })) : null));
    }
    stack.replaceChildren(KV.h("div", { class: "kv-caption" }, s === 0
      ? KV.fill(w.stack_prefill, { tokens: KV.fill(n === 1 ? w.tokens_one : w.tokens, { n: KV.int(n) }) })
      : KV.fill(w.stack_step, { history: KV.fill(newFrom === 1 ? w.history_one : w.history, { n: KV.int(newFrom) }) })), ...rows);
  }

  function show(s) {
    s = Math.max(0, Math.min(last, s));
    const grew = s === drawn + 1;
    step = s; drawn = s; root.dataset.step = s;
    steps.show(s);
    const n = held(s), newFrom = n - fed[s];
    where.textContent = KV.fill(w.where, { s, last });
    headline.replaceChildren(s === 0 ? KV.fill(w.prefill, { n })
      : KV.fill(w.decode, { s, q: KV.quoted(tokens[n - 1]), layers: sh.n_layer, n, old: n - 1 }));
    const formula = n * perToken;
    sum.replaceChildren(KV.fill(w.formula, { n, layers: sh.n_layer, nkv: sh.n_kv_head, hs: sh.head_dim,
                                             b: sh.bytes_per_number, formula: KV.int(formula) }),
      KV.h("b", { class: "kv-total" }, KV.fill(w.total, { total: KV.int(nbytes[s]) })), formula === nbytes[s] ? " ✓" : w.differs);
    const lines = [];
    for (let first = 0; first < sh.n_layer; first += perLine) {
      const layers = [];
      for (let l = first; l < Math.min(sh.n_layer, first + perLine); l++) {
        const rows = [...Array(n).keys()].map((t) => row(l, t, t >= newFrom && s > 0));
        if (grew && s > 0) rows[n - 1].classList.add("kv-slide");
        layers.push(KV.h("div", { class: "kv-layer", dataset: { layer: l } },
          KV.h("div", { class: "kv-lhead" }, compact ? `L${l}` : KV.fill(w.layer_n, { l })),
          KV.h("div", { class: "kv-lhead kv-kv" }, KV.h("span", {}, "K"), KV.h("span", {}, "V")),
          rows, KV.h("div", { class: "kv-layer-bytes", title: KV.fill(w.layer_held, { l }) },
            compact ? `${(layerBytes[s][l] / 1024).toFixed(1)} KiB` : `${KV.int(layerBytes[s][l])} B`)));
      }
      lines.push(KV.h("div", { class: "kv-line" }, labels(n, s > 0 ? newFrom : n), layers));
    }
    grid.replaceChildren(...lines);
    drawStack(s, n, newFrom, grew);
    redrawn();
  }
  show(step);
  return () => { steps.stop(); cleanup(); };
}

export default { render };
