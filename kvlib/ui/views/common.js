// kvlib's shared browser code, put in front of every view's module (views/base.py joins them):
// plain DOM and SVG, no library, nothing fetched. Each view draws from plain data its Python side
// sent once; hover, stepping and switching happen here, without the kernel.
//
// DOM hooks the tests read: every token-labelled element carries data-pos (its position in the run);
// the tooltip is the view's one .kv-tip element; a highlighted element has the class kv-linked.

const KV = (() => {
  // Okabe & Ito's colour-blind-safe palette (2008), light tints for backgrounds; every use of colour
  // has a second cue beside it (a label, a number, a shape or a line style)
  const PALETTE = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"];
  const TINTS = ["#fbe3b3", "#cde9f8", "#b3e2d5", "#faf6c6", "#b3d4e8", "#f2cfb3", "#f0d7e6", "#e0e0e0"];

  function h(tag, attrs = {}, ...children) {  // an HTML element
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "style" && typeof v === "object") Object.assign(e.style, v);
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) e.append(c);
    return e;
  }

  function s(tag, attrs = {}, ...children) {  // an SVG element
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) e.append(c);
    return e;
  }

  // a token as a label: newlines and tabs made visible, the rest as the model spells it
  const label = (t) => t.replace(/\n/g, "↵").replace(/\t/g, "⇥");
  const quoted = (t) => `'${label(t)}'`;
  // numbers as a learner reads them: a real minus sign, fixed decimals
  const num = (x, d = 2) => { const r = +x.toFixed(d); return (r < 0 ? "−" : "") + Math.abs(r).toFixed(d); };
  const absMax = (xs) => xs.reduce((m, x) => Math.max(m, Math.abs(x)), 1e-9);  // no spread: 100k+ numbers
  const int = (n) => n.toLocaleString("en-US");
  // a label from the view's words (kvlib.i18n) with its {names} filled: fill("{n} tokens", {n: 3})
  const fill = (text, values) => text.replace(/\{(\w+)\}/g, (all, name) => (name in values ? String(values[name]) : all));
  const plural = (n, word) => `${int(n)} ${word}${n === 1 ? "" : "s"}`;
  const count = (n, one, many) => fill(n === 1 ? one : many, { n: int(n) });  // "1 slot", "4 slots"

  // blue for negative, orange for positive (both readable by the colour-blind); strength = |v| / max
  function heat(v, max) {
    const a = Math.min(1, Math.abs(v) / (max || 1));
    return v < 0 ? `rgba(0, 114, 178, ${0.08 + 0.8 * a})` : `rgba(230, 159, 0, ${0.08 + 0.8 * a})`;
  }
  const ink = (v, max) => (Math.abs(v) / (max || 1) > 0.6 ? "#fff" : "#111");

  // linked highlighting: views of one run share a link name; hovering a token in one lights it in all.
  // One event target per page, so views in different cells (and outputs) find each other.
  const bus = (window.__kvlibBus = window.__kvlibBus || new EventTarget());
  function hover(link, pos) {
    bus.dispatchEvent(new CustomEvent("kvlib-hover", { detail: { link, pos } }));
  }
  function onHover(link, fn) {  // link: a function giving the name now (an app may retitle its view) -> stop
    const f = (e) => { if (link() && e.detail.link === link()) fn(e.detail.pos); };
    bus.addEventListener("kvlib-hover", f);
    return () => bus.removeEventListener("kvlib-hover", f);
  }
  // light every element under root whose data-pos (or data-col) is pos
  function light(root, pos) {
    root.querySelectorAll(".kv-linked").forEach((e) => e.classList.remove("kv-linked"));
    if (pos === null || pos === undefined) return;
    root.querySelectorAll(`[data-pos="${pos}"], [data-col="${pos}"]`).forEach((e) => e.classList.add("kv-linked"));
  }

  // the view's one tooltip: text lines near the pointer
  function tooltip(root) {
    const tip = h("div", { class: "kv-tip", role: "tooltip" });
    tip.hidden = true;
    root.append(tip);
    return {
      show(lines, evt) {
        tip.replaceChildren(...[].concat(lines).map((l) => h("div", {}, l)));
        tip.hidden = false;
        tip.style.left = "0px";  // measure at full width, then place it beside the pointer, inside the view
        const box = root.getBoundingClientRect();
        const x = (evt ? evt.clientX : box.left) - box.left + 14, y = (evt ? evt.clientY : box.top) - box.top;
        tip.style.left = `${Math.max(0, Math.min(x, root.clientWidth - tip.offsetWidth - 4))}px`;
        tip.style.top = `${y + 14 + tip.offsetHeight > root.clientHeight ? Math.max(0, y - tip.offsetHeight - 8) : y + 14}px`;
      },
      hide() { tip.hidden = true; },
      el: tip,
    };
  }

  // hover for one element: tooltip lines, and the token it stands for (linked views light it)
  function hoverable(el, tip, lines, link, pos) {
    el.addEventListener("mouseenter", (e) => { tip.show(lines(), e); if (pos !== undefined) hover(link, pos); });
    el.addEventListener("mousemove", (e) => tip.show(lines(), e));
    el.addEventListener("mouseleave", () => { tip.hide(); if (pos !== undefined) hover(link, null); });
    return el;
  }

  // which columns of a wide matrix to show: all when few, else the first `head` and the last `tail`
  function fold(n, max = 12, head = 6, tail = 2) {
    if (n <= max) return { cols: [...Array(n).keys()], gap: -1, caption: `dims 0–${n - 1}` };
    const cols = [...Array(head).keys(), ...Array.from({ length: tail }, (_, i) => n - tail + i)];
    return { cols, gap: head, caption: `dims 0–${head - 1} … ${n - tail}–${n - 1} of ${n}` };
  }

  // a labelled matrix: rows named by tokens, columns by dimension; wide ones folded, every value on hover.
  // opts: {values: [[...]], rows: [labels], pos: [positions] (for linking), title, digits, newRow, link, tip,
  //        colName, colLabels (tokens naming the columns, e.g. a row of scores)}
  function matrix(opts) {
    const { values, rows, title, digits = 2, newRow = -1, link, tip, colName = "dim" } = opts;
    const w = { position: "position", numbers: "numbers", cols: colName + "s", ...opts.words };  // opts.words: the view's, in its language
    const pos = opts.pos || rows.map((_, i) => i);
    const n = values.length ? values[0].length : 0;
    const f = fold(n);
    const max = absMax(values.flat());
    const head = h("tr", {}, h("th", { class: "kv-corner" }, ""),
      f.cols.flatMap((j, k) => [k === f.gap ? h("th", { class: "kv-gap" }, "…") : null,
                                opts.colLabels
                                  ? h("th", { class: "kv-colhead kv-coltok", dataset: { col: j } }, label(opts.colLabels[j]))
                                  : h("th", { class: "kv-colhead" }, String(j))]));
    const body = values.map((row, i) => {
      const tr = h("tr", { class: "kv-row" + (i === newRow ? " kv-new" : ""), dataset: { row: i, pos: pos[i] } },
        hoverable(h("th", { class: "kv-rowhead", dataset: { pos: pos[i] } }, (i === newRow ? "▶ " : "") + label(rows[i])),
          tip, () => [`${quoted(rows[i])} (${w.position} ${pos[i]})`, `${n} ${w.numbers}: ${row.map((x) => num(x, digits)).join(" ")}`],
          link, pos[i]));
      f.cols.forEach((j, k) => {
        if (k === f.gap) {
          tr.append(hoverable(h("td", { class: "kv-gap" }, "…"), tip,
            () => [`${quoted(rows[i])}, ${w.cols} ${f.cols[f.gap - 1] + 1}–${f.cols[f.gap] - 1}:`,
                   row.slice(f.cols[f.gap - 1] + 1, f.cols[f.gap]).map((x) => num(x, digits)).join(" ")], link, pos[i]));
        }
        const v = row[j];
        tr.append(hoverable(h("td", { class: "kv-cell", dataset: { j }, style: { background: heat(v, max), color: ink(v, max) } },
          num(v, digits)), tip, () => `${quoted(rows[i])}, ${opts.colLabels ? quoted(opts.colLabels[j]) : `${colName} ${j}`}: ${num(v, 4)}`,
          link, pos[i]));
      });
      return tr;
    });
    return h("div", { class: "kv-matrix" },
      title ? h("div", { class: "kv-title" }, title, h("span", { class: "kv-caption" }, `  ${rows.length} × ${n}, ${f.caption.replace(/^dims/, colName + "s")}`)) : null,
      h("table", { class: "kv-table" }, h("thead", {}, head), h("tbody", {}, body)));
  }

  function button(text, onclick, attrs = {}) {
    return h("button", { class: "kv-button", type: "button", onclick, ...attrs }, text);
  }

  // Play, ◀ ▶ and a slider over steps 0..last(): Play moves on one step a tick until the last; a step by hand
  // stops it. go(s) shows step s and then calls show(s) back, so the controls always say what is shown.
  // w: its labels in the view's language (i18n's "stepper." words), English by default
  function stepper(last, current, go, ms = 1000, w = { play: "Play", pause: "Pause", back: "step back", forward: "step forward", step: "step" }) {
    let timer = null;
    const stop = () => { clearInterval(timer); timer = null; play.textContent = w.play; };
    const to = (s) => go(Math.max(0, Math.min(last(), s)));
    const byHand = (s) => { stop(); to(s); };
    const play = button(w.play, () => {
      if (timer) return stop();
      if (current() >= last()) to(0);
      play.textContent = w.pause;
      timer = setInterval(() => (current() >= last() ? stop() : to(current() + 1)), ms);
    });
    const back = button("◀", () => byHand(current() - 1), { "aria-label": w.back });
    const next = button("▶", () => byHand(current() + 1), { "aria-label": w.forward });
    const slider = h("input", { type: "range", class: "kv-slider", min: 0, step: 1, "aria-label": w.step,
                                oninput: (e) => byHand(+e.target.value) });
    const show = (s) => {
      Object.assign(slider, { max: last(), value: s });
      back.disabled = s === 0;
      next.disabled = s === last();
    };
    return { el: h("span", { class: "kv-controls" }, back, play, next, slider), show, stop };
  }

  // a view's frame: a root with its tooltip and linked highlighting wired in. -> {root, tip, body, redrawn,
  // cleanup}; the view draws into body and calls redrawn() after replacing what the pointer may be over
  function frame(model, el, name) {
    const root = h("div", { class: `kv-view kv-${name}` });
    const body = h("div", { class: "kv-body" });
    root.append(body);
    el.replaceChildren(root);
    const tip = tooltip(root);
    let lit = null;  // the token lit now, by this view or a linked one
    const stop = onHover(() => model.get("link"), (pos) => { lit = pos; light(root, pos); });
    // a redraw replaces the element under the pointer, which then never sees mouseleave
    const redrawn = () => { tip.hide(); light(root, lit); };
    return { root, tip, body, redrawn, cleanup: stop };
  }

  return { PALETTE, TINTS, h, s, label, quoted, num, absMax, int, plural, fill, count, heat, ink, hover, onHover, light, tooltip, hoverable,
           fold, matrix, button, stepper, frame };
})();
