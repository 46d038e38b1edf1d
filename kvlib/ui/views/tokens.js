// View 1: tokens as chips (colour per token, with its id beneath: the id is the second cue).
// DOM hooks: chips are .kv-chip[data-pos][data-id]; where two prompts part, a .kv-divider, then .kv-differs chips.

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "tokens");
  const draw = () => {
    const link = model.get("link");
    const mark = model.get("mark");
    const w = model.get("words");  // labels in the notebook's language (kvlib.i18n)
    const chips = model.get("tokens").map((t, k) => KV.hoverable(
      KV.h("span", { class: "kv-chip" + (mark >= 0 && k >= mark ? " kv-differs" : ""), dataset: { pos: t.pos, id: t.id } },
        KV.h("span", { class: "kv-text", style: { background: KV.TINTS[k % KV.TINTS.length] } }, KV.label(t.text)),
        KV.h("span", { class: "kv-id" }, String(t.id))),
      tip, () => {
        const n = t.bytes.split(" ").length;
        return [`${KV.quoted(t.text)} · ${w.position} ${t.pos}`, `id ${t.id} · ${KV.int(n)} ${n === 1 ? w.byte : w.bytes}: ${t.bytes}`];
      },
      link, t.pos));
    if (mark >= 0 && mark < chips.length) chips.splice(mark, 0, KV.h("span", { class: "kv-divider", title: w.parted }));
    body.replaceChildren(
      model.get("title") ? KV.h("div", { class: "kv-title" }, model.get("title")) : "",
      KV.h("div", { class: "kv-strip" }, chips));
  };
  draw();
  const names = "change:tokens change:title change:mark";
  model.on(names, draw);
  return () => { cleanup(); model.off(names, draw); };
}

export default { render };
