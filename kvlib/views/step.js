// The worked step: one cached decode step of one head, part by part (◀ Back / Next ▶).
// DOM hooks: each part is a .kv-part[data-part=name] card (q, K, scores, mask, weights, V, out); the part
// being explained has .kv-current, the parts it is computed from .kv-input; .kv-explain says how, with
// the numbers; the root carries data-part. The parts come in the order the step computes them (step.py).

const INPUTS = { q: [], K: [], scores: ["q", "K"], mask: ["scores"], weights: ["scores", "mask"], V: [], out: ["weights", "V"] };

function render({ model, el }) {
  const { root, tip, body, cleanup } = KV.frame(model, el, "step");
  const P = model.get("parts"), STEP_PARTS = model.get("order"), tokens = model.get("tokens"), d = model.get("digits"), hs = model.get("head_dim");
  const S = tokens.length, me = KV.quoted(tokens[S - 1]), link = model.get("link"), toy = model.get("toy");
  const n = (x) => KV.num(x, d);
  const terms = (a, b) => {  // "0.40×0.50 + −0.20×0.10 + …" (the first 4 products when there are many)
    const shown = a.slice(0, 4).map((x, i) => `${n(x)}×${n(b[i])}`).join(" + ");
    return a.length > 4 ? `${shown} + … (${a.length} products)` : shown;
  };
  const col = (m, j) => m.map((r) => r[j]);
  const whole = model.get("prefill");  // the last row of a prefill: no cache yet, every row computed at once
  const say = whole ? {
    q: () => `The last token ${me}'s query q: its row of Q, ${hs} numbers.`,
    K: () => `K: every token's key, ${S} × ${hs}, the last token's own included (▶).`,
    V: () => `V: every token's value, ${S} × ${hs} (▶ the last token's).`,
  } : {};
  Object.assign(say, {
    q: say.q || (() => `The new token ${me} is fed alone. Its query q is one row of ${hs} numbers: what it is looking for.`),
    K: say.K || (() => `Its key is appended to the ${S - 1} cached keys (▶ marks the new row). K is now ${S} × ${hs}; ` +
             `the older rows were read from the cache, not recomputed.`),
    scores: () => `One score per token: q · (its row of K) / √${hs}. For ${KV.quoted(tokens[0])}: ` +
                  `(${terms(P.q[0], P.K[0])}) / ${n(Math.sqrt(hs))} = ${n(P.scores[0][0])}.`,
    mask: () => `Nothing to hide: ${me} is the newest token, so every token ${whole ? "" : "in the cache "}is earlier ` +
                `(or itself). The mask adds 0 to all ${S} scores; −∞ would hide a later token, and there is none yet.`,
    weights: () => {
      const e = P.scores[0].map(Math.exp), total = e.reduce((a, b) => a + b, 0);
      return `softmax turns scores into weights that sum to 1: e^score / (sum of all e^score). For ` +
             `${KV.quoted(tokens[0])}: e^${n(P.scores[0][0])} / ${n(total)} = ${n(P.weights[0][0])}.`;
    },
    V: say.V || (() => `Its value is appended to the ${S - 1} cached values (▶): V is ${S} × ${hs}. Values are what each token gives.`),
    out: () => `The output mixes V's rows by the weights. Its first number: ${terms(P.weights[0], col(P.V, 0))} = ` +
               `${n(P.out[0][0])}. One row of ${hs}, the ${whole ? "last" : "only new"} row of this head's output.`,
  });
  const names = { q: "q", K: whole ? "K" : "K (cache + new row)", scores: `scores = q·Kᵀ / √${hs}`, mask: "mask",
                  weights: "weights = softmax", V: whole ? "V" : "V (cache + new row)", out: "out = weights · V" };
  const rowOf = { q: [tokens[S - 1]], scores: [tokens[S - 1]], mask: [tokens[S - 1]], weights: [tokens[S - 1]], out: [tokens[S - 1]] };
  let at = 0;
  const back = KV.button("◀ Back", () => show(at - 1)), next = KV.button("Next ▶", () => show(at + 1));
  const where = KV.h("span", { class: "kv-caption" }), explain = KV.h("div", { class: "kv-explain" });
  const cards = Object.fromEntries(STEP_PARTS.map((p, i) => {
    const byToken = ["scores", "mask", "weights"].includes(p);
    const rows = rowOf[p] || tokens, isKV = p === "K" || p === "V";
    const m = KV.matrix({ values: P[p], rows, digits: d, tip, link, newRow: isKV ? S - 1 : -1,
                          pos: isKV ? tokens.map((_, t) => t) : [S - 1], colLabels: byToken ? tokens : null,
                          colName: byToken ? "token" : "dim" });
    return [p, KV.h("div", { class: "kv-part", dataset: { part: p } },
      KV.h("div", { class: "kv-part-title" }, `${i + 1} · ${names[p]}`, KV.h("span", { class: "kv-badge" })), m)];
  }));
  body.append(KV.h("div", { class: "kv-title" }, model.get("title")),
              toy ? KV.h("div", { class: "kv-caption" }, "Made-up numbers small enough to check by hand; the real head follows.") : "",
              KV.h("div", { class: "kv-controls" }, back, next, where), explain,
              KV.h("div", { class: "kv-parts" }, STEP_PARTS.map((p) => cards[p])));

  function show(i) {
    at = Math.max(0, Math.min(STEP_PARTS.length - 1, i));
    const part = STEP_PARTS[at];
    root.dataset.part = part;
    where.textContent = `part ${at + 1} of ${STEP_PARTS.length}: ${names[part]}`;
    explain.textContent = say[part]();
    STEP_PARTS.forEach((p, k) => {
      const c = cards[p], current = p === part, input = INPUTS[part].includes(p);
      c.classList.toggle("kv-current", current);
      c.classList.toggle("kv-input", input);
      c.classList.toggle("kv-later", k > at);
      c.querySelector(".kv-badge").textContent = current ? "  ◀ now" : input ? "  input" : "";
    });
    back.disabled = at === 0; next.disabled = at === STEP_PARTS.length - 1;
  }
  show(0);
  return cleanup;
}

export default { render };
