// View 6: prompt-cache blocks. Each request a row of its receipt, its blocks as chips: a colour AND a glyph per
// state. Hover a chip for its tokens and hash; the same block lights up in every row. Under a stored block, a bar
// of its time to live left at the clock's time. Each row tells what became of the copy that request left: used
// again by a later request (on hover), or dropped first: faded and struck through in that row only.
// DOM hooks: tr.kv-request[data-request=k], its td[data-field], chips .kv-block[data-state][data-hash], .kv-gone.

const STATES = {
  hit: ["✓", "hit: read from the cache"],
  written: ["+", "written: computed, then stored"],
  computed: ["·", "computed, not stored"],
};
const FIELDS = [["label", "request"], ["tenant", "tenant"], ["at", "sent"], ["blocks", "blocks"], ["input", "input"],
                ["cached", "cached"], ["written", "written"], ["ms", "prefill ms"], ["cost", "cost"],
                ["gone", "expired / evicted"]];

// a block's text for the tooltip: whole when short, else its start and end
const excerpt = (t, max = 240) => KV.quoted(t.length <= max ? t : `${t.slice(0, 170)} … ${t.slice(-60)}`);
const secs = (t) => `${KV.int(Math.round(t))} s`;

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "blocks");
  const same = (hash, on) => body.querySelectorAll(`.kv-block[data-hash="${hash}"]`)
    .forEach((c) => c.classList.toggle("kv-linked", on));

  const draw = () => {
    const clock = model.get("clock"), ttl = model.get("ttl"), stored = model.get("stored");
    const chip = (b, k, q) => {
      const kept = b.state !== "computed" ? stored[b.hash] : undefined;  // the block as the cache holds it now
      const then = b.then;  // what became of this row's copy: used again ({by, at}) or dropped first ({gone, at, for})
      const struck = then ? then.gone !== undefined : !!(kept && kept.gone);
      const left = !struck && kept && kept.expires !== undefined ? Math.max(0, kept.expires - clock) : null;
      const c = KV.h("span", { class: `kv-block kv-${b.state}` + (struck ? " kv-gone" : ""),
                               dataset: { state: b.state, hash: b.hash, k } },
        KV.h("span", { class: "kv-glyph" }, STATES[b.state][0]),
        left === null ? null : KV.h("span", { class: "kv-ttl" }, KV.h("span", { style: { width: `${100 * left / ttl}%` } })));
      c.addEventListener("mouseenter", () => same(b.hash, true));
      c.addEventListener("mouseleave", () => same(b.hash, false));
      return KV.hoverable(c, tip, () => [
        `${q.label} · block ${k} · tokens ${b.start}–${b.end - 1} · ${STATES[b.state][1]}`,
        excerpt(b.text),
        `hash ${b.hash.match(/../g).join(" ")} … (its first 8 bytes; it names this block and every token before it)`,
        then && then.by !== undefined ? `used again by ${then.by} at ${secs(then.at)}` : "",
        then && then.gone !== undefined ? `${then.gone} at ${secs(then.at)}, before any later request used it` +
          (kept && kept.expires !== undefined ? "; written again since" : "; no longer in the cache")
          : !kept ? "" : kept.gone ? `${kept.gone} at ${secs(kept.at)}: no longer in the cache`
          : left > 0 ? `stored: expires at ${secs(kept.expires)}, in ${secs(left)} unless used again`
          : `stored, its TTL over: dropped at the cache's next look`,
        then && then.for !== undefined ? `evicted to make room for ${then.for}` : "",
      ].filter(Boolean));
    };
    const cell = (q, field) => {
      if (field === "blocks") {
        return [...q.blocks.map((b, k) => chip(b, k, q)),
                q.tail ? KV.hoverable(KV.h("span", { class: "kv-tail" }, `${q.tail} more`), tip,
                  () => `${q.tail} tokens after the last block: always computed (the next token needs the last one's scores)`) : null];
      }
      return field === "cost" ? q.cost.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })
        : field === "ms" ? q.ms.toFixed(1) : field === "at" ? secs(q.at)
        : field === "gone" ? (q.gone || "") : typeof q[field] === "number" ? KV.int(q[field]) : q[field];
    };
    const legend = Object.entries(STATES).map(([state, [glyph, what]]) => KV.h("span", { class: "kv-key" },
      KV.h("span", { class: `kv-block kv-${state}` }, KV.h("span", { class: "kv-glyph" }, glyph)), ` ${what}`));
    body.replaceChildren(
      KV.h("div", { class: "kv-title" }, model.get("title")),
      KV.h("div", { class: "kv-clock" }, `clock: ${secs(clock)}`,
        KV.h("span", { class: "kv-caption" }, `  (simulated) · the bar under a stored block: its time to live left, of ${secs(ttl)}`)),
      KV.h("div", { class: "kv-legend" }, legend,
        KV.h("span", { class: "kv-key" }, KV.h("span", { class: "kv-block kv-written kv-gone" },
          KV.h("span", { class: "kv-glyph" }, "+")), " expired or evicted before a later request used it"),
        KV.h("span", { class: "kv-key" }, KV.h("span", { class: "kv-tail" }, "n more"),
          " last tokens, after the last full block: always computed")),
      KV.h("table", { class: "kv-table kv-requests" },
        KV.h("thead", {}, KV.h("tr", {}, FIELDS.map(([, name]) => KV.h("th", {}, name)))),
        KV.h("tbody", {}, model.get("requests").map((q, k) => KV.h("tr", { class: "kv-request", dataset: { request: k } },
          FIELDS.map(([field]) => KV.h("td", { dataset: { field } }, cell(q, field))))))),
      model.get("note") ? KV.h("div", { class: "kv-note" }, model.get("note")) : null);
  };
  draw();
  const names = ["requests", "stored", "clock", "title", "note"].map((n) => `change:${n}`).join(" ");
  model.on(names, draw);
  return () => { cleanup(); model.off(names, draw); };
}

export default { render };
