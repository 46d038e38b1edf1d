"""Interactive apps for the notebooks, composed from the engine and the plots.

Each app is an ipywidgets box: display it, or drive it headless by setting `.value`
and calling `.click()` (as the tests do). Bad input shows a message in place and
the app keeps working (the ipywidgets pattern of an error area beside the output).
Slow work waits for `continuous_update=False` sliders.
"""

import html
import threading

import ipywidgets as W
import torch
from IPython.core.pylabtools import print_figure

from . import attention, embeddings, plots, pricing, tokenizers
from .generate import check_sampling, generate
from .memory import forward_macs
from .trace import Trace

CHUNK_COLOURS = ["#cfe2f3", "#fce5cd", "#d9ead3", "#ead1dc", "#fff2cc", "#d0e0e3", "#f4cccc", "#d9d2e9"]


def _error(message):
    return f"<div style='color:#b00020;padding:4px 0'>⚠ {html.escape(str(message), quote=False)}</div>"


def _show(out, fig):
    """Replace an Output's picture (or clear it, for None) in one state update, so it never flickers.

    Not by capturing (`with out:` or `out.clear_output()`): a headless runner such as nbclient (so
    nbmake) answers every capture by echoing the outputs to the kernel on the shell channel, and
    that echo, sent just before the next cell, can leave the cell's reply unread until the cell
    times out (notebook 5 once took 335 s instead of 35 s under nbmake)."""
    out.outputs = () if fig is None else (
        {"output_type": "display_data", "metadata": {},
         "data": {"image/png": print_figure(fig, "png", bbox_inches="tight", base64=True), "text/plain": repr(fig)}},)


def chunk_cells(chunks, start=0, style=""):
    """Coloured chunks with their ids beneath; hovering a chunk gives its id and bytes."""
    cells = []
    for k, c in enumerate(chunks, start):
        text = html.escape(c.text).replace("\n", "↵")
        tip = html.escape(f"id {c.id} · {len(c.bytes)} bytes {c.bytes!r}")
        cells.append(
            f"<span title='{tip}' style='display:inline-block;margin:1px;text-align:center'>"
            f"<span style='background:{CHUNK_COLOURS[k % len(CHUNK_COLOURS)]};white-space:pre;padding:1px 2px;"
            f"border-radius:3px;font-family:monospace;{style}'>{text}</span><br>"
            f"<span style='font-size:9px;color:#666'>{c.id}</span></span>")
    return "".join(cells)


def chunks_html(chunks, title=""):
    head = f"<div style='font-weight:bold;margin-top:6px'>{html.escape(title)}</div>" if title else ""
    return f"{head}<div style='line-height:1.1'>{chunk_cells(chunks)}</div>"


class Chat(W.VBox):
    """A prompt box and a Send button that streams the answer token by token, as a chat UI does."""

    def __init__(self, model, prompt="ROMEO.\n", max_new_tokens=40):
        self.model, self.last = model, None
        self.prompt = W.Textarea(value=prompt, description="Prompt", layout=W.Layout(width="95%", height="70px"))
        self.max_tokens = W.BoundedIntText(value=max_new_tokens, min=1, max=10**6, description="Max tokens")
        self.temperature = W.FloatSlider(value=0.0, min=0.0, max=2.0, step=0.1, description="Temperature",
                                         continuous_update=False, style={"description_width": "initial"})
        self.send, self.stop = W.Button(description="Send", button_style="primary", icon="paper-plane"), \
            W.Button(description="Stop", icon="stop", disabled=True)
        self.answer = W.HTML()
        self.status = W.HTML(f"Model: <b>{html.escape(model.name)}</b>. Greedy (temperature 0) always gives the "
                             f"same answer; raise it to sample.")
        self._stop, self._thread = threading.Event(), None
        self.send.on_click(lambda _: self.start())
        self.stop.on_click(lambda _: self._stop.set())
        super().__init__([self.prompt, W.HBox([self.max_tokens, self.temperature, self.send, self.stop]),
                          self.answer, self.status])

    def start(self):
        try:
            ids = self.model.check_ids(self.prompt.value)
            room = self.model.config.n_ctx - len(ids)
            check_sampling(self.max_tokens.value, self.temperature.value, None, None)
            if self.max_tokens.value > room:
                raise ValueError(f"{self.max_tokens.value} tokens do not fit: the prompt holds {len(ids)} of "
                                 f"the context's {self.model.config.n_ctx}, so at most {room} can follow. Lower "
                                 f"'Max tokens'.")
        except ValueError as e:
            self.status.value = _error(e)
            return
        self._stop.clear()
        self.send.disabled, self.stop.disabled = True, False
        self._thread = threading.Thread(target=self._run, args=(ids.tolist(),), daemon=True)
        self._thread.start()

    def wait(self, timeout=None):
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, ids):
        streamed = []
        prompt = html.escape(self.model.decode(ids))

        def on_token(token, piece):
            streamed.append(piece)
            n = len(streamed)
            self.answer.value = (f"<pre style='white-space:pre-wrap;font-size:13px'>{prompt}<b style="
                                 f"'background:{plots.GENERATED}'>{html.escape(''.join(streamed))}</b>▌</pre>")
            self.status.value = f"{n} tokens streamed"
            return not self._stop.is_set()

        try:
            gen = generate(self.model, ids, self.max_tokens.value, temperature=self.temperature.value,
                           on_token=on_token)
            self.last = gen
            self.answer.value = self.answer.value.replace("▌</pre>", "</pre>")
            per = sum(gen.step_seconds) / len(gen.step_seconds)
            self.status.value = (f"{html.escape(self.model.name)}: {len(gen.ids)} tokens in "
                                 f"{sum(gen.step_seconds):.2f} s ({per * 1e3:.0f} ms per token); "
                                 f"stopped: {gen.stop_reason}")
        except Exception as e:  # a thread's error would vanish: show it in place
            self.status.value = _error(e)
        finally:
            self.send.disabled, self.stop.disabled = False, True


class Tokens(W.VBox):
    """Type text; see it cut into chunks by each tokenizer, with ids, counts and bytes."""

    def __init__(self, model, text="Will will Will's will be done? 轩辕养了一只黄色的虎皮鹦鹉 🦜"):
        self.model, self.tokenizers = model, tokenizers.available(model)
        self.text = W.Textarea(value=text, description="Text", layout=W.Layout(width="95%", height="60px"),
                               continuous_update=False)
        self.view = W.HTML()
        self.counts = {}
        self.text.observe(lambda _: self.update(), names="value")
        super().__init__([self.text, self.view])
        self.update()

    def update(self):
        text = self.text.value
        try:
            parts, self.counts = [], {}
            for tok in self.tokenizers:
                cs = tokenizers.chunks(tok, text)
                self.counts[tok.name] = [c.id for c in cs]
                parts.append(chunks_html(cs, f"{tok.name}: {len(cs)} tokens for {len(text)} characters "
                                             f"({len(text.encode())} bytes)"))
            n_model = len(self.counts[self.tokenizers[0].name])
            if n_model > self.model.config.n_ctx:
                parts.insert(0, _error(f"{n_model} tokens: longer than {self.model.name}'s context of "
                                       f"{self.model.config.n_ctx}, so the model could not read all of it"))
            self.view.value = "".join(parts)
        except ValueError as e:
            self.view.value = _error(e)


class Divergence(W.VBox):
    """Two prompts, token by token: where they first differ is where a prompt cache stops hitting."""

    def __init__(self, model, a="To be, or not to be, that is the question", b="To be, or not to be: that is the question"):
        self.tokenizer = tokenizers.for_model(model)
        self.a, self.b = (W.Text(value=v, description=d, layout=W.Layout(width="95%"), continuous_update=False)
                          for v, d in ((a, "Prompt A"), (b, "Prompt B")))
        self.view, self.index = W.HTML(), None
        for box in (self.a, self.b):
            box.observe(lambda _: self.update(), names="value")
        super().__init__([self.a, self.b, self.view])
        self.update()

    def update(self):
        try:
            ca, cb = tokenizers.chunks(self.tokenizer, self.a.value), tokenizers.chunks(self.tokenizer, self.b.value)
        except ValueError as e:
            self.view.value = _error(e)
            return
        self.index = tokenizers.first_divergence([c.id for c in ca], [c.id for c in cb])
        shared = min(len(ca), len(cb)) if self.index is None else self.index
        note = (f"the first {shared} tokens are shared; they differ from token {self.index} on"
                if self.index is not None else f"one is a prefix of the other: {shared} tokens shared")
        rows = "".join(f"<div style='line-height:1.1;margin-top:4px'>{chunk_cells(cs[:shared])}"
                       f"<span style='border-left:3px solid #cc0000;margin:0 4px'></span>"
                       f"{chunk_cells(cs[shared:], shared, 'outline:2px solid #cc0000')}</div>" for cs in (ca, cb))
        self.view.value = f"<div>{note}</div>{rows}"


class Lookup(W.VBox):
    """Token ids ⇄ their embedding rows: the lookup is just picking rows of a table."""

    def __init__(self, model, text="Mary had a little lamb"):
        self.model = model
        self.text = W.Text(value=text, description="Text", continuous_update=False)
        self.mode = W.ToggleButtons(options=["token ids", "embedding rows"], value="token ids")
        self.info, self.out, self.figure = W.HTML(), W.Output(), None
        self.text.observe(lambda _: self.update(), names="value")
        self.mode.observe(lambda _: self.update(), names="value")
        super().__init__([W.HBox([self.text, self.mode]), self.info, self.out])
        self.update()

    def update(self):
        try:
            ids = self.model.check_ids(self.text.value).tolist()
        except ValueError as e:
            self.info.value, self.figure = _error(e), None
            _show(self.out, None)
            return
        words = [self.model.decode([i]) for i in ids]
        table = embeddings.table(self.model)
        if self.mode.value == "token ids":
            self.figure = None
            _show(self.out, None)
            self.info.value = chunks_html(tokenizers.chunks(tokenizers.for_model(self.model), self.text.value),
                                          f"{len(ids)} token ids, each a row number in the embedding table")
        else:
            rows = embeddings.lookup(self.model, ids).cpu()
            self.info.value = (f"{len(ids)} rows picked from the table of shape {tuple(table.shape)} "
                               f"(vocabulary × dimensions, {table.numel():,} parameters): the result has shape "
                               f"{tuple(rows.shape)}")
            self.figure = plots.heatmap(rows, "embedding rows (one per token)", "dimension", "token",
                                        row_labels=[repr(w) for w in words], annotate=False)
            _show(self.out, self.figure)


class EmbeddingSpace(W.VBox):
    """Families of tokens projected to 1, 2 or 3 dimensions, and a word's nearest neighbours."""

    def __init__(self, model, dims=1):
        self.model, self.families = model, embeddings.families(model)
        self.dims = W.ToggleButtons(options=[("1D", 1), ("2D", 2), ("3D", 3)], value=dims, description="Project to")
        self.word = W.Text(value="king", description="Neighbours of", continuous_update=False)
        self.score, self.out, self.neighbour_view = W.HTML(), W.Output(), W.HTML()
        self.coords = self.figure = None
        self.dims.observe(lambda _: self.update(), names="value")
        self.word.observe(lambda _: self.update_neighbours(), names="value")
        super().__init__([self.dims, self.score, self.out, self.word, self.neighbour_view])
        self.update()
        self.update_neighbours()

    def update(self):
        self.coords, words, labels = embeddings.project(self.model, self.families, self.dims.value)
        self.figure = plots.projection(self.coords, words, labels,
                                       f"{len(words)} token embeddings of {self.model.name} "
                                       f"({self.model.config.n_embd} dims) projected to {self.dims.value}D by PCA")
        _show(self.out, self.figure)
        sep = embeddings.separation(self.coords, labels)
        self.score.value = (f"In {self.dims.value}D, {sep:.0%} of the words sit nearest their own family's "
                            f"centre ({len(words)} words, {len(self.families)} families).")

    def update_neighbours(self):
        try:
            pairs = embeddings.neighbours(self.model, self.word.value)
            self.neighbour_view.value = "nearest tokens (cosine similarity): " + ", ".join(
                f"<code>{html.escape(repr(t))}</code> {s:.2f}" for t, s in pairs)
        except ValueError as e:
            self.neighbour_view.value = _error(e)


def grid_html(weights, tokens, numbers=None):
    """One head's attention weights as an HTML grid: hover a cell for its value."""
    T, S = weights.shape
    numbers = S <= 14 if numbers is None else numbers
    label = lambda t: html.escape(repr(t)[1:-1])
    head = "".join(f"<th style='writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;"
                   f"padding:2px'>{label(t)}</th>" for t in tokens)
    rows = []
    for i in range(T):
        q = tokens[S - T + i]
        cells = "".join(
            f"<td title='{label(q)} → {label(tokens[j])}: {w:.3f}' style='background:rgba(31,119,180,{w:.3f});"
            f"width:30px;height:22px;text-align:center;font-size:9px;color:{'white' if w > 0.5 else '#333'}'>"
            f"{f'{w:.2f}' if numbers else ''}</td>" for j, w in enumerate(weights[i].tolist()))
        rows.append(f"<tr><th style='text-align:right;font-weight:normal;padding-right:4px'>{label(q)}</th>{cells}</tr>")
    return ("<table style='border-collapse:collapse'><tr><th style='font-size:9px;color:#666'>looking ↓ / "
            f"looked at →</th>{head}</tr>{''.join(rows)}</table>")


def _layer_head(model):
    layer = W.Dropdown(options=[(f"layer {l}", l) for l in range(model.config.n_layer)], value=0, description="Layer")
    head = W.Dropdown(options=[("average of heads", None)] + [(f"head {h}", h) for h in range(model.config.n_head)],
                      value=0, description="Head")
    return layer, head


def _pick(weights, head):  # [nh, T, S] -> [T, S]
    return weights.mean(0) if head is None else weights[head]


class AttentionExplorer(W.VBox):
    """Pick a layer and head (or their average); hover the grid for each weight; the heads as thumbnails below.

    A small model shows every layer's heads at once; a bigger one (SmolLM2: 30 x 9) shows the chosen
    layer's heads, as drawing hundreds of thumbnails takes longer than a learner should wait."""

    ALL_LAYERS_UP_TO = 64  # thumbnails

    def __init__(self, model, text="Mary had a little lamb, its fleece was white as snow"):
        self.model = model
        self.text = W.Text(value=text, description="Text", layout=W.Layout(width="60%"), continuous_update=False)
        self.layer, self.head = _layer_head(model)
        self.message, self.grid, self.thumbs = W.HTML(), W.HTML(), W.Output()
        self.weights = self.trace = None
        self.all_layers = model.config.n_layer * model.config.n_head <= self.ALL_LAYERS_UP_TO
        self.text.observe(lambda _: self.run(), names="value")
        self.layer.observe(lambda _: self.draw(thumbnails=not self.all_layers), names="value")
        self.head.observe(lambda _: self.draw(), names="value")
        super().__init__([self.text, W.HBox([self.layer, self.head]), self.message, self.grid, self.thumbs])
        self.run()

    def run(self):
        try:
            ids = self.model.check_ids(self.text.value)
        except ValueError as e:
            self.message.value = _error(e)
            return
        self.trace, self.tokens = Trace(), [self.model.decode([i]) for i in ids.tolist()]
        self.model.forward(ids, trace=self.trace)
        self.message.value = ""
        if self.all_layers:
            _show(self.thumbs, plots.head_thumbnails(torch.stack([l.weights for l in self.trace.layers]).cpu(),
                                                     self.tokens))
        self.draw(thumbnails=not self.all_layers)

    def draw(self, thumbnails=False):
        if self.trace is None:
            return
        layer = self.trace.layers[self.layer.value].weights.cpu()  # [nh, T, T]
        self.weights = _pick(layer, self.head.value)
        which = "average of heads" if self.head.value is None else f"head {self.head.value}"
        _, top, w = attention.most_attended(self.weights[-1], self.tokens)
        self.grid.value = (f"<b>layer {self.layer.value}, {which}</b>: each row sums to 1; the upper triangle is "
                           f"0 (a token cannot look ahead). The last token "
                           f"<code>{html.escape(repr(self.tokens[-1]))}</code> gives most weight to "
                           f"<code>{html.escape(repr(top))}</code> ({w:.2f}).<br>"
                           + grid_html(self.weights, self.tokens))
        if thumbnails:
            _show(self.thumbs, plots.layer_heads(layer, self.tokens, self.layer.value))


class GridFilling(W.VBox):
    """Decoding without a cache: each step recomputes the whole grid, one row bigger.

    Step s feeds the prompt and s generated tokens. The old rows come out identical
    to the step before: that is the work a KV cache saves."""

    def __init__(self, model, prompt="Mary had a little", new_tokens=8):
        self.model = model
        gen = generate(model, prompt, new_tokens, stop_at_eos=False)
        self.prompt_len, seq = len(gen.prompt_ids), gen.prompt_ids + gen.ids
        self.tokens = [model.decode([i]) for i in seq]
        self.traces = []
        for s in range(new_tokens):  # the plain forward pass of step s, as an uncached decoder runs it
            trace = Trace()
            model.forward(seq[:self.prompt_len + s], trace=trace)
            self.traces.append(trace)
        n = lambda s: self.prompt_len + s
        self.wasted_macs = [forward_macs(model.config, 0, n(s)) - forward_macs(model.config, n(s) - 1, 1)
                            for s in range(new_tokens)]
        self.layer, self.head = _layer_head(model)
        self.step = W.IntSlider(value=0, min=0, max=new_tokens - 1, description="Step", continuous_update=True)
        self.play = W.Play(value=0, min=0, max=new_tokens - 1, interval=1500, description="Play")
        W.jslink((self.play, "value"), (self.step, "value"))
        self.info, self.out = W.HTML(), W.Output()
        self.grid = self.figure = None
        for box in (self.step, self.layer, self.head):
            box.observe(lambda _: self.draw(), names="value")
        super().__init__([W.HBox([self.play, self.step, self.layer, self.head]), self.info, self.out])
        self.draw()

    def grid_at(self, s):  # [T, T] weights of the chosen layer and head at step s
        return _pick(self.traces[s].layers[self.layer.value].weights, self.head.value).cpu()

    def old_rows_change(self):
        """Largest change of any old row, in any layer and head, from one step to the next (0: none changed)."""
        return max((now.weights[:, :-1, :-1] - before.weights).abs().max().item()
                   for s in range(1, len(self.traces))
                   for now, before in zip(self.traces[s].layers, self.traces[s - 1].layers))

    def draw(self):
        s = self.step.value
        self.grid = self.grid_at(s)
        T = len(self.grid)
        recomputed = list(range(T - 1)) if s else []
        if s:
            before = self.grid_at(s - 1)
            same = (self.grid[:-1, :-1] - before).abs().max().item()
            note = (f"Rows 0–{T - 2} were computed again and came out the same (largest change {same:.1e}); "
                    f"only the last row is new. Wasted this step: {T - 1} rows of attention and "
                    f"{self.wasted_macs[s]:,} multiply-adds in the whole model.")
        else:
            note = f"The prompt's {T} tokens: a {T} × {T} grid."
        self.info.value = f"<b>Step {s}</b>: the model is fed {T} tokens. {note}"
        which = "average of heads" if self.head.value is None else f"head {self.head.value}"
        self.figure = plots.attention_grid(self.grid, self.tokens[:T], f"step {s}: {self.model.name}, layer "
                                           f"{self.layer.value}, {which}, without a cache", new_rows=[T - 1],
                                           recomputed_rows=recomputed)
        _show(self.out, self.figure)


class CacheGrowth(W.VBox):
    """Decoding with a cache: each step feeds one token, and every layer appends one K row and one V row."""

    def __init__(self, model, prompt="Mary had a little", new_tokens=8):
        self.model, cache = model, model.new_cache()
        ids = model.check_ids(prompt).tolist()
        self.snapshots, self.fed, self.nbytes = [], [], []
        feed = ids
        for _ in range(new_tokens):
            logits = model.forward(feed, cache=cache, last_only=True)
            self.snapshots.append(cache.copy())
            self.fed.append(feed)
            self.nbytes.append(cache.nbytes)
            feed = [int(logits[-1].argmax())]
        self.capacity = len(cache)
        self.step = W.IntSlider(value=0, min=0, max=new_tokens - 1, description="Step")
        self.play = W.Play(value=0, min=0, max=new_tokens - 1, interval=1500, description="Play")
        W.jslink((self.play, "value"), (self.step, "value"))
        self.info, self.out, self.figure, self.shown_bytes = W.HTML(), W.Output(), None, None
        self.step.observe(lambda _: self.draw(), names="value")
        super().__init__([W.HBox([self.play, self.step]), self.info, self.out])
        self.draw()

    def draw(self):
        s, cache = self.step.value, self.snapshots[self.step.value]
        flat = lambda t: t.transpose(0, 1).reshape(t.shape[1], -1).cpu()  # [nh, T, hs] -> [T, nh*hs]
        layers = [(flat(l.keys), flat(l.values), l.nbytes) for l in cache.layers]
        self.shown_bytes = sum(b for _, _, b in layers)
        fed = self.fed[s]
        what = (f"the prompt's {len(fed)} tokens" if s == 0 else f"one token, {self.model.decode(fed)!r}")
        per_layer = cache.layers[0].nbytes
        self.info.value = (f"<b>Step {s}</b>: fed {what}. Each layer appended {len(fed)} K row(s) and {len(fed)} "
                           f"V row(s) and now holds {len(cache)} tokens: {per_layer:,} bytes per layer, "
                           f"<b>{self.shown_bytes:,} bytes</b> in all {len(cache.layers)} layers "
                           f"({len(cache)} tokens × {self.shown_bytes // len(cache):,} bytes per token).")
        self.figure = plots.cache_growth(layers, self.capacity,
                                         f"the KV cache after step {s} (orange: the row just appended)")
        _show(self.out, self.figure)


BLOCK_COLOURS = {"hit": "#93c47d", "written": "#f6b26b", "computed": "#cccccc"}


class PromptCacheStream(W.VBox):
    """Send a stream of requests through a PromptCache and watch its blocks hit, get written, expire and
    be evicted, with each request's receipt and its cost at the prices of the provider whose mode it copies."""

    DEFAULT_PRICES = {"automatic": "openai-gpt-5", "explicit": "anthropic-5m"}

    def __init__(self, pc, requests, prices=None, seconds_between=10):
        """requests: [(label, tenant, prompt text)] (explicit mode: a 4th item, the cache_control mark);
        pc: a PromptCache on a clock the app can move (prompt_cache.ManualClock), which moves on
        `seconds_between` before each request after the first; prices: a pricing.Pricing of the cache's
        own mode (by default OpenAI's GPT-5 for automatic, Anthropic's 5-minute for explicit)."""
        self.prices = prices or pricing.PRICING[self.DEFAULT_PRICES[pc.mode]]
        pricing.check_mode(pc.mode, self.prices)
        self.pc, self.requests, self.results, self.seconds_between = pc, requests, [], seconds_between
        auto = W.Layout(width="auto")  # the whole label, never cut short
        self.next = W.Button(description="Send next request", button_style="primary", icon="paper-plane", layout=auto)
        self.forward = W.Button(description=f"Fast-forward {pc.ttl // 60 + 1:.0f} min", icon="forward",
                                layout=W.Layout(width="auto"))
        self.view, self.status = W.HTML(), W.HTML()
        self.next.on_click(lambda _: self.send())
        self.forward.on_click(lambda _: self.fast_forward())
        super().__init__([W.HBox([self.next, self.forward]), self.status, self.view])
        self.draw()

    def cost(self, receipt):
        """In units of one uncached input token, at the provider's ratios (a miniature: no minimum, our blocks)."""
        return pricing.cost(receipt, self.prices, apply_minimum=False)

    def send(self):
        if len(self.results) == len(self.requests):
            self.status.value = "All requests sent. Fast-forward the clock or build a new stream."
            return
        label, tenant, prompt, *mark = self.requests[len(self.results)]
        if self.results and hasattr(self.pc.clock, "now"):
            self.pc.clock.now += self.seconds_between  # requests arrive over time, so "least recently used" means something
        events = len(self.pc.events)
        try:
            res = self.pc.prefill(prompt, tenant=tenant, cache_control=mark[0] if mark else None)
        except ValueError as e:
            self.status.value = _error(e)
            return
        gone = [e for e in self.pc.events[events:] if e[2] in ("expire", "evict")]
        self.results.append((label, tenant, res, gone))
        r = res.receipt
        evicted = sum(e[2] == "evict" for e in gone)
        self.status.value = (f"Sent <b>{html.escape(label)}</b>: {r.cached_tokens} of {r.input_tokens} tokens cached, "
                             f"{r.written_tokens} written; cost {self.cost(r):,.1f} (uncached: {r.input_tokens})"
                             + (f"; {evicted} blocks evicted to stay within the budget" if evicted else "") + ".")
        self.draw()

    def fast_forward(self):
        if not hasattr(self.pc.clock, "now"):
            self.status.value = _error("this cache runs on the real clock: build it with clock=ManualClock() "
                                       "to fast-forward")
            return
        self.pc.clock.now += self.pc.ttl + 60
        n = self.pc.expire()
        self.status.value = f"Clock moved past the TTL: {n} blocks expired; the cache holds {len(self.pc.blocks)} now."
        self.draw()

    def draw(self):
        rows = []
        for label, tenant, res, gone in self.results:
            r = res.receipt
            blocks = "".join(f"<span title='block {i}: {s}' style='display:inline-block;width:9px;height:14px;"
                             f"margin-right:1px;background:{BLOCK_COLOURS[s]}'></span>" for i, s in enumerate(r.blocks))
            rows.append(f"<tr><td>{html.escape(label)}</td><td>{html.escape(tenant)}</td><td>{blocks}</td>"
                        f"<td>{r.input_tokens}</td><td>{r.cached_tokens}</td><td>{r.written_tokens}</td>"
                        f"<td>{res.seconds * 1e3:.1f} ms</td><td>{self.cost(r):,.1f}</td>"
                        f"<td>{len(gone) or ''}</td></tr>")
        legend = " ".join(f"<span style='background:{c};padding:0 6px'>{k}</span>" for k, c in BLOCK_COLOURS.items())
        p, nbytes = self.prices, self.pc.nbytes  # nbytes first: it drops what has expired
        budget = f" of {self.pc.max_bytes:,}" if self.pc.max_bytes is not None else ""
        size = f"blocks of {self.pc.block_size} tokens" if self.pc.mode == "automatic" else "one block per marked prefix"
        self.view.value = (
            f"<div>{self.pc.mode} caching · clock {self.pc.clock():.0f} s · TTL {self.pc.ttl} s · {size} · "
            f"cache holds {len(self.pc.blocks)} blocks, {nbytes:,}{budget} bytes</div>"
            f"<div>cost: in units of one uncached input token at {html.escape(p.provider)}'s ratios (cached {p.read:g}x, "
            f"written {p.write:g}x), as if past its {p.min_tokens:,}-token minimum · {legend}</div>"
            f"<table style='border-collapse:collapse' cellpadding='3'><tr><th>request</th><th>tenant</th>"
            f"<th>blocks</th><th>input</th><th>cached</th><th>written</th><th>prefill</th><th>cost</th>"
            f"<th>expired/evicted</th></tr>{''.join(rows)}</table>")


DTYPE_BYTES = {"fp32 (4 bytes)": 4, "bf16 / fp16 (2 bytes)": 2, "fp8 / int8 (1 byte)": 1}
CONTEXTS = [2 ** k for k in range(10, 21)]  # 1K ... 1M tokens
FITS = {True: "<span style='color:#38761d'>fits</span>", False: "<span style='color:#b00020'>does not fit</span>"}


def _tokens_label(n):
    return f"{n // 2 ** 20}M" if n >= 2 ** 20 else f"{n // 2 ** 10}K"


def _gb(nbytes):
    return f"{nbytes / 1e9:,.2f} GB"


class KVCalculator(W.VBox):
    """Size the KV cache of a real model from its architecture: pick a model, a number format, a context
    and a batch; read the bytes per layer, per sequence and per batch beside the memory of common GPUs."""

    def __init__(self, model="Llama-3-8B", dtype="bf16 / fp16 (2 bytes)", context=131072, batch=1):
        from . import memory
        self.memory = memory
        self.model = W.Dropdown(options=list(memory.CATALOGUE), value=model, description="Model")
        self.dtype = W.Dropdown(options=list(DTYPE_BYTES), value=dtype, description="Numbers",
                                layout=W.Layout(width="auto"))
        self.context = W.SelectionSlider(options=[(_tokens_label(n), n) for n in CONTEXTS], value=context,
                                         description="Context", continuous_update=False)
        self.batch = W.IntSlider(value=batch, min=1, max=64, description="Batch", continuous_update=False)
        self.info, self.shown_bytes = W.HTML(), None
        for w in (self.model, self.dtype, self.context, self.batch):
            w.observe(lambda _: self.update(), names="value")
        super().__init__([W.HBox([self.model, self.dtype]), W.HBox([self.context, self.batch]), self.info])
        self.update()

    def update(self):
        try:
            self.info.value = self.report()
        except Exception as e:  # show the problem in place; the app keeps working
            self.shown_bytes = None
            self.info.value = _error(e)

    def report(self):
        m = self.memory
        arch, b = m.CATALOGUE[self.model.value], DTYPE_BYTES[self.dtype.value]
        context, batch = self.context.value, self.batch.value
        layers = m.kv_bytes_per_layer(arch, context, b)
        sequence = sum(layers)
        total = self.shown_bytes = m.kv_bytes(arch, context, batch, b)
        weights = m.weight_bytes(arch, b)
        crossover = m.crossover_context(arch, b, batch)
        per_layer = " or ".join(f"{n:,}" for n in sorted(set(layers), reverse=True))
        kinds = (f" ({sum(arch.local_layers)} local layers capped at their {arch.window:,}-token window)"
                 if arch.window else "")
        beyond = (f"<br><span style='color:#b45f06'>{_tokens_label(context)} tokens is past {arch.name}'s "
                  f"trained context of {arch.context:,}: the cache would take this much, the model was not "
                  f"trained to read it.</span>" if context > arch.context else "")
        rows = "".join(
            f"<tr><td>{html.escape(gpu)}</td><td style='text-align:right'>{_gb(size)}</td>"
            f"<td style='text-align:right'>{total / size:.0%}</td>"
            f"<td>{FITS[total + weights <= size]}</td></tr>"
            for gpu, size in m.GPUS.items())
        return (f"<div style='line-height:1.5'><b>{html.escape(arch.name)}</b>: {arch.n_layer} layers, "
                + (f"latent attention: {arch.mla[0]} + {arch.mla[1]} numbers per layer per token, shared by all heads"
                   if arch.mla else f"{arch.n_kv_head} K/V heads × {arch.head_dim} numbers")
                + f"; {b} byte(s) per number.<br>"
                f"per layer: <b>{per_layer} bytes</b>{kinds}<br>"
                f"per sequence of {context:,} tokens: <b>{sequence:,} bytes</b> ({_gb(sequence)})<br>"
                f"per batch of {batch}: <b>{total:,} bytes</b> ({_gb(total)}) "
                f"beside {_gb(weights)} of weights<br>"
                f"the cache outweighs the weights from "
                f"<b>{'never (within 10M tokens)' if crossover is None else f'{crossover:,} tokens'}</b>"
                f"{' per sequence, at this batch' if batch > 1 else ''}{beyond}</div>"
                f"<table style='margin-top:6px'><tr><th>GPU</th><th>memory</th><th>cache / memory</th>"
                f"<th>cache + weights</th></tr>{rows}</table>")
