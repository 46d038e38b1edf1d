// View 5: an embedding map. Families of tokens in 1, 2 or 3 dimensions (PCA), each family a colour AND a
// marker shape; a word shows on hover. 1D / 2D / 3D switch here; 3D turns by dragging or by the arrow keys
// (orthographic, the nearest points drawn last). Points carry data-pos (their index in `tokens`).

const SHAPES = [  // marker outlines around (0, 0), about 13 px across
  "M6.5,0A6.5,6.5 0 1,1 -6.5,0A6.5,6.5 0 1,1 6.5,0Z",                         // circle
  "M-5.5,-5.5H5.5V5.5H-5.5Z",                                                 // square
  "M0,-7.5L6.8,4.5H-6.8Z",                                                    // triangle
  "M0,-7.5L7.5,0L0,7.5L-7.5,0Z",                                              // diamond
  "M0,7.5L6.8,-4.5H-6.8Z",                                                    // triangle down
  "M-2.5,-7H2.5V-2.5H7V2.5H2.5V7H-2.5V2.5H-7V-2.5H-2.5Z",                     // plus
  "M0,-7.5L2,-2.5L7.2,-2.3L3.1,1L4.5,6.2L0,3.2L-4.5,6.2L-3.1,1L-7.2,-2.3L-2,-2.5Z",  // star
  "M-3.5,-6.5H3.5L7,0L3.5,6.5H-3.5L-7,0Z",                                    // hexagon
];
const W = 720, H = 460, H1 = 150, PAD = 34, STEP = Math.PI / 12;  // arrow keys turn by 15°

// a point's place in the picture before scaling: 1D and 2D read the first components; 3D turns all three
function turn([a, b, c], yaw, pitch) {
  const x = a * Math.cos(yaw) + c * Math.sin(yaw), z = -a * Math.sin(yaw) + c * Math.cos(yaw);
  return [x, b * Math.cos(pitch) - z * Math.sin(pitch), b * Math.sin(pitch) + z * Math.cos(pitch)];
}

// 1D: points along one line, stacked where they would hide each other (every row reads the same axis)
function stack(xs, gap = 14) {
  const rows = xs.map(() => 0), placed = [];
  xs.map((x, i) => [x, i]).sort((p, q) => p[0] - q[0]).forEach(([x, i]) => {
    for (let k = 0; ; k++) {
      const row = k % 2 ? (k + 1) / 2 : -k / 2;  // 0, 1, -1, 2, -2 ...
      if (!placed.some(([px, pr]) => pr === row && Math.abs(px - x) < gap)) { rows[i] = row; placed.push([x, row]); break; }
    }
  });
  return rows;
}

function render({ model, el }) {
  const { tip, body, cleanup } = KV.frame(model, el, "embedding");
  let dims = model.get("dims"), yaw = 0.6, pitch = 0.35, drag = null;
  const say = (key, values) => KV.fill(model.get("words")[key], values);  // labels in the notebook's language
  // built once, filled by draw(): the picture keeps its focus and pointer capture while it turns
  const title = KV.h("div", { class: "kv-title" }), hint = KV.h("span", { class: "kv-caption" });
  const score = KV.h("div", { class: "kv-score" }), legend = KV.h("div", { class: "kv-legend" });
  const svg = KV.s("svg", { class: "kv-map", tabindex: 0, role: "img" });
  const buttons = [1, 2, 3].map((d) => KV.button(`${d}D`, () => { dims = d; draw(); }, { dataset: { dims: d } }));
  body.append(title, KV.h("div", { class: "kv-controls" }, say("project"), buttons, hint), score, legend, svg);

  const draw = () => {
    const words = model.get("tokens"), ids = model.get("ids"), labels = model.get("labels");
    const coords = model.get("coords"), scores = model.get("scores"), link = model.get("link");
    const families = [...new Set(labels)], fam = (i) => families.indexOf(labels[i]);
    let h = dims === 1 ? H1 : H;
    const placed = coords.map((p) => (dims === 3 ? turn(p, yaw, pitch) : [p[0], dims === 2 ? p[1] : 0, 0]));

    // scale: 3D by the farthest point (so turning never leaves the box), else by the points' extent
    let s, cx, cy;
    if (dims === 3) {
      const r = Math.max(1e-9, ...coords.map((p) => Math.hypot(...p)));
      [s, cx, cy] = [(h / 2 - PAD) / r, W / 2, h / 2];
    } else {
      const xs = placed.map((p) => p[0]), ys = placed.map((p) => p[1]);
      const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
      s = Math.min((W - 2 * PAD) / (x1 - x0 || 1), dims === 2 ? (h - 2 * PAD) / (y1 - y0 || 1) : Infinity);
      [cx, cy] = [W / 2 - s * (x0 + x1) / 2, h / 2 + s * (y0 + y1) / 2];
    }
    const rows = dims === 1 ? stack(placed.map((p) => s * p[0])) : null;
    if (rows) {  // as tall as the deepest stack needs
      h = Math.max(H1, 2 * PAD + 30 * rows.reduce((m, r) => Math.max(m, Math.abs(r)), 0));
      cy = h / 2;
    }
    const at = (p, i) => [cx + s * p[0], cy - s * p[1] + (rows ? 15 * rows[i] : 0)];

    // axes through the origin, each named at its positive end
    const axis = (x1, y1, x2, y2, name, tx, ty, anchor) => KV.s("g", { class: "kv-axis" },
      KV.s("line", { x1, y1, x2, y2 }), KV.s("text", { x: tx, y: ty, "text-anchor": anchor }, name));
    const axes = dims === 3
      ? [0, 1, 2].map((k) => {
          const [dx, dy] = turn([0, 1, 2].map((j) => Number(j === k)), yaw, pitch), len = h / 2 - PAD;
          const [ex, ey] = [cx + len * dx, cy - len * dy];
          return axis(2 * cx - ex, 2 * cy - ey, ex, ey, say("component", { k: k + 1 }), ex, ey + (dy >= 0 ? -6 : 16),
                      dx >= 0 ? "start" : "end");
        })
      : [axis(4, cy, W - 4, cy, say("axis_x"), W - 6, h - 8, "end"),  // names in the margin, clear of points
         dims === 2 ? axis(cx, 4, cx, h - 4, say("axis_y"), 6, 16, "start") : null];

    // points, the farthest first (3D), so the nearer ones are drawn over them
    const order = placed.map((_, i) => i).sort((i, j) => placed[i][2] - placed[j][2]);
    const zmax = Math.max(1e-9, ...placed.map((p) => Math.abs(p[2])));
    const points = order.map((i) => {
      const [x, y] = at(placed[i], i), near = dims === 3 ? placed[i][2] / zmax : 0;  // -1 far ... 1 near
      return KV.hoverable(
        KV.s("g", { class: "kv-point", transform: `translate(${x.toFixed(1)},${y.toFixed(1)})`,
                    dataset: { pos: i, family: labels[i] }, opacity: (0.78 + 0.22 * near).toFixed(2) },
          KV.s("path", { d: SHAPES[fam(i) % SHAPES.length], fill: KV.PALETTE[fam(i) % KV.PALETTE.length],
                         transform: `scale(${(1 + 0.18 * near).toFixed(2)})` })),
        tip, () => [`${KV.quoted(words[i])} · ${labels[i]} · id ${ids[i]}`,
                    coords[i].slice(0, dims).map((v, k) => `${say("component", { k: k + 1 })}: ${KV.num(v, 3)}`).join("   ")],
        link, i);
    });
    svg.setAttribute("viewBox", `0 0 ${W} ${h}`);
    svg.setAttribute("width", W);
    svg.setAttribute("height", h);
    svg.setAttribute("aria-label", say("aria", { count: words.length, dims }) + (dims === 3 ? say("aria_turn") : ""));
    svg.replaceChildren(...axes.filter(Boolean), ...points);

    buttons.forEach((b, k) => b.setAttribute("aria-pressed", String(k + 1 === dims)));
    title.textContent = model.get("title");
    hint.textContent = say(dims === 3 ? "hint_turn" : "hint_hover");
    const hits = Math.round(scores[dims - 1] * words.length);
    score.replaceChildren(say("score_in", { dims }), KV.h("b", {}, say("score_hits", { hits, count: words.length })),
      say("score_rest", { share: Math.round(scores[dims - 1] * 100), families: families.length,
                          guess: Math.round(100 / families.length) }));
    legend.replaceChildren(...families.map((f, k) => KV.h("span", { class: "kv-key", dataset: { family: f },
        onmouseenter: () => svg.querySelectorAll(".kv-point").forEach((p) => p.classList.toggle("kv-linked", p.dataset.family === f)),
        onmouseleave: () => KV.light(svg, null) },
      KV.s("svg", { width: 18, height: 18, viewBox: "-9 -9 18 18" },
        KV.s("path", { d: SHAPES[k % SHAPES.length], fill: KV.PALETTE[k % KV.PALETTE.length] })),
      ` ${f} (${labels.filter((l) => l === f).length})`)));
  };

  // turning in 3D: drag, or the arrow keys once the picture has focus (never sent to the kernel)
  const turnBy = (dyaw, dpitch) => {
    yaw += dyaw;
    pitch = Math.max(-Math.PI / 2, Math.min(Math.PI / 2, pitch + dpitch));
    draw();
  };
  svg.addEventListener("pointerdown", (e) => {
    if (dims !== 3) return;
    drag = [e.clientX, e.clientY];
    svg.setPointerCapture(e.pointerId);
    tip.hide();
  });
  svg.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const [x, y] = drag;
    drag = [e.clientX, e.clientY];
    turnBy((e.clientX - x) * 0.01, (e.clientY - y) * 0.01);
  });
  for (const end of ["pointerup", "pointercancel", "lostpointercapture"]) svg.addEventListener(end, () => { drag = null; });
  const keys = { ArrowLeft: [-STEP, 0], ArrowRight: [STEP, 0], ArrowUp: [0, -STEP], ArrowDown: [0, STEP] };
  svg.addEventListener("keydown", (e) => {
    if (dims !== 3 || !keys[e.key]) return;
    e.preventDefault();
    e.stopPropagation();  // the notebook would move to another cell
    turnBy(...keys[e.key]);
  });

  draw();
  const names = ["tokens", "ids", "labels", "coords", "scores", "title"].map((n) => `change:${n}`).join(" ");
  model.on(names, draw);
  return () => { cleanup(); model.off(names, draw); };
}

export default { render };
