// The worked step: one cached decode step of one head, part by part (◀ Back / Next ▶).
// DOM hooks: each part is a .kv-part[data-part=name] card (q, K, scores, mask, weights, V, out); the part
// being explained has .kv-current, the parts it is computed from .kv-input; .kv-explain says how, with
// the numbers; the root carries data-part. The parts come in the order the step computes them (step.py).

const INPUTS = { q: [], K: [], scores: ["q", "K"], mask: ["scores"], weights: ["scores", "mask"], V: [], out: ["weights", "V"] };

function render({ model, el }) {
  const { root, tip, body, cleanup } = KV.frame(model, el, "step");
  const P = model.get("parts"), STEP_PARTS = model.get("order"), tokens = model.get("tokens"), d = model.get("digits"), hs = model.get("head_dim");
  const S = tokens.length, me = KV.quoted(tokens[S - 1]), link = model.get("link"), toy = model.get("toy");
  const w = model.get("words");  // labels in the notebook's language (kvlib.i18n)
  const n = (x) => KV.num(x, d);
  const terms = (a, b) => {  // "0.40×0.50 + −0.20×0.10 + …" (the first 4 products when there are many)
    const shown = a.slice(0, 4).map((x, i) => `${n(x)}×${n(b[i])}`).join(" + ");
    return a.length > 4 ? KV.fill(w.products, { shown, n: a.length }) : shown;
  };
  const col = (m, j) => m.map((r) => r[j]);
  const whole = model.get("prefill");  // the last row of a prefill: no cache yet, every row computed at once
  const of = (key) => w[whole && w[`${key}_prefill`] ? `${key}_prefill` : key];  // a prefill's own words, where it has them
  const first = KV.quoted(tokens[0]);
  const say = {
    q: () => KV.fill(of("q"), { me, hs }),
    K: () => KV.fill(of("K"), { cached: S - 1, S, hs }),
    scores: () => KV.fill(w.scores, { hs, first, terms: terms(P.q[0], P.K[0]), root: n(Math.sqrt(hs)), score: n(P.scores[0][0]) }),
    mask: () => KV.fill(of("mask"), { me, S }),
    weights: () => {
      const e = P.scores[0].map(Math.exp), total = e.reduce((a, b) => a + b, 0);
      return KV.fill(w.weights, { first, score: n(P.scores[0][0]), total: n(total), weight: n(P.weights[0][0]) });
    },
    V: () => KV.fill(of("V"), { cached: S - 1, S, hs }),
    out: () => KV.fill(of("out"), { terms: terms(P.weights[0], col(P.V, 0)), value: n(P.out[0][0]), hs }),
  };
  const names = { q: "q", K: whole ? "K" : w.name_K, scores: `scores = q·Kᵀ / √${hs}`, mask: w.name_mask,
                  weights: "weights = softmax", V: whole ? "V" : w.name_V, out: "out = weights · V" };
  const rowOf = { q: [tokens[S - 1]], scores: [tokens[S - 1]], mask: [tokens[S - 1]], weights: [tokens[S - 1]], out: [tokens[S - 1]] };
  let at = 0;
  const back = KV.button(w.back, () => show(at - 1)), next = KV.button(w.next, () => show(at + 1));
  const where = KV.h("span", { class: "kv-caption" }), explain = KV.h("div", { class: "kv-explain" });
  const cards = Object.fromEntries(STEP_PARTS.map((p, i) => {
    const byToken = ["scores", "mask", "weights"].includes(p);
    const rows = rowOf[p] || tokens, isKV = p === "K" || p === "V";
    const m = KV.matrix({ values: P[p], rows, digits: d, tip, link, newRow: isKV ? S - 1 : -1,
                          pos: isKV ? tokens.map((_, t) => t) : [S - 1], colLabels: byToken ? tokens : null,
                          colName: byToken ? w.token : w.dim,
                          words: { position: w.position, numbers: w.numbers, cols: byToken ? w.tokens : w.dims } });
    return [p, KV.h("div", { class: "kv-part", dataset: { part: p } },
      KV.h("div", { class: "kv-part-title" }, `${i + 1} · ${names[p]}`, KV.h("span", { class: "kv-badge" })), m)];
  }));
  body.append(KV.h("div", { class: "kv-title" }, model.get("title")),
              toy ? KV.h("div", { class: "kv-caption" }, w.toy) : "",
              KV.h("div", { class: "kv-controls" }, back, next, where), explain,
              KV.h("div", { class: "kv-parts" }, STEP_PARTS.map((p) => cards[p])));

  function show(i) {
    at = Math.max(0, Math.min(STEP_PARTS.length - 1, i));
    const part = STEP_PARTS[at];
    root.dataset.part = part;
    where.textContent = KV.fill(w.where, { k: at + 1, n: STEP_PARTS.length, name: names[part] });
    explain.textContent = say[part]();
    STEP_PARTS.forEach((p, k) => {
      const c = cards[p], current = p === part, input = INPUTS[part].includes(p);
      c.classList.toggle("kv-current", current);
      c.classList.toggle("kv-input", input);
      c.classList.toggle("kv-later", k > at);
      c.querySelector(".kv-badge").textContent = current ? w.now : input ? w.input : "";
    });
    back.disabled = at === 0; next.disabled = at === STEP_PARTS.length - 1;
  }
  show(0);
  return cleanup;
}

export default { render };
