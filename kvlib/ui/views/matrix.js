// View 2: a labelled matrix; the row just appended slides in and stays marked (▶ and an outline)

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "matrix");
  let shown = -1;
  const draw = () => {
    const newRow = model.get("new_row");
    const m = KV.matrix({ values: model.get("values"), rows: model.get("rows"), title: model.get("title"),
                          digits: model.get("digits"), newRow, link: model.get("link"), tip });
    if (newRow >= 0 && newRow !== shown) m.querySelector(".kv-new")?.classList.add("kv-slide");
    shown = newRow;
    body.replaceChildren(m);
  };
  draw();
  const names = ["values", "rows", "title", "new_row"].map((n) => `change:${n}`).join(" ");
  model.on(names, draw);
  return () => { cleanup(); model.off(names, draw); };
}

export default { render };
