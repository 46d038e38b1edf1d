// View 6: prompt-cache blocks. Each request a row of its receipt, its blocks as chips: a colour AND a glyph per
// state. Hover a chip for its tokens and hash; the same block lights up in every row. Under a stored block, a bar
// of its time to live left at the clock's time. Each row tells what became of the copy that request left: used
// again by a later request (on hover), or dropped first: faded and struck through in that row only.
// DOM hooks: tr.kv-request[data-request=k], its td[data-field], chips .kv-block[data-state][data-hash], .kv-gone.

// every label is one of the view's words (kvlib.i18n, "blocks." entries), in the notebook's language
const GLYPHS = { hit: "✓", written: "+", computed: "·" };  // a block's state: its glyph; its words name it
const FIELDS = ["label", "tenant", "at", "blocks", "input", "cached", "written", "cost", "gone"];

// a block's text for the tooltip: whole when short, else its start and end
const excerpt = (t, max = 240) => KV.quoted(t.length <= max ? t : `${t.slice(0, 170)} … ${t.slice(-60)}`);

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "blocks");
  const same = (hash, on) => body.querySelectorAll(`.kv-block[data-hash="${hash}"]`)
    .forEach((c) => c.classList.toggle("kv-linked", on));

  const draw = () => {
    const w = model.get("words");
    const secs = (t) => KV.fill(w.seconds, { t: KV.int(Math.round(t)) });  // "10 s", in Chinese "10 秒"
    const clock = model.get("clock"), ttl = model.get("ttl"), stored = model.get("stored");
    const chip = (b, k, q) => {
      const kept = b.state !== "computed" ? stored[b.hash] : undefined;  // the block as the cache holds it now
      const then = b.then;  // what became of this row's copy: used again ({by, at}) or dropped first ({gone, at, for})
      const struck = then ? then.gone !== undefined : !!(kept && kept.gone);
      const left = !struck && kept && kept.expires !== undefined ? Math.max(0, kept.expires - clock) : null;
      const c = KV.h("span", { class: `kv-block kv-${b.state}` + (struck ? " kv-gone" : ""),
                               dataset: { state: b.state, hash: b.hash, k } },
        KV.h("span", { class: "kv-glyph" }, GLYPHS[b.state]),
        left === null ? null : KV.h("span", { class: "kv-ttl" }, KV.h("span", { style: { width: `${100 * left / ttl}%` } })));
      c.addEventListener("mouseenter", () => same(b.hash, true));
      c.addEventListener("mouseleave", () => same(b.hash, false));
      return KV.hoverable(c, tip, () => [
        KV.fill(w.chip, { label: q.label, k, start: b.start, end: b.end - 1, state: w[b.state] }),
        excerpt(b.text),
        KV.fill(w.hash, { hash: b.hash.match(/../g).join(" ") }),
        then && then.by !== undefined ? KV.fill(w.used_by, { by: then.by, at: secs(then.at) }) : "",
        then && then.gone !== undefined ? KV.fill(w.dropped, { gone: w[then.gone], at: secs(then.at) }) +
          (kept && kept.expires !== undefined ? w.rewritten : w.not_held)
          : !kept ? "" : kept.gone ? KV.fill(w.gone_now, { gone: w[kept.gone], at: secs(kept.at) })
          : left > 0 ? KV.fill(w.stored, { expires: secs(kept.expires), left: secs(left) })
          : w.stale,
        then && then.for !== undefined ? KV.fill(w.made_room, { request: then.for }) : "",
      ].filter(Boolean));
    };
    const cell = (q, field) => {
      if (field === "blocks") {
        return [...q.blocks.map((b, k) => chip(b, k, q)),
                q.tail ? KV.hoverable(KV.h("span", { class: "kv-tail" }, KV.fill(w.tail, { n: q.tail })), tip,
                  () => KV.fill(w.tail_tip, { n: q.tail })) : null];
      }
      return field === "cost" ? q.cost.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })
        : field === "at" ? secs(q.at)
        : field === "gone" ? (q.gone || "") : typeof q[field] === "number" ? KV.int(q[field]) : q[field];
    };
    const legend = Object.entries(GLYPHS).map(([state, glyph]) => KV.h("span", { class: "kv-key" },
      KV.h("span", { class: `kv-block kv-${state}` }, KV.h("span", { class: "kv-glyph" }, glyph)), ` ${w[state]}`));
    body.replaceChildren(
      KV.h("div", { class: "kv-title" }, model.get("title")),
      KV.h("div", { class: "kv-clock" }, KV.fill(w.clock, { t: secs(clock) }),
        KV.h("span", { class: "kv-caption" }, KV.fill(w.caption, { ttl: secs(ttl) }))),
      KV.h("div", { class: "kv-legend" }, legend,
        KV.h("span", { class: "kv-key" }, KV.h("span", { class: "kv-block kv-written kv-gone" },
          KV.h("span", { class: "kv-glyph" }, "+")), w.legend_gone),
        KV.h("span", { class: "kv-key" }, KV.h("span", { class: "kv-tail" }, w.legend_tail), w.legend_tail_what)),
      KV.h("table", { class: "kv-table kv-requests" },
        KV.h("thead", {}, KV.h("tr", {}, FIELDS.map((field) => KV.h("th", {}, w[`col.${field}`])))),
        KV.h("tbody", {}, model.get("requests").map((q, k) => KV.h("tr", { class: "kv-request", dataset: { request: k } },
          FIELDS.map((field) => KV.h("td", { dataset: { field } }, cell(q, field))))))),
      model.get("note") ? KV.h("div", { class: "kv-note" }, model.get("note")) : null);
  };
  draw();
  const names = ["requests", "stored", "clock", "title", "note"].map((n) => `change:${n}`).join(" ");
  model.on(names, draw);
  return () => { cleanup(); model.off(names, draw); };
}

export default { render };
