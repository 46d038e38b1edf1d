// View 4: the KV cache per layer, growing during decode.
// DOM hooks: the root carries data-step; each layer is .kv-layer[data-layer=l] holding one .kv-kvrow per
// cached token (data-pos = its position); .kv-total holds the measured bytes of the step shown;
// .kv-layer-bytes each layer's; the stepper's ◀, Play/Pause, ▶ and input.kv-slider (common.js).

function render({ model, el }) {
  const { root, tip, body, redrawn, cleanup } = KV.frame(model, el, "cachegrowth");
  const sh = model.get("shape"), tokens = model.get("tokens"), fed = model.get("fed");
  const nbytes = model.get("nbytes"), layerBytes = model.get("layer_nbytes");
  const keys = model.get("k_rows"), values = model.get("v_rows"), link = model.get("link");
  const last = fed.length - 1, compact = sh.n_layer > 12;
  const perLine = compact ? 10 : Math.min(sh.n_layer, 6);  // layers side by side, in lines that fit the page
  const rowBytes = sh.bytes_per_token / sh.n_layer / 2;  // one K (or V) row of one layer
  const held = (s) => fed.slice(0, s + 1).reduce((a, b) => a + b, 0);
  const max = Math.max(KV.absMax(keys.flat(2)), KV.absMax(values.flat(2)));
  let step = Math.min(model.get("step"), last), drawn = -1;

  const steps = KV.stepper(() => last, () => step, (s) => show(s), 900);
  const where = KV.h("span", { class: "kv-caption" });
  const headline = KV.h("div", { class: "kv-note" }), sum = KV.h("div", { class: "kv-note kv-mono" });
  const grid = KV.h("div", { class: "kv-tower" + (compact ? " kv-compact" : "") });
  body.append(KV.h("div", { class: "kv-title" }, `The KV cache of ${model.get("model_name")}: ${sh.n_layer} layers, ` +
                 `each keeping one K row and one V row per token`),
              KV.h("div", { class: "kv-controls" }, steps.el, where), headline, sum, grid);

  const strip = (vals, kind) => KV.h("span", { class: `kv-vec kv-${kind}` },
    vals.map((v) => KV.h("span", { class: "kv-px", style: { background: KV.heat(v, max) } })));

  function row(l, t, isNew) {
    const lines = () => [
      `${KV.quoted(tokens[t])} · position ${t} · layer ${l}`,
      `its K and V rows here: 2 × ${sh.n_kv_head} KV heads × ${sh.head_dim} numbers × ${sh.bytes_per_number} bytes = ${KV.int(2 * rowBytes)} bytes`,
      `K, KV head 0, dims 0–${sh.preview - 1}: ${keys[l][t].map((x) => KV.num(x)).join(" ")}`,
      `V, KV head 0, dims 0–${sh.preview - 1}: ${values[l][t].map((x) => KV.num(x)).join(" ")}`];
    return KV.hoverable(KV.h("div", { class: "kv-kvrow" + (isNew ? " kv-new" : ""), dataset: { pos: t } },
      strip(keys[l][t], "k"), strip(values[l][t], "v")), tip, lines, link, t);
  }

  function labels(n, newFrom) {
    return KV.h("div", { class: "kv-labels" }, KV.h("div", { class: "kv-lhead" }, "token"), KV.h("div", { class: "kv-lhead" }, ""),
      [...Array(n).keys()].map((t) => KV.hoverable(KV.h("div", { class: "kv-tokname" + (t >= newFrom ? " kv-new" : ""), dataset: { pos: t } },
        (t >= newFrom ? "▶ " : "") + KV.label(tokens[t])), tip, () => `${KV.quoted(tokens[t])} · position ${t}`, link, t)),
      KV.h("div", { class: "kv-lfoot" }, "bytes"));
  }

  function show(s) {
    s = Math.max(0, Math.min(last, s));
    const grew = s === drawn + 1;
    step = s; drawn = s; root.dataset.step = s;
    steps.show(s);
    const n = held(s), newFrom = n - fed[s];
    where.textContent = `step ${s} of ${last}`;
    headline.replaceChildren(s === 0
      ? `Step 0, the prefill: the prompt's ${n} tokens go in at once, and every layer stores ${n} K rows and ${n} V rows.`
      : `Step ${s}: fed one token, ${KV.quoted(tokens[n - 1])}; every layer appended 1 K row and 1 V row and now holds ${n}.`);
    const formula = n * sh.bytes_per_token;
    sum.replaceChildren(`${n} tokens × 2 × ${sh.n_layer} layers × ${sh.n_kv_head} KV heads × ${sh.head_dim} × ` +
      `${sh.bytes_per_number} bytes = ${KV.int(formula)} bytes; cache.nbytes, measured: `,
      KV.h("b", { class: "kv-total" }, `${KV.int(nbytes[s])} bytes`), formula === nbytes[s] ? " ✓" : " ✗ (differs)");
    const lines = [];
    for (let first = 0; first < sh.n_layer; first += perLine) {
      const layers = [];
      for (let l = first; l < Math.min(sh.n_layer, first + perLine); l++) {
        const rows = [...Array(n).keys()].map((t) => row(l, t, t >= newFrom && s > 0));
        if (grew && s > 0) rows[n - 1].classList.add("kv-slide");
        layers.push(KV.h("div", { class: "kv-layer", dataset: { layer: l } },
          KV.h("div", { class: "kv-lhead" }, compact ? `L${l}` : `layer ${l}`),
          KV.h("div", { class: "kv-lhead kv-kv" }, KV.h("span", {}, "K"), KV.h("span", {}, "V")),
          rows, KV.h("div", { class: "kv-layer-bytes", title: `layer ${l}: bytes held` },
            compact ? `${(layerBytes[s][l] / 1024).toFixed(1)} KiB` : `${KV.int(layerBytes[s][l])} B`)));
      }
      lines.push(KV.h("div", { class: "kv-line" }, labels(n, s > 0 ? newFrom : n), layers));
    }
    grid.replaceChildren(...lines);
    redrawn();
  }
  show(step);
  return () => { steps.stop(); cleanup(); };
}

export default { render };
