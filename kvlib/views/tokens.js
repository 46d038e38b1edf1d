// View 1: tokens as chips (colour per token, with its id beneath: the id is the second cue)

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "tokens");
  const draw = () => {
    const link = model.get("link");
    const chips = model.get("tokens").map((t, k) => KV.hoverable(
      KV.h("span", { class: "kv-chip", dataset: { pos: t.pos, id: t.id } },
        KV.h("span", { class: "kv-text", style: { background: KV.TINTS[k % KV.TINTS.length] } }, KV.label(t.text)),
        KV.h("span", { class: "kv-id" }, String(t.id))),
      tip, () => [`${KV.quoted(t.text)} · position ${t.pos}`, `id ${t.id} · ${t.bytes.split(" ").length} bytes: ${t.bytes}`],
      link, t.pos));
    body.replaceChildren(
      model.get("title") ? KV.h("div", { class: "kv-title" }, model.get("title")) : "",
      KV.h("div", { class: "kv-strip" }, chips));
  };
  draw();
  model.on("change:tokens", draw);
  model.on("change:title", draw);
  return () => { cleanup(); model.off("change:tokens", draw); model.off("change:title", draw); };
}

export default { render };
