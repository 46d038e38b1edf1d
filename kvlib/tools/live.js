// kvlib's live pages (kvlib/tools/site.py): the page runs the model itself. A panel above an app (notebook 2's
// tokens, 4's attention, 5's grid and cache, 6's prompt cache) takes the learner's text; this script tokenizes it
// with the model's own tokenizer.json (@huggingface/tokenizers), runs kvlib's forward pass exported to ONNX
// (kvlib/tools/webmodel.py) in ONNX Runtime Web (WASM, one thread), keeps the KV cache as per-layer arrays, builds
// each view's data as the Python view builds it (kvlib/ui/views/*.py, widgets.py: the same fields, roundings and
// words) and hands it to the same view module (window.kvSite.remount, site.js). The recorded run stays the first
// state; the learner's text replaces it. Nothing is fetched from file://: site/live/ holds classic scripts
// (<script src> of a sibling file loads where fetch does not), each setting window.kvLiveFiles[its name] to
// gzip'd base64 bytes, unpacked here by the browser's DecompressionStream; modules are imported from blob: URLs.
//
// DOM hooks (the tests read them): a panel is div.kv-live[data-kv-live=tokens|attention|cache|blocks], just above
// its app, with data-runs (runs finished) and data-model (the model it ran); in it textarea.kv-live-text (06: two,
// data-request 1 and 2), input.kv-live-new (05), button.kv-live-run, button.kv-live-smollm2 (where SmolLM2 was
// built), .kv-live-status[data-state=idle|loading|running|done|error] and .kv-live-result (05: data-cached-ms,
// data-full-ms, data-max-diff; 06: data-reused, data-shared, data-cold-ms, data-warm-ms, data-same). The data
// of the last run of each panel, unrounded, is window.kvLive.last[kind].
(() => {
  const cfg = JSON.parse(document.getElementById("kv-live").textContent);
  const W = cfg.words, T = cfg.texts;  // the panels' words; kvlib's own (i18n), both in the page's language
  const h = (tag, attrs = {}, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? "" : v);
    }
    e.append(...children.flat().filter((c) => c !== null && c !== undefined));
    return e;
  };
  const int = (n) => n.toLocaleString("en-US");
  // kvlib's words are Python format strings: {name}, and {name:,} for a count with thousands commas
  const fill = (text, values) => text.replace(/\{(\w+)(:,)?\}/g, (all, name, comma) =>
    (name in values ? (comma ? int(values[name]) : String(values[name])) : all));
  const mb = (bytes) => (bytes / 1e6).toFixed(1);
  const ms = (s) => s.toFixed(1);
  const exp1 = (x) => x.toExponential(1).replace(/e([+-])(\d)$/, "e$10$2");  // Python's f"{x:.1e}": 3.0e-08
  class Said extends Error {}  // a message for the learner (bad input, a file that did not load), in the page's words

  // ---- the same numbers as Python -------------------------------------------------------------------------

  // round(x, digits) as Python rounds a float: the nearest decimal, a tie to the even digit (toFixed breaks
  // ties upward; a float32 is exact times 10^3, so a tie shows as .5 exactly)
  function round(x, digits) {
    const scaled = x * 10 ** digits;
    if (Math.abs(scaled % 1) === 0.5) {
      const down = Math.floor(scaled);
      return (down % 2 === 0 ? down : down + 1) / 10 ** digits;
    }
    return +x.toFixed(digits);
  }

  // BLAKE2b (RFC 7693), the hash kvlib names runs (views.base.link_for) and prompt-cache blocks (blocks.block_keys) by
  const blake2b = (() => {
    const M = (1n << 64n) - 1n;
    const IV = [0x6a09e667f3bcc908n, 0xbb67ae8584caa73bn, 0x3c6ef372fe94f82bn, 0xa54ff53a5f1d36f1n,
                0x510e527fade682d1n, 0x9b05688c2b3e6c1fn, 0x1f83d9abfb41bd6bn, 0x5be0cd19137e2179n];
    const SIGMA = [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
                   [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4], [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
                   [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13], [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
                   [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11], [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
                   [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5], [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0]];
    const rot = (x, n) => ((x >> n) | (x << (64n - n))) & M;
    function compress(hs, m, t, last) {
      const v = [...hs, ...IV];
      v[12] ^= t;
      if (last) v[14] ^= M;
      const g = (a, b, c, d, x, y) => {
        v[a] = (v[a] + v[b] + x) & M; v[d] = rot(v[d] ^ v[a], 32n); v[c] = (v[c] + v[d]) & M; v[b] = rot(v[b] ^ v[c], 24n);
        v[a] = (v[a] + v[b] + y) & M; v[d] = rot(v[d] ^ v[a], 16n); v[c] = (v[c] + v[d]) & M; v[b] = rot(v[b] ^ v[c], 63n);
      };
      for (let r = 0; r < 12; r++) {
        const s = SIGMA[r % 10];
        g(0, 4, 8, 12, m[s[0]], m[s[1]]); g(1, 5, 9, 13, m[s[2]], m[s[3]]);
        g(2, 6, 10, 14, m[s[4]], m[s[5]]); g(3, 7, 11, 15, m[s[6]], m[s[7]]);
        g(0, 5, 10, 15, m[s[8]], m[s[9]]); g(1, 6, 11, 12, m[s[10]], m[s[11]]);
        g(2, 7, 8, 13, m[s[12]], m[s[13]]); g(3, 4, 9, 14, m[s[14]], m[s[15]]);
      }
      for (let i = 0; i < 8; i++) hs[i] ^= v[i] ^ v[i + 8];
    }
    return (bytes, size) => {  // Uint8Array, digest bytes -> Uint8Array
      const hs = IV.slice();
      hs[0] ^= 0x01010000n ^ BigInt(size);
      const blocks = Math.max(1, Math.ceil(bytes.length / 128));
      for (let b = 0; b < blocks; b++) {
        const block = new Uint8Array(128);
        block.set(bytes.subarray(b * 128, b * 128 + 128));
        const view = new DataView(block.buffer);
        const m = Array.from({ length: 16 }, (_, i) => view.getBigUint64(8 * i, true));
        compress(hs, m, BigInt(Math.min(bytes.length, (b + 1) * 128)), b === blocks - 1);
      }
      const out = new DataView(new ArrayBuffer(64));
      hs.forEach((x, i) => out.setBigUint64(8 * i, x, true));
      return new Uint8Array(out.buffer, 0, size);
    };
  })();
  const utf8 = (text) => new TextEncoder().encode(text);
  const hex = (bytes, sep = "") => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join(sep);
  const linkFor = (tokens) => "run-" + hex(blake2b(utf8(tokens.join("\x00")), 6));  // views.base.link_for

  // blocks.block_keys: each block's key hashes the tenant (on its own first, to 16 bytes) and every token id,
  // as int64 little-endian, from the prompt's start to the block's end
  function blockKeys(ids, tenant, spans) {
    const head = blake2b(utf8(`tenant:${tenant}`), 16);
    return spans.map(([, end]) => {
      const bytes = new Uint8Array(16 + 8 * end);
      bytes.set(head);
      const view = new DataView(bytes.buffer);
      for (let i = 0; i < end; i++) view.setBigInt64(16 + 8 * i, BigInt(ids[i]), true);
      return blake2b(bytes, 16);
    });
  }

  // GPT-2's bytes_to_unicode inverted (tokenization._gpt2_byte_map): the printable stand-in of each byte -> the byte
  const BYTE_OF = (() => {
    const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const of = {};
    for (let b = 0, n = 0; b < 256; b++) of[String.fromCharCode(printable(b) ? b : 256 + n++)] = b;
    return of;
  })();
  const tokenBytes = (tok, id) => Uint8Array.from([...tok.id_to_token(id)], (ch) => BYTE_OF[ch]);

  // the length of the UTF-8 character starting at b[i] (Python's strict decoder), or 0 if none does
  function charLength(b, i) {
    const ok = (k, lo = 0x80, hi = 0xbf) => i + k < b.length && b[i + k] >= lo && b[i + k] <= hi;
    const c = b[i];
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return ok(1) ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) return ok(1, c === 0xe0 ? 0xa0 : 0x80, c === 0xed ? 0x9f : 0xbf) && ok(2) ? 3 : 0;
    if (c >= 0xf0 && c <= 0xf4) return ok(1, c === 0xf0 ? 0x90 : 0x80, c === 0xf4 ? 0x8f : 0xbf) && ok(2) && ok(3) ? 4 : 0;
    return 0;
  }
  // a chunk's text as tokenization.Chunk.text writes it: its whole characters, each byte of a cut one as <0xE8>
  function chunkText(bytes) {
    let out = "";
    for (let i = 0; i < bytes.length;) {
      const n = charLength(bytes, i);
      out += n ? new TextDecoder().decode(bytes.subarray(i, i + n)) : `<0x${bytes[i].toString(16).toUpperCase().padStart(2, "0")}>`;
      i += n || 1;
    }
    return out;
  }

  // ---- loading: site/live/'s classic scripts, unpacked ----------------------------------------------------

  const files = {};  // file -> the promise of its data
  function script(file) {  // -> what the file set in window.kvLiveFiles, once
    return (files[file] ??= new Promise((done, failed) => {
      const s = h("script", { src: cfg.dir + file });
      s.onload = () => (window.kvLiveFiles?.[file] ? done(window.kvLiveFiles[file])
        : failed(new Said(fill(W.failed, { file: cfg.dir + file, why: W.empty_file }))));
      s.onerror = () => failed(new Said(fill(W.failed, { file: cfg.dir + file, why: W.missing })));
      document.head.append(s);
    }).catch((err) => { delete files[file]; throw err; }));  // a failed file is tried again on the next run
  }
  async function unpack(b64) {  // base64 of gzip -> bytes
    const bin = Uint8Array.fromBase64 ? Uint8Array.fromBase64(b64) : Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  const blobImport = (bytes) => import(URL.createObjectURL(new Blob([bytes], { type: "text/javascript" })));
  const json = async (b64) => JSON.parse(new TextDecoder().decode(await unpack(b64)));

  let said = () => {};  // the status line of the panel that asked for what is loading now
  const loaded = { bytes: 0, since: null, ready: null };  // what this page loaded, from the first file to a model that runs
  async function timedLoad(what, bytes, load) {
    said("loading", fill(W.loading, { what, mb: mb(bytes) }));
    loaded.since ??= performance.now();
    const out = await load();
    loaded.bytes += bytes;
    return out;
  }
  const once = {};
  const memo = (key, f) => (once[key] ??= f().catch((err) => { delete once[key]; throw err; }));

  const reader = async (Tokenizer, data) => new Tokenizer(await json(data.tokenizer), data.tokenizer_config);
  const tokenizers = () => memo("tokenizers", () => timedLoad("@huggingface/tokenizers", cfg.files["tokenizers.js"],
    async () => blobImport(await unpack((await script("tokenizers.js")).module))));
  const ort = () => memo("ort", () => timedLoad(W.runtime, cfg.files["runtime.js"], async () => {
    const files = await script("runtime.js");
    const ort = await blobImport(await unpack(files.ort));
    Object.assign(ort.env.wasm, { wasmBinary: await unpack(files.wasm), numThreads: 1, proxy: false });
    return ort;
  }));
  const gpt2 = () => memo("gpt2", async () => {
    const { Tokenizer } = await tokenizers();
    return timedLoad(fill(W.tokenizer, { name: "GPT-2" }), cfg.files["gpt2-tokenizer.js"], async () =>
      reader(Tokenizer, await script("gpt2-tokenizer.js")));
  });

  // a page model: its shape (webmodel.describe), its tokenizer, what a step without a cache recomputes
  // (wasted_macs[n - 1], memory.forward_macs), the most tokens its attention grid draws, and, when asked, its session
  const model = (name) => memo(`model:${name}`, async () => {
    const { Tokenizer } = await tokenizers();
    const entry = cfg.models[name];
    const data = await timedLoad(fill(W.tokenizer, { name }), cfg.files[entry.script], () => script(entry.script));
    return { name, entry, shape: data.shape, wasted: data.wasted_macs, gridTokens: data.grid_tokens,
             tokenizer: await reader(Tokenizer, data) };
  });
  const session = (m) => memo(`session:${m.name}`, async () => {
    const rt = await ort();
    const bytes = await timedLoad(fill(W.the_model, { model: m.name }), cfg.files[m.entry.graph], async () => {
      if (m.entry.inline) return unpack((await script(m.entry.graph)).onnx);
      const answer = await fetch(cfg.dir + m.entry.graph);  // over http only: the button says so from file://
      if (!answer.ok) {
        throw new Said(fill(W.failed, { file: cfg.dir + m.entry.graph, why: fill(W.fetch_failed, { status: answer.status }) }));
      }
      return new Uint8Array(await answer.arrayBuffer());
    });
    const run = await rt.InferenceSession.create(bytes);
    loaded.ready = { bytes: loaded.bytes, seconds: (performance.now() - loaded.since) / 1e3 };
    return { ort: rt, run };
  });

  // ---- the model in the page ------------------------------------------------------------------------------

  const encode = (m, text) => m.tokenizer.encode(text).ids;
  // Model.decode: a piece per id; an id past the tokenizer's vocabulary shows as <id>
  const decode = (m, ids) => ids.map((i) => (m.tokenizer.id_to_token(i) === undefined ? `<${i}>` : m.tokenizer.decode([i])))
    .join("");
  const decodeRun = (m, ids) => m.tokenizer.decode(ids);
  // views.base.pieces: a token's label, its text alone or, where that is part of a character, its bytes named (<0xE8>)
  const piece = (m, i) => { const text = decode(m, [i]); return text.includes("\ufffd") ? chunkText(tokenBytes(m.tokenizer, i)) : text; };
  // views.base.run_text: a run of tokens' text (a cache block's), each byte of a character it cuts named (<0xE8>)
  const runText = (m, ids) => chunkText(Uint8Array.from(ids.flatMap((i) => [...tokenBytes(m.tokenizer, i)])));
  const argmax = (row) => row.reduce((best, x, i) => (x > row[best] ? i : best), 0);  // the first of tied maxima, as torch

  // the KV cache: per layer, K and V [nkv, P, hs] as Float32Arrays holding exactly the tokens cached
  function emptyCache(m) {
    const none = () => Array.from({ length: m.shape.n_layer }, () => new Float32Array(0));
    return { length: 0, k: none(), v: none() };
  }
  const nbytes = (cache) => cache.k.reduce((n, k, l) => n + k.byteLength + cache.v[l].byteLength, 0);
  // [L, nkv, T, hs] new rows appended to each layer's [nkv, P, hs] -> the cache holding P + T tokens
  function appended(m, cache, k, v, T) {
    const { n_kv_head: nkv, head_dim: hs } = m.shape, P = cache.length;
    const grow = (old, rows, l) => {
      const out = new Float32Array(nkv * (P + T) * hs);
      for (let g = 0; g < nkv; g++) {
        out.set(old.subarray(g * P * hs, (g + 1) * P * hs), g * (P + T) * hs);
        out.set(rows.subarray(((l * nkv + g) * T) * hs, ((l * nkv + g) * T + T) * hs), (g * (P + T) + P) * hs);
      }
      return out;
    };
    return { length: P + T, k: cache.k.map((old, l) => grow(old, k, l)), v: cache.v.map((old, l) => grow(old, v, l)) };
  }
  const joined = (arrays) => {
    const out = new Float32Array(arrays.reduce((n, a) => n + a.length, 0));
    arrays.reduce((at, a) => (out.set(a, at), at + a.length), 0);
    return out;
  };

  // one call of the graph: ids after the cache's tokens -> {logits [T, V], weights [L, nh, T, P + T], cache with
  // the new rows appended}
  async function forward(m, ids, cache) {
    const { ort, run } = await session(m);
    const { n_layer: L, n_kv_head: nkv, head_dim: hs } = m.shape, P = cache.length, T = ids.length;
    const int64 = (xs) => new ort.Tensor("int64", BigInt64Array.from(xs, BigInt), [xs.length]);
    const out = await run.run({
      ids: int64(ids), positions: int64(ids.map((_, i) => P + i)),
      past_k: new ort.Tensor("float32", joined(cache.k), [L, nkv, P, hs]),
      past_v: new ort.Tensor("float32", joined(cache.v), [L, nkv, P, hs]),
    });
    return { logits: out.logits.data, weights: out.weights.data, T, cache: appended(m, cache, out.k.data, out.v.data, T) };
  }
  const lastRow = (m, out) => out.logits.subarray((out.T - 1) * m.shape.vocab, out.T * m.shape.vocab);
  // a whole text's weights [L, nh, n, n] -> nested arrays [layer][head][row][column], rounded to `digits` if given
  function grid(m, w, n, digits) {
    const { n_layer: L, n_head: nh } = m.shape, row = (lh, i) => w.subarray((lh * n + i) * n, (lh * n + i + 1) * n);
    return Array.from({ length: L }, (_, l) => Array.from({ length: nh }, (_, hd) => Array.from({ length: n }, (_, i) =>
      Array.from(row(l * nh + hd, i), (x) => (digits === undefined ? x : round(x, digits))))));
  }

  // ---- the views' data, as their Python side builds it ----------------------------------------------------

  // views.TokenStrip.data: a strip's chips, its title and link
  function tokensData(tok, name, text) {
    const chunks = tok.encode(text).ids.map((id) => ({ id, bytes: tokenBytes(tok, id) }));
    const texts = chunks.map((c) => chunkText(c.bytes));
    return {
      title: fill(T["strip.title"], { name, tokens: chunks.length, chars: [...text].length, bytes: utf8(text).length }),
      link: linkFor(texts),
      tokens: chunks.map((c, k) => ({ text: texts[k], id: c.id, bytes: hex(c.bytes, " "), pos: k })),
    };
  }

  // views.AttentionGrid.of (layer 0, head 0 first): every layer's and head's weights of one run, 3 decimals; all
  // layers, as there is no kernel to ask for one later. step: the step shown first
  function attentionData(m, ids, weights, { promptLen = ids.length, notes = [], title, step = 0 } = {}) {
    const tokens = ids.map((i) => piece(m, i));
    return { title: title ?? fill(T["att.title"], { model: m.name, tokens: tokens.length }), tokens,
             weights: grid(m, weights, ids.length, 3), prompt_len: promptLen, step, layer: 0, head: 0, notes,
             link: linkFor(tokens.slice(0, promptLen)) };
  }

  // views.CacheGrowth.of at step `step`: held, the ids the cache holds; fed, the tokens each step fed; measured, the
  // bytes of the cache's own arrays after each step; each K and V row's first 8 numbers of KV head 0, 2 decimals
  function cacheData(m, held, fed, measured, cache, step) {
    const { n_layer: L, n_kv_head: nkv, head_dim: hs } = m.shape, preview = Math.min(8, hs);
    const rows = (a) => Array.from({ length: held.length }, (_, t) =>  // KV head 0's rows come first
      Array.from(a.subarray(t * hs, t * hs + preview), (x) => round(x, 2)));
    const tokens = held.map((i) => piece(m, i));
    return { model_name: m.name, tokens, fed, nbytes: measured.map((s) => s.total), layer_nbytes: measured.map((s) => s.layers),
             shape: { n_layer: L, n_kv_head: nkv, head_dim: hs, bytes_per_number: cache.k[0].BYTES_PER_ELEMENT, preview },
             k_rows: cache.k.map(rows), v_rows: cache.v.map(rows), step, link: linkFor(tokens.slice(0, fed[0])) };
  }
  const measure = (cache) => ({ total: nbytes(cache), layers: cache.k.map((k, l) => k.byteLength + cache.v[l].byteLength) });

  // ---- panels ---------------------------------------------------------------------------------------------

  window.kvLive = { last: {}, model: "tiny" };  // model: the one the panels run now
  const app = (panel) => panel.nextElementSibling;  // the app's box, just below its panel
  const mounts = (root) => [...root.querySelectorAll("[data-kv-model], .kv-live-mount")];
  const stateOf = (mount) => window.kvSite.state(mount) || {};

  // draw `data` in the view under `root` (or, failing that, `wider`) whose state has the field `has`: the recorded
  // view, redrawn with the learner's data; where the run recorded none (an app that met an error), a new one
  // below the app, the view `name` with its words in the page's language
  function show(root, has, name, data, wider = root) {
    const found = [root, wider].map((r) => mounts(r).find((mt) => has in stateOf(mt))).find(Boolean);
    if (found) return window.kvSite.remount(found, data);
    const mount = h("div", { class: "kv-live-mount" });
    root.append(mount);
    return window.kvSite.mount(mount, cfg.views[name].module, { words: cfg.views[name].words, ...data });
  }

  // what the learner asked for, checked before the model runs: a text, and one that fits the model's context
  // (extra: the tokens to generate after it) and, where a grid draws it, the grid (grid_tokens: the most an
  // attention grid of this model takes in kvlib, within a view's 1 MB)
  function checked(m, text, run, extra = 0, drawn = false) {
    if (!text) throw new Said(fill(W.empty, { run }));
    const ids = encode(m, text), plus = extra ? fill(W.plus, { new: extra }) : "";
    if (ids.length + extra > m.shape.n_ctx) throw new Said(fill(W.too_long, { n: ids.length, plus, model: m.name, ctx: m.shape.n_ctx }));
    if (drawn && ids.length + Math.max(0, extra - 1) > m.gridTokens) {  // the last token made is never fed, nor drawn
      throw new Said(fill(W.too_big, { n: ids.length, plus, most: m.gridTokens }));
    }
    return ids;
  }

  // a panel: the learner's inputs, a run button (and SmolLM2's), what the first run loads and what loading took, a
  // status line and a result; go(m, say, result) runs the model m. A failure is said in the status line and leaves
  // the views as they were. runs: false for a panel that only tokenizes (no runtime, no graph to load)
  function panel(el, label, inputs, go, runs = true) {
    const status = h("div", { class: "kv-live-status", "data-state": "idle", role: "status" });
    const ready = h("div", { class: "kv-live-loaded" }), result = h("div", { class: "kv-live-result" });
    const run = h("button", { type: "button", class: "kv-live-run" }, label);
    // where the site has more than one page model (SmolLM2 beside tiny): a button each for the others, which runs
    // the panel on that model and makes it the one every panel runs
    const models = Object.entries(cfg.models);
    const switches = models.length < 2 ? [] : models.map(([name, entry]) => h("button", {
      type: "button", class: `kv-live-${name} kv-live-switch`, "data-model": name,
    }, fill(W[name] ?? W.use, { model: name, mb: mb(entry.bytes) })));
    const which = h("span", { class: "kv-live-which" }, fill(W.model_now, { model: window.kvLive.model }));
    el.dataset.runs = "0";
    const entry = cfg.models[window.kvLive.model];
    const files = runs ? ["runtime.js", "tokenizers.js", entry.script, entry.graph] : ["tokenizers.js", entry.script, "gpt2-tokenizer.js"];
    const size = h("div", { class: "kv-live-size" }, fill(W.size, { mb: mb(files.reduce((n, f) => n + cfg.files[f], 0)) }));
    el.replaceChildren(h("div", { class: "kv-live-title" }, W.title), size, ...inputs,
                       h("div", { class: "kv-live-row" }, run, which, ...switches), ready, status, result);
    showSwitches();
    const say = (state, text) => {
      status.dataset.state = state;
      status.replaceChildren(state === "error" ? h("span", { class: "kv-live-error", role: "alert" }, text) : text);
    };
    let busy = false;
    async function start(name = window.kvLive.model) {
      if (busy) return;
      busy = run.disabled = true;
      said = say;
      try {
        const m = await model(name);
        say("running", fill(W.running, { model: m.name }));
        await go(m, say, result);
        window.kvLive.model = el.dataset.model = m.name;
        for (const w of document.querySelectorAll(".kv-live-which")) w.textContent = fill(W.model_now, { model: m.name });
        showSwitches();
        el.dataset.runs = String(+el.dataset.runs + 1);
        app(el).dataset.kvShows = "live";  // the app's recorded controls and note no longer describe what it shows
        say("done", fill(W.done, { model: m.name }));
      } catch (err) {
        result.replaceChildren();
        for (const key of Object.keys(result.dataset)) delete result.dataset[key];
        const kept = +el.dataset.runs ? ` ${W.kept}` : "";
        say("error", (err instanceof Said ? err.message : fill(W.broke, { error: err.message || err })) + kept);
        if (!(err instanceof Said)) console.error(err);
      } finally {
        busy = run.disabled = false;
      }
    }
    run.addEventListener("click", () => start());
    for (const input of inputs.map((i) => i.querySelector("input")).filter(Boolean)) {
      input.addEventListener("keydown", (e) => e.key === "Enter" && start());
    }
    for (const button of switches) {
      const name = button.dataset.model, entry = cfg.models[name];
      button.addEventListener("click", () => (!entry.inline && location.protocol === "file:"  // the disk's page may not fetch it
        ? say("error", fill(W.needs_http, { model: name, mb: mb(entry.bytes) })) : start(name)));
    }
    return {
      ready(m) {  // the model runs: what loading it took, said once per panel and model
        if (ready.dataset.model === m.name) return;
        ready.dataset.model = m.name;
        ready.textContent = fill(W.ready, { model: m.name, mb: mb(loaded.ready.bytes), s: loaded.ready.seconds.toFixed(1) });
      },
    };
  }
  function showSwitches() {  // every panel's button for another model; none for the one it runs now
    for (const b of document.querySelectorAll(".kv-live-switch")) b.hidden = b.dataset.model === window.kvLive.model;
  }
  const textBox = (value, attrs = {}) => h("textarea", { class: "kv-live-text", rows: 3, ...attrs }, value);
  const labelled = (text, control) => h("label", { class: "kv-live-row" }, h("span", { class: "kv-live-label" }, text), control);

  // notebook 2: widgets.Tokens's strips of the model's own tokenizer and of GPT-2's redone on the learner's text (its
  // tags say which strip is which); the OpenAI encodings' strips, which the page cannot run, emptied and said so
  function tokensPanel(el) {
    const box = app(el), text = textBox(el.dataset.kvText);
    const named = new Map(mounts(box).map((mt) => [mt, (stateOf(mt).title || "").split(/[:：]/)[0]]));  // "GPT-4 (…)"
    const tagged = (mt, tag) => (stateOf(mt)._dom_classes || []).includes(tag);
    panel(el, W.tokenize, [labelled(W.text, text)], async (m, say, result) => {
      const value = text.value;
      if (!value) throw new Said(fill(W.empty, { run: W.tokenize }));  // tokenization.chunks refuses it too
      const own = tokensData(m.tokenizer, fill(T["tokenizer.loaded"], { model: m.name }), value);
      let gpt = null;
      if (mounts(box).some((mt) => tagged(mt, "kv-strip-gpt2"))) {
        gpt = tokensData(await gpt2(), "GPT-2", value);
        gpt.link = linkFor(["GPT-2", ...gpt.tokens.map((t) => t.text)]);  // another tokenizer's positions are not the model's
      }
      for (const strip of mounts(box)) {
        const data = tagged(strip, "kv-strip-gpt2") ? gpt : tagged(strip, "kv-strip-own") ? own : null;
        await window.kvSite.remount(strip, data ?? { title: fill(W.openai, { name: named.get(strip) }), tokens: [], mark: -1 });
      }
      const n = own.tokens.length;
      result.textContent = n > m.shape.n_ctx ? fill(W.longer, { n, model: m.name, ctx: m.shape.n_ctx }) : "";
      window.kvLive.last.tokens = { text: value, ids: { own: own.tokens.map((t) => t.id), gpt2: gpt?.tokens.map((t) => t.id) } };
    }, false);
  }

  // notebook 4: widgets.AttentionExplorer's grid of the learner's sentence, every layer and head
  function attentionPanel(el) {
    const box = app(el), text = h("input", { class: "kv-live-text", value: el.dataset.kvText, size: 60 });
    const p = panel(el, W.attend, [labelled(W.sentence, text)], async (m) => {
      const ids = checked(m, text.value, W.attend, 0, true);
      const out = await forward(m, ids, emptyCache(m));
      p.ready(m);
      const data = attentionData(m, ids, out.weights);
      await show(box, "weights", "att", data);
      window.kvLive.last.attention = { ids, tokens: data.tokens, weights: grid(m, out.weights, ids.length) };
    });
  }

  // notebook 5: Play decodes in the page, the two views growing together: widgets.GridFilling's grid (each step
  // reads the whole text again, as a decoder without a cache does, with GridFilling's notes) and views.CacheGrowth
  // (one cached step per token, the bytes measured on the cache's arrays); then the next step timed with the
  // cache and recomputed without it
  function cachePanel(el) {
    const box = app(el), text = textBox(el.dataset.kvText), play = cfg.views.att.words.play;  // the stepper's word
    const count = h("input", { class: "kv-live-new", type: "number", min: 2, value: el.dataset.kvNew || 8 });
    const p = panel(el, play, [labelled(W.prompt, text), labelled(W.new, count)], async (m, say, result) => {
      const steps = +count.value;
      const prompt = checked(m, text.value, play, Number.isInteger(steps) ? steps : 0, true);
      if (!(Number.isInteger(steps) && steps >= 2)) throw new Said(fill(W.steps, { got: count.value }));
      const n = (s) => prompt.length + s;  // tokens read at step s
      let out = await forward(m, prompt, emptyCache(m));  // the prefill: a run without a cache too (step 0's grid)
      p.ready(m);
      let cache = out.cache, full = out;
      const made = [argmax(lastRow(m, out))], measured = [measure(cache)], notes = [fill(T["grid.first"], { n: n(0) })];
      for (let s = 0; ; s++) {
        const fed = [...prompt, ...made.slice(0, s)];
        say("running", fill(W.decoding, { model: m.name, s, last: steps - 1, q: `'${piece(m, made[s])}'` }));
        if (s > 0) {  // GridFilling's step: the whole text again, one token longer; its old rows as they were
          const before = full.weights;
          full = await forward(m, fed, emptyCache(m));
          notes.push(fill(T["grid.again"], { n: n(s), old: n(s) - 2, before: s - 1, old_rows: n(s) - 1, macs: int(m.wasted[n(s) - 1]),
                                             change: exp1(largestChange(m, before, full.weights, n(s))) }));
        }
        const gridData = attentionData(m, fed, full.weights, { promptLen: n(0), notes, step: s,
                                                               title: fill(T["grid.title"], { model: m.name }) });
        const growthData = cacheData(m, fed, [n(0), ...Array(s).fill(1)], measured, cache, s);
        await Promise.all([show(box, "weights", "att", gridData), show(box, "k_rows", "cache", growthData, document)]);
        if (s === steps - 1) {
          window.kvLive.last.cache = { ids: fed, made, grid: gridData, growth: growthData, weights: grid(m, full.weights, fed.length),
                                       k: cache.k.map((k) => Array.from(k)), v: cache.v.map((v) => Array.from(v)) };
          return timeOneStep(m, cache, fed, made[s], result);
        }
        out = await forward(m, [made[s]], cache);  // the cached step: one token in, its K and V appended in every layer
        cache = out.cache;
        made.push(argmax(lastRow(m, out)));
        measured.push(measure(cache));
      }
    });
  }
  // cache_evidence.rows_change's largest over "weights": how far any old row moved when one token was added
  function largestChange(m, before, after, n) {
    const { n_layer: L, n_head: nh } = m.shape, o = n - 1;
    let most = 0;
    for (let lh = 0; lh < L * nh; lh++) {
      for (let i = 0; i < o; i++) {
        for (let j = 0; j < o; j++) most = Math.max(most, Math.abs(after[(lh * n + i) * n + j] - before[(lh * o + i) * o + j]));
      }
    }
    return most;
  }
  // the fastest of `times` runs of each function, in ms: one run of each first to warm up, then taking turns, the
  // first to go changing every round, so neither gains from its place in the order (a lone warm-up is not enough:
  // the browser speeds up whatever it has just run)
  async function fastest(fs, times = 3) {
    for (const f of fs) await f();
    const best = fs.map(() => Infinity);
    for (let r = 0; r < times; r++) {
      for (const k of r % 2 ? [...fs.keys()].reverse() : fs.keys()) {
        const t = performance.now();
        await fs[k]();
        best[k] = Math.min(best[k], performance.now() - t);
      }
    }
    return best;
  }
  // the next step (the last token made, fed) with the cache and recomputed without it (the whole text read
  // again), each timed in this browser; their logits for the next token compared
  async function timeOneStep(m, cache, held, next, result) {
    const all = [...held, next];
    let cached, full;
    const [cachedMs, fullMs] = await fastest([async () => { cached = lastRow(m, await forward(m, [next], cache)); },
                                              async () => { full = lastRow(m, await forward(m, all, emptyCache(m))); }]);
    const diff = cached.reduce((most, x, i) => Math.max(most, Math.abs(x - full[i])), 0);
    Object.assign(result.dataset, { cachedMs: cachedMs.toFixed(2), fullMs: fullMs.toFixed(2), maxDiff: String(diff) });
    result.textContent = fill(W.timing, { k: 3, cached: ms(cachedMs), n: all.length, full: ms(fullMs),
                                          ratio: (fullMs / cachedMs).toFixed(1), diff: exp1(diff) });
  }

  // notebook 6: two requests through a prompt cache kept in the page, as kvlib.PromptCache(block_size=16) keeps
  // one in automatic mode: whole blocks, each filed under the hash of its whole prefix (blocks.block_keys), never
  // the last token; a request reads the blocks of its longest filed prefix and computes the rest. The second
  // request reuses the first one's K and V rows; it is timed to its first token with and without them, and its
  // greedy answer computed both ways. A new cache for each send, so what it shows is these two requests.
  function blocksPanel(el) {
    const box = app(el), B = cfg.blocks, answerLength = 8;
    const recorded = mounts(box).map((mt) => stateOf(mt).requests).find(Boolean) || [];
    const starts = recorded.length >= 2 ? recorded.slice(0, 2).map((q) => q.prompt) : B.example;  // the notebook's own
    const texts = starts.map((t, k) => textBox(t, { "data-request": k + 1, rows: 4 }));
    const p = panel(el, W.send, texts.map((t, k) => labelled(fill(W.request, { k: k + 1 }), t)), async (m, say, result) => {
      const prompts = texts.map((t, k) => {
        if (!t.value) throw new Said(fill(W.empty_request, { k: k + 1, run: W.send }));
        return checked(m, t.value, W.send, answerLength);
      });
      await forward(m, prompts[0].slice(0, 1), emptyCache(m));  // loads the model; a session's first call is slow
      p.ready(m);
      const pc = { index: new Map(), born: performance.now() };  // block key (hex) -> {k, v, used}
      const clock = () => (performance.now() - pc.born) / 1e3;  // seconds, as the cache's clock
      const rows = [], sent = [];
      for (const [r, ids] of prompts.entries()) {
        const label = fill(W.label, { k: r + 1 }), at = clock();
        const spans = Array.from({ length: Math.floor((ids.length - 1) / B.size) }, (_, d) => [d * B.size, (d + 1) * B.size]);
        const keys = blockKeys(ids, W.tenant, spans).map((k) => hex(k));
        let hits = 0;
        while (hits < keys.length && pc.index.has(keys[hits])) hits++;
        const run = await prefill(m, pc, ids, keys.slice(0, hits));
        keys.forEach((key, d) => pc.index.set(key, { ...(pc.index.get(key) || blockOf(m, run.cache, d * B.size, B.size)), used: at }));
        for (const b of rows.flatMap((q) => q.blocks)) if (keys.slice(0, hits).includes(b.key)) b.then = { by: label, at };
        const cached = hits * B.size;
        rows.push({ label, tenant: W.tenant, at, input: ids.length, cached, written: (keys.length - hits) * B.size,
                    cost: cached * B.read + ids.length - cached, gone: 0,  // pricing.billed, automatic
                    tail: ids.length - spans.length * B.size,
                    prompt: decodeRun(m, ids), blocks: spans.map(([a, e], d) => ({ state: d < hits ? "hit" : "written", start: a, end: e, then: null,
                                                        text: runText(m, ids.slice(a, e)), hash: keys[d].slice(0, 16), key: keys[d] })) });
        sent.push({ ids, hits: keys.slice(0, hits) });
      }
      const held = [...pc.index.values()].reduce((n, b) => n + b.k.reduce((a, k, l) => a + k.byteLength + b.v[l].byteLength, 0), 0);
      await show(box, "requests", "blocks", {
        title: fill(T["blocks.title"], { mode: T["mode.automatic"], ttl: B.ttl, size: fill(T["blocks.size"], { n: B.size }),
                                         n: pc.index.size, held, budget: "" }),
        words: { ...cfg.views.blocks.words, caption: W.clock },  // the page's clock is real, not notebook 6's simulated one
        note: B.note, clock: clock(), ttl: B.ttl, requests: rows.map((q) => ({ ...q, blocks: q.blocks.map(({ key, ...b }) => b) })),
        stored: Object.fromEntries([...pc.index].map(([key, b]) => [key.slice(0, 16), { expires: b.used + B.ttl }])) });
      // the second request again, to time it: with the blocks it hit (warm) and with none (cold); its answer both ways
      const [first, second] = sent;
      let warm, cold;
      const [warmMs, coldMs] = await fastest([async () => { warm = await prefill(m, pc, second.ids, second.hits); },
                                              async () => { cold = await prefill(m, pc, second.ids, []); }]);
      const answers = { warm: await answer(m, warm, answerLength), cold: await answer(m, cold, answerLength) };
      const parts = answers.warm.findIndex((id, i) => id !== answers.cold[i]);
      const shared = second.ids.findIndex((id, i) => id !== first.ids[i]);
      const reused = second.hits.length * B.size;
      Object.assign(result.dataset, { reused, shared: shared < 0 ? Math.min(first.ids.length, second.ids.length) : shared,
                                      coldMs: coldMs.toFixed(2), warmMs: warmMs.toFixed(2), same: String(parts < 0) });
      const said = (ids) => JSON.stringify(decodeRun(m, ids));
      result.textContent = fill(reused ? W.sent : W.sent_none, {
        reused, n: second.ids.length, blocks: second.hits.length, size: B.size, shared: result.dataset.shared, k: 3,
        cold: ms(coldMs), warm: ms(warmMs), new: answerLength,
        same: parts < 0 ? fill(W.same, { answer: said(answers.warm) })
          : fill(W.differs, { i: parts, answer: said(answers.warm), cold_answer: said(answers.cold) }) });
      window.kvLive.last.blocks = { prompts, reused, cold: coldMs, warm: warmMs, answers, requests: rows };
    });
  }
  // a request's prefill: the blocks it hit as its cache's first rows, the rest of its prompt fed after them ->
  // {cache, first: its greedy first token} (timed whole by `fastest`, the hit's rows gathered included)
  async function prefill(m, pc, ids, hits) {
    const past = hits.reduce((cache, key) => appendedBlock(m, cache, pc.index.get(key)), emptyCache(m));
    const out = await forward(m, ids.slice(past.length), past);
    return { cache: out.cache, first: argmax(lastRow(m, out)) };
  }
  async function answer(m, start, n) {  // greedy from a prefill: its first token, then n - 1 cached steps
    const ids = [start.first];
    for (let cache = start.cache; ids.length < n;) {
      const out = await forward(m, [ids[ids.length - 1]], cache);
      cache = out.cache;
      ids.push(argmax(lastRow(m, out)));
    }
    return ids;
  }
  // a block of a cache: its rows [start, start + size) of every layer, [nkv, size, hs] each
  function blockOf(m, cache, start, size) {
    const { n_kv_head: nkv, head_dim: hs } = m.shape, P = cache.length;
    const cut = (a) => {
      const out = new Float32Array(nkv * size * hs);
      for (let g = 0; g < nkv; g++) out.set(a.subarray((g * P + start) * hs, (g * P + start + size) * hs), g * size * hs);
      return out;
    };
    return { k: cache.k.map(cut), v: cache.v.map(cut) };
  }
  const appendedBlock = (m, cache, block) =>  // a block's rows after a cache's, as appended() takes new rows
    appended(m, cache, joined(block.k), joined(block.v), block.k[0].length / (m.shape.n_kv_head * m.shape.head_dim));

  const PANELS = { tokens: tokensPanel, attention: attentionPanel, cache: cachePanel, blocks: blocksPanel };
  window.kvSite.drawn.then(() => {
    for (const el of document.querySelectorAll("[data-kv-live]")) PANELS[el.dataset.kvLive](el);
  });
})();
