// View 3: the attention grid, filling row by row. Play, ◀ ▶, the step slider, the layer and head
// all run here; the kernel hears only "send layer l" when a layer was not sent (a big model).
//
// DOM hooks the tests read: the view root (.kv-att) carries data-step, data-layer and data-head (a number
// or "mean"); each shown row is a tr.kv-att-row with data-pos (the token looking), its label th.kv-rowhead;
// column labels are th.kv-att-col and cells td.kv-att-cell, both with data-col (the token looked at);
// masked cells are .kv-masked, the newest row .kv-new; buttons: "◀", "Play" (then "Pause"), "▶";
// the slider input.kv-slider; selects select.kv-att-layer and select.kv-att-head; the head
// thumbnails button.kv-att-thumb; notes .kv-note. Cell tooltip: "'<query>' looks at '<key>': 0.440".

const DENSE = 14;  // more tokens than this: small cells, numbers only on hover

function render({ model, el }) {
  const { root, tip, body, redrawn, cleanup } = KV.frame(model, el, "att");
  const words = model.get("words");  // labels in the notebook's language (kvlib.i18n)
  let step = model.get("step"), layer = model.get("layer"), head = model.get("head"), shown = step;
  const last = () => model.get("tokens").length - model.get("prompt_len");  // the last step
  const headName = (h) => (h === "mean" ? words.mean : KV.fill(words.head_n, { h }));

  // the controls, built once; draw() updates what they show
  const steps = KV.stepper(last, () => step, (s) => { step = s; draw(); }, 1200, words);
  const stepText = KV.h("span", { class: "kv-att-steptext" });
  const layerSel = KV.h("select", { class: "kv-att-layer", onchange: (e) => { layer = +e.target.value; draw(true); } },
    model.get("weights").map((_, l) => KV.h("option", { value: l }, KV.fill(words.layer_n, { l }))));
  const nHead = () => model.get("weights").find((w) => w)?.length ?? 0;
  const headSel = KV.h("select", { class: "kv-att-head", onchange: (e) => pickHead(e.target.value) },
    [...Array(nHead()).keys()].map((h) => KV.h("option", { value: h }, headName(h))),
    KV.h("option", { value: "mean" }, headName("mean")));
  const thumbs = KV.h("div", { class: "kv-att-thumbs" });
  const grid = KV.h("div", { class: "kv-att-scroll" });
  const aloud = KV.h("div", { class: "kv-note" }), note = KV.h("div", { class: "kv-note" });
  const stepping = KV.h("span", { class: "kv-controls" }, steps.el, stepText);
  body.replaceChildren(
    KV.h("div", { class: "kv-title" }, model.get("title")),
    KV.h("div", { class: "kv-caption" }, words.caption),
    KV.h("div", { class: "kv-controls" }, stepping, KV.h("label", {}, words.layer, layerSel), KV.h("label", {}, words.head, headSel)),
    thumbs, grid, aloud, note);

  function pickHead(v) { head = v === "mean" ? "mean" : +v; draw(); }

  function meanOf(heads) {  // [nh][n][n] -> [n][n]
    return heads[0].map((row, i) => row.map((_, j) => heads.reduce((a, w) => a + w[i][j], 0) / heads.length));
  }

  // one head's grid as a picture, a pixel per cell, to click: every head of the layer at a glance
  function thumb(w, n, h) {
    const c = KV.h("canvas", { width: n, height: n });
    const g = c.getContext("2d");
    for (let i = 0; i < n; i++) for (let j = 0; j <= i; j++) { g.fillStyle = KV.heat(w[i][j], 1); g.fillRect(j, i, 1, 1); }
    return KV.h("button", { type: "button", class: "kv-att-thumb" + (h === head ? " kv-selected" : ""),
                            "aria-pressed": String(h === head), onclick: () => pickHead(String(h)) },
      c, KV.h("span", {}, h === "mean" ? words.average : KV.fill(words.head_n, { h })));
  }

  function table(w, n, tokens, link) {  // the grid of the first n tokens: w [n][n]
    const dense = n > DENSE;
    const q = (i) => KV.quoted(tokens[i]);
    const colRow = KV.h("tr", {}, KV.h("th", { class: "kv-corner" }, words.corner),
      tokens.slice(0, n).map((t, j) => KV.hoverable(KV.h("th", { class: "kv-att-col", dataset: { col: j } }, KV.label(t)),
        tip, () => KV.fill(words.col, { q: q(j), j }), link, j)));
    const rows = w.slice(0, n).map((row, i) => KV.h("tr", { class: "kv-att-row" + (step > 0 && i === n - 1 ? " kv-new" : ""),
                                                        dataset: { pos: i } },
      KV.hoverable(KV.h("th", { class: "kv-rowhead", dataset: { pos: i } }, (step > 0 && i === n - 1 ? "▶ " : "") + KV.label(tokens[i])),
        tip, () => KV.fill(i ? words.row : words.row_one, { q: q(i), i, n: i + 1 }), link, i),
      row.slice(0, n).map((v, j) => KV.hoverable(
        j > i ? KV.h("td", { class: "kv-att-cell kv-masked", dataset: { col: j } })
              : KV.h("td", { class: "kv-att-cell", dataset: { col: j }, style: { background: KV.heat(v, 1) } }, dense ? "" : KV.num(v, 2)),
        tip, () => (j > i ? [KV.fill(words.masked, { q: q(i), k: q(j) }), words.masked_why]
                          : [KV.fill(words.cell, { q: q(i), k: q(j), v: KV.num(v, 3) }), KV.fill(words.where, { layer, head: headName(head) })]),
        link, i))));
    return KV.h("table", { class: "kv-table kv-att-grid" + (dense ? " kv-dense" : "") },
      KV.h("thead", {}, colRow), KV.h("tbody", {}, rows));
  }

  function draw(ask = false) {  // ask: the learner picked this layer, so fetch it if the kernel kept it back
    const tokens = model.get("tokens"), link = model.get("link"), heads = model.get("weights")[layer];
    const n = model.get("prompt_len") + step;
    Object.assign(root.dataset, { step, layer, head });
    stepping.style.display = last() ? "" : "none";  // nothing to step: the whole text at once
    steps.show(step);
    stepText.textContent = KV.fill(words.at, { step, last: last(), n });
    layerSel.value = layer;
    headSel.value = head;
    const notes = model.get("notes");
    note.textContent = notes[step] || "";
    if (!heads) {  // a layer the kernel did not send: ask for it once (change:weights draws it)
      if (ask) { model.set("layer", layer); model.save_changes(); }
      grid.replaceChildren(KV.h("div", { class: "kv-note" }, ask || model.get("layer") === layer
        ? KV.fill(words.loading, { layer }) : KV.fill(words.set_aside, { layer })));
      thumbs.replaceChildren();
      aloud.textContent = "";
      return;
    }
    const mean = meanOf(heads), w = head === "mean" ? mean : heads[head];
    grid.replaceChildren(table(w, n, tokens, link));
    redrawn();
    if (step === shown + 1) grid.querySelector(".kv-new")?.classList.add("kv-slide");
    shown = step;
    thumbs.replaceChildren(...heads.map((hw, h) => thumb(hw, n, h)), thumb(mean, n, "mean"));
    const top = w[n - 1].slice(0, n).reduce((b, v, j, r) => (v > r[b] ? j : b), 0);
    aloud.textContent = KV.fill(words.aloud, { layer, head: headName(head), q: KV.quoted(tokens[n - 1]),
                                           k: KV.quoted(tokens[top]), v: KV.num(w[n - 1][top], 2) });
  }

  draw();
  const redraw = () => draw();  // Backbone passes the model: not a request to fetch
  model.on("change:weights", redraw);
  return () => { steps.stop(); cleanup(); model.off("change:weights", redraw); };
}

export default { render };
