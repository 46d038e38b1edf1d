"""Interactive apps for the notebooks, composed from the engine, the browser-drawn views and the plots.

Each app is an ipywidgets box: display it, or drive it headless by setting `.value`
and calling `.click()` (as the tests do). Bad input shows a message in place and
the app keeps working (the ipywidgets pattern of an error area beside the output).
Slow work waits for `continuous_update=False` sliders.
"""

import html
import math
import threading
from typing import NamedTuple

import ipywidgets as W

from ..errors import KVLibError, is_count
from ..i18n import magnitude, t
from ..lessons import embeddings, pricing, tokenization
from ..lessons.cache_evidence import rows_change
from ..lessons.memory import forward_macs
from ..model.trace import Trace
from ..server.generate import generate
from ..server.sampling import check_sampling
from . import plots
from .views import AttentionGrid, EmbeddingMap, Matrix, PromptBlocks, View, link_for
from .views import TokenStrip  # one strip of chips; widgets.Tokens is the app around the strips
from .views.base import with_fallback

def _error(message):
    return f"<div style='color:#b00020;padding:4px 0'>⚠ {html.escape(str(message), quote=False)}</div>"


def _clear(strips):
    for strip in strips:
        with strip.hold_sync():
            strip.title, strip.tokens = "", []


def _inside(widget):  # the widget and every widget it holds, depth first
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _inside(child)


class App(W.VBox):
    """An app holding views: where widgets cannot be drawn (nbconvert's HTML, a repository viewer) it
    reads as its views' text summaries, not as `VBox(...)`."""

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        views = [w for w in _inside(self) if isinstance(w, View)]
        return with_fallback(data, "\n\n".join(v.summary() for v in views)) if views else data


class Chat(W.VBox):
    """A prompt box and a Send button that streams the answer token by token, as a chat UI does."""

    def __init__(self, model, prompt="ROMEO.\n", max_new_tokens=40):
        self.model, self.last = model, None
        self.prompt = W.Textarea(value=prompt, description=t("chat.prompt"), layout=W.Layout(width="95%", height="70px"))
        self.max_tokens = W.BoundedIntText(value=max_new_tokens, min=1, max=10**6, description=t("chat.max_tokens"))
        self.temperature = W.FloatSlider(value=0.0, min=0.0, max=2.0, step=0.1, description=t("chat.temperature"),
                                         continuous_update=False, style={"description_width": "initial"})
        self.send, self.stop = W.Button(description=t("chat.send"), button_style="primary", icon="paper-plane"), \
            W.Button(description=t("chat.stop"), icon="stop", disabled=True)
        self.answer = W.HTML()
        self.status = W.HTML(t("chat.ready", model=html.escape(model.name)))
        self._stop, self._thread = threading.Event(), None
        self.send.on_click(lambda _: self.start())
        self.stop.on_click(lambda _: self._stop.set())
        super().__init__([self.prompt, W.HBox([self.max_tokens, self.temperature, self.send, self.stop]),
                          self.answer, self.status])

    def start(self):
        if self._thread is not None and self._thread.is_alive():  # a second click before the button greyed out
            return
        try:
            ids = self.model.check_ids(self.prompt.value)
            room = self.model.config.n_ctx - len(ids)
            check_sampling(self.max_tokens.value, self.temperature.value, None, None)
            if room < 1:
                raise KVLibError(f"the prompt fills all {self.model.config.n_ctx} tokens of the context: shorten it "
                                 f"so an answer fits")
            if self.max_tokens.value > room:
                raise KVLibError(f"{self.max_tokens.value} tokens do not fit: the prompt holds {len(ids)} of "
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

        def show(answer, cursor):
            self.answer.value = (f"<pre style='white-space:pre-wrap;font-size:13px'>{prompt}<b style="
                                 f"'background:{plots.GENERATED}'>{html.escape(answer)}</b>{cursor}</pre>")

        def on_token(token, piece):
            streamed.append(piece)  # "" while a character is still arriving token by token
            show("".join(streamed), "▌")
            self.status.value = t("chat.streamed", n=len(streamed))
            return not self._stop.is_set()

        try:
            gen = generate(self.model, ids, self.max_tokens.value, temperature=self.temperature.value,
                           on_token=on_token)
            self.last = gen
            show(gen.text, "")  # the whole answer, a character cut off by the last token included
            per = sum(gen.step_seconds) / len(gen.step_seconds)
            self.status.value = t("chat.done", model=html.escape(self.model.name), n=len(gen.ids),
                                  seconds=sum(gen.step_seconds), ms=per * 1e3, reason=gen.stop_reason)
        except Exception as e:  # a thread's error would vanish: show it in place
            self.status.value = _error(e)
        finally:
            self.send.disabled, self.stop.disabled = False, True


class Tokens(App):
    """Type text; see it cut into chunks by each tokenizer: a strip of chips per tokenizer (id beneath,
    bytes on hover), drawn in the browser."""

    def __init__(self, model, text="Will will Will's will be done? 轩辕养了一只黄色的虎皮鹦鹉 🦜"):
        self.model, self.tokenizers = model, tokenization.available(model)
        self.text = W.Textarea(value=text, description=t("app.text"), layout=W.Layout(width="95%", height="60px"),
                               continuous_update=False)
        self.message, self.strips, self.counts = W.HTML(), [TokenStrip() for _ in self.tokenizers], {}
        self.text.observe(lambda _: self.update(), names="value")
        super().__init__([self.text, self.message, *self.strips])
        self.add_class("kv-app-tokens")  # tags a static page reads (kvlib/tools/site.py): which app, which strip it can redo
        for strip, tok in zip(self.strips, self.tokenizers):
            strip.add_class("kv-strip-gpt2" if tok is tokenization.gpt2() else
                            "kv-strip-own" if tok is self.tokenizers[0] else "kv-strip-openai")
        self.update()

    def update(self):
        text = self.text.value
        try:
            data = [TokenStrip.data(tok, text) for tok in self.tokenizers]
        except ValueError as e:
            self.message.value, self.counts = _error(e), {}
            _clear(self.strips)  # the last text's chips would read as this one's
            return
        for tok, d in zip(self.tokenizers[1:], data[1:]):  # another tokenizer's positions are not the model's
            d["link"] = link_for([tok.name] + [t["text"] for t in d["tokens"]])
        for strip, d in zip(self.strips, data):
            with strip.hold_sync():
                strip.title, strip.link, strip.tokens = d["title"], d["link"], d["tokens"]
        self.counts = {tok.name: [t["id"] for t in d["tokens"]] for tok, d in zip(self.tokenizers, data)}
        n = len(self.counts[self.tokenizers[0].name])
        self.message.value = (_error(f"{n} tokens: longer than {self.model.name}'s context of "
                                     f"{self.model.config.n_ctx}, so the model could not read all of it")
                              if not self.model.fits(n) else "")


class Divergence(App):
    """Two prompts, token by token: where they first differ is where a prompt cache stops hitting."""

    def __init__(self, model, a="To be, or not to be, that is the question", b="To be, or not to be: that is the question"):
        self.tokenizer = tokenization.for_model(model)
        self.names = t("app.prompt_a"), t("app.prompt_b")
        self.a, self.b = (W.Text(value=v, description=d, layout=W.Layout(width="95%"), continuous_update=False)
                          for v, d in zip((a, b), self.names))
        self.note, self.strips, self.index = W.HTML(), [TokenStrip(), TokenStrip()], None
        for box in (self.a, self.b):
            box.observe(lambda _: self.update(), names="value")
        super().__init__([self.a, self.b, self.note, *self.strips])
        self.update()

    def update(self):
        try:
            data = [TokenStrip.data(self.tokenizer, box.value, title=name)
                    for box, name in zip((self.a, self.b), self.names)]
        except ValueError as e:
            self.note.value, self.index = _error(e), None
            _clear(self.strips)
            return
        ids = [[t["id"] for t in d["tokens"]] for d in data]
        self.index = tokenization.first_divergence(*ids)
        shared = min(map(len, ids)) if self.index is None else self.index
        self.note.value = t("divergence.parted" if self.index is not None else "divergence.same" if ids[0] == ids[1]
                            else "divergence.prefix", shared=shared, index=self.index)
        for strip, d in zip(self.strips, data):
            with strip.hold_sync():
                strip.title, strip.link, strip.tokens, strip.mark = d["title"], d["link"], d["tokens"], shared


class Lookup(App):
    """Token ids ⇄ their embedding rows: the lookup is just picking rows of a table."""

    def __init__(self, model, text="Mary had a little lamb"):
        self.model = model
        self.text = W.Text(value=text, description=t("app.text"), continuous_update=False)
        self.mode = W.ToggleButtons(options=[(t("lookup.ids"), "token ids"), (t("lookup.rows"), "embedding rows")],
                                    value="token ids")
        self.info, self.view = W.HTML(), None
        self.text.observe(lambda _: self.update(), names="value")
        self.mode.observe(lambda _: self.update(), names="value")
        super().__init__([W.HBox([self.text, self.mode]), self.info])
        self.update()

    def update(self):
        try:  # the new view is built before the old one goes: a text it cannot show leaves a message, not a gap
            info, view = self.build()
        except ValueError as e:
            info, view = _error(e), None
        if self.view is not None:
            self.view.close()
        self.info.value, self.view = info, view
        self.children = [*self.children[:2], *([view] if view is not None else [])]

    def build(self):  # -> (the line above the view, the view)
        ids = self.model.check_ids(self.text.value).tolist()
        if self.mode.value == "token ids":
            return "", TokenStrip.of(self.model, self.text.value,
                                     title=t("lookup.strip", ids=len(ids)))
        table, rows = embeddings.table(self.model), embeddings.lookup(self.model, ids).cpu()
        info = t("lookup.info", ids=len(ids), shape=tuple(table.shape), numbers=f"{table.numel():,}",
                 rows=tuple(rows.shape))
        return info, Matrix.of(rows, [self.model.decode([i]) for i in ids], t("lookup.matrix"))


class EmbeddingSpace(App):
    """Families of tokens projected to 1, 2 or 3 dimensions (switched and turned in the browser, with the
    separation score beside them), and a word's nearest neighbours (looked up in the kernel)."""

    def __init__(self, model, dims=1):
        self.model, self.families = model, embeddings.word_families(model)
        self.view = EmbeddingMap.of(model, self.families, dims)
        self.word = W.Text(value="king", description=t("space.word"), continuous_update=False,
                           style={"description_width": "initial"})
        self.neighbour_view = W.HTML()
        self.word.observe(lambda _: self.update_neighbours(), names="value")
        super().__init__([self.view, self.word, self.neighbour_view])
        self.update_neighbours()

    def update_neighbours(self):
        try:
            word, pairs = self.word.value.strip(), embeddings.neighbours(self.model, self.word.value)
            token = self.model.decode([embeddings.token_of(self.model, word)])
            # a word the tokenizer splits is looked up by its first piece: say so, or 'M' passes for 'Montague'
            split = "" if token.strip() == word else t("space.split", word=repr(word))
            self.neighbour_view.value = (t("space.nearest", token=f"<code>{html.escape(repr(token))}</code>",
                                           split=html.escape(split)) + ", ".join(
                                             f"<code>{html.escape(repr(tok))}</code> {s:.2f}" for tok, s in pairs))
        except ValueError as e:
            self.neighbour_view.value = _error(e)


class AttentionExplorer(App):
    """Type a text and the model reads it in the kernel; pick a layer and a head (or their average), see
    every head of the layer as a thumbnail, hover the grid for each weight: all in the browser."""

    def __init__(self, model, text="Mary had a little lamb, its fleece was white as snow", layer=0, head=0):
        self.model, self.layer, self.head = model, layer, head
        self.text = W.Text(value=text, description=t("app.text"), layout=W.Layout(width="60%"), continuous_update=False)
        self.message, self.grid = W.HTML(), None
        self.text.observe(lambda _: self.run(), names="value")
        super().__init__([self.text, self.message])
        self.add_class("kv-app-attention")  # so a static page knows which app this box is (kvlib/tools/site.py)
        self.run()

    def run(self):  # a new view per text, starting at the layer and head given
        try:
            grid, message = AttentionGrid.of(self.model, self.text.value, layer=self.layer, head=self.head), ""
        except ValueError as e:  # KVLibError too: an empty text, or one too long for the context or the view
            grid, message = None, _error(e)  # the last text's grid would read as this one's
        old, self.grid = self.grid, grid
        self.message.value = message
        self.children = [self.text, self.message] + ([grid] if grid is not None else [])
        if old is not None:
            old.close()  # its comm and its weights, kept in the kernel for layers not yet sent


def _largest_change(before, after):  # Traces of n and n+1 tokens -> the largest change of an old weight, any layer and head
    return max(rows_change(before, after, ["weights"])["weights"])


class GridFilling(App):
    """Decoding without a cache: each step runs the model over the whole text again, one token longer, so
    it recomputes the whole attention grid, one row bigger.

    The old rows come out the same as the step before: each step's note says by how much (in any layer
    and head) and what recomputing them cost; that is the work a KV cache saves. Play adds one row per
    step, in the browser (views.AttentionGrid)."""

    def __init__(self, model, prompt="Mary had a little", new_tokens=8):
        room = model.config.n_ctx - len(model.check_ids(prompt)) + 1  # the last token made is never fed back
        if room < 2:  # two steps at least: one to compare the other with
            raise KVLibError(f"the grid needs 2 new tokens after the prompt, and {model.name}'s context of "
                             f"{model.config.n_ctx} leaves room for {room}: shorten the prompt")
        if not is_count(new_tokens) or not 2 <= new_tokens <= room:
            raise KVLibError(f"the grid fills 2 to {room} new tokens after this prompt in {model.name}'s context "
                             f"of {model.config.n_ctx}, not {new_tokens!r}: shorten the prompt or ask for fewer")
        gen = generate(model, prompt, new_tokens, stop_at_eos=False)
        self.prompt_len = len(gen.prompt_ids)
        n = lambda s: self.prompt_len + s  # tokens fed at step s
        fed = (gen.prompt_ids + gen.ids)[:n(new_tokens - 1)]  # the last token generated is never fed back
        self.traces = []
        for s in range(new_tokens):  # the plain forward pass of step s, as an uncached decoder runs it
            trace = Trace()
            model.forward(fed[:n(s)], trace=trace)
            self.traces.append(trace)
        self.wasted_macs = [forward_macs(model.config, 0, n(s)) - forward_macs(model.config, n(s) - 1, 1)
                            for s in range(new_tokens)]
        notes = [t("grid.first", n=n(0))] + [
            t("grid.again", n=n(s), old=n(s) - 2, before=s - 1, change=f"{_largest_change(before, after):.1e}",
              old_rows=n(s) - 1, macs=f"{self.wasted_macs[s]:,}")
            for s, (before, after) in enumerate(zip(self.traces, self.traces[1:]), 1)]
        self.grid = AttentionGrid.of(model, fed, self.prompt_len, notes, trace=self.traces[-1],
                                     title=t("grid.title", model=model.name))
        super().__init__([self.grid])
        self.add_class("kv-app-gridfilling")  # so a static page knows which app this box is (kvlib/tools/site.py)

    def old_rows_change(self):
        """Largest change of any old row, in any layer and head, from one step to the next (0: none changed)."""
        return max(_largest_change(b, a) for b, a in zip(self.traces, self.traces[1:]))

    def summary(self):
        """The grid as text, and its steps in three lines (the browser shows one note per step)."""
        grid = self.grid.summary().split("\nstep 0: ")[0]  # the title and the grid, without the per-step notes
        n, last = self.prompt_len, len(self.traces) - 1
        return "\n".join([
            grid, t("grid.summary_first", n=n),
            t("grid.summary_again", last=last, change=f"{self.old_rows_change():.1g}"),
            t("grid.summary_last", last=last, rows=n + last - 1, macs=magnitude(self.wasted_macs[-1]))])

    def _repr_mimebundle_(self, **kwargs):
        return with_fallback(W.VBox._repr_mimebundle_(self, **kwargs), self.summary())


class StreamRequest(NamedTuple):  # one request of a PromptCacheStream (serving.Request is a served one)
    label: str
    tenant: str
    prompt: str
    mark: int = None  # explicit mode: where its cache_control marker ends the cached prefix


class Sent(NamedTuple):  # what sending one request did
    label: str
    tenant: str
    prefill: object   # the PromptCache's Prefill: logits, block table, receipt, seconds
    gone: list        # the Events of blocks expired or evicted on its way in


def _seconds_label(seconds):  # 360 -> "6 min", 90 -> "90 s"
    return t("stream.minutes", n=seconds / 60) if seconds % 60 == 0 else f"{seconds:g} s"


class PromptCacheStream(App):
    """Send a stream of requests through a PromptCache and watch its blocks hit, get written, expire and
    be evicted, with each request's receipt and its cost at the prices of the provider whose mode it copies."""

    DEFAULT_PRICES = {"automatic": "openai-gpt-5", "explicit": "anthropic-5m"}

    def __init__(self, pc, requests, prices=None, seconds_between=10):
        """requests: [StreamRequest(label, tenant, prompt text, mark)] or plain tuples of the same (the mark, for
        explicit mode's cache_control, may be left out);
        pc: a PromptCache on a clock the app can move (prompt_cache.ManualClock), which moves on
        `seconds_between` before each request after the first; prices: a pricing.Pricing of the cache's
        own mode (by default OpenAI's GPT-5 for automatic, Anthropic's 5-minute for explicit)."""
        self.prices = prices or pricing.PRICING[self.DEFAULT_PRICES[pc.mode]]
        pricing.check_mode(pc.mode, self.prices)
        self.pc, self.seconds_between = pc, seconds_between
        self.requests, self.results = [StreamRequest(*r) for r in requests], []  # results: a Sent per request sent
        auto = W.Layout(width="auto")  # the whole label, never cut short
        self.next = W.Button(description=t("stream.send"), button_style="primary", icon="paper-plane", layout=auto)
        never = math.isinf(pc.ttl)  # nothing to fast-forward to
        self.forward = W.Button(description=t("stream.no_ttl") if never else
                                t("stream.forward", t=_seconds_label(pc.ttl + 60)), icon="forward", disabled=never,
                                layout=W.Layout(width="auto"))
        p = self.prices
        self.view = PromptBlocks(pc, note=t("stream.note", provider=p.name, read=p.read, write=p.write,
                                            least=p.min_tokens))
        self.status = W.HTML()
        self.next.on_click(lambda _: self.send())
        self.forward.on_click(lambda _: self.fast_forward())
        super().__init__([W.HBox([self.next, self.forward]), self.status, self.view])
        self.add_class("kv-app-promptcachestream")  # so a static page knows which app this box is (kvlib/tools/site.py)

    def cost(self, receipt):
        """In units of one uncached input token, at the provider's ratios (a miniature: no minimum, our blocks)."""
        return pricing.cost(receipt, self.prices, apply_minimum=False)

    def send(self):
        if len(self.results) == len(self.requests):
            self.status.value = t("stream.all_sent") + t("stream.build_new" if self.forward.disabled else
                                                         "stream.forward_or_new")
            return
        label, tenant, prompt, mark = self.requests[len(self.results)]
        moved = bool(self.results) and hasattr(self.pc.clock, "now")
        if moved:
            self.pc.clock.now += self.seconds_between  # requests arrive over time, so "least recently used" means something
        events = len(self.pc.events)
        try:
            res = self.pc.prefill(prompt, tenant=tenant, cache_control=mark)
        except ValueError as e:  # refused before the cache read its clock: this request never arrived
            if moved:
                self.pc.clock.now -= self.seconds_between
            self.status.value = _error(e)
            return
        gone = [e for e in self.pc.events[events:] if e.kind in ("expire", "evict")]
        self.results.append(Sent(label, tenant, res, gone))
        r = res.receipt
        try:
            self.view.add(label, tenant, prompt, res, self.cost(r), mark, len(gone))
        except KVLibError as e:  # sent, but the view of every request so far is too big for the page
            self.status.value = _error(f"Sent {label}, but not drawn: {e}")
            return
        evicted = sum(e.kind == "evict" for e in gone)
        self.status.value = (t("stream.sent", label=html.escape(label), cached=r.cached_tokens, n=r.input_tokens,
                               written=r.written_tokens, cost=self.cost(r))
                             + (t("stream.evicted", n=evicted) if evicted else "") + t("stream.end"))

    def fast_forward(self):
        if self.forward.disabled:  # no TTL: nothing would ever expire, and the clock would move to infinity
            return
        if not hasattr(self.pc.clock, "now"):
            self.status.value = _error("this cache runs on the real clock: build it with clock=ManualClock() "
                                       "to fast-forward")
            return
        self.pc.clock.now += self.pc.ttl + 60  # a minute past the TTL, as the button says
        n = self.pc.expire()
        self.status.value = t("stream.expired", n=n, held=len(self.pc.index))
        self.view.refresh()


DTYPE_BYTES = {"fp32 (4 bytes)": 4, "bf16 / fp16 (2 bytes)": 2, "fp8 / int8 (1 byte)": 1}
CONTEXTS = [2 ** k for k in range(10, 21)]  # 1K ... 1M tokens
BATCHES = range(1, 65)  # sequences decoded together
FITS = {True: ("#38761d", "calc.fits"), False: ("#b00020", "calc.does_not_fit")}  # colour, and the words beside it


def _tokens_label(n):
    return f"{n // 2 ** 20}M" if n >= 2 ** 20 else f"{n // 2 ** 10}K"


def _gb(nbytes):
    return f"{nbytes / 1e9:,.2f} GB"


def _offer(values):  # "1 to 64" for a range, else the values in a list
    return f"{values[0]} to {values[-1]}" if isinstance(values, range) else ", ".join(map(repr, values))


class KVCalculator(W.VBox):
    """Size the KV cache of a real model from its architecture: pick a model, a number format, a context
    and a batch; read the bytes per layer, per sequence and per batch beside the memory of common GPUs."""

    def __init__(self, model="Llama-3.1-8B", dtype="bf16 / fp16 (2 bytes)", context=131072, batch=1):
        from ..lessons import memory
        self.memory = memory
        # the sliders would clamp a batch or refuse a context with a traitlets error: say what they offer instead
        for name, value, offered in (("model", model, list(memory.CATALOGUE)), ("dtype", dtype, list(DTYPE_BYTES)),
                                     ("context", context, CONTEXTS), ("batch", batch, BATCHES)):
            if value not in offered:
                raise KVLibError(f"the calculator offers {name} {_offer(offered)}, not {value!r}")
        self.model = W.Dropdown(options=list(memory.CATALOGUE), value=model, description=t("calc.model"))
        self.dtype = W.Dropdown(options=[(t(f"calc.{d}"), d) for d in DTYPE_BYTES], value=dtype,
                                description=t("calc.numbers"), layout=W.Layout(width="auto"))
        self.context = W.SelectionSlider(options=[(_tokens_label(n), n) for n in CONTEXTS], value=context,
                                         description=t("calc.context"), continuous_update=False)
        self.batch = W.IntSlider(value=batch, min=BATCHES[0], max=BATCHES[-1], description=t("calc.batch"),
                                 continuous_update=False)
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
        weights = m.all_weight_bytes(arch, b)
        crossover = m.crossover_context(arch, b, batch)
        per_layer = t("calc.or").join(f"{n:,}" for n in sorted(set(layers), reverse=True))
        kinds = t("calc.local", n=sum(arch.local_layers), window=f"{arch.window:,}") if arch.window else ""
        beyond = ("<br><span style='color:#b45f06'>"
                  + t("calc.beyond", label=_tokens_label(context), name=arch.name, context=f"{arch.context:,}")
                  + "</span>" if context > arch.context else "")
        fits = {ok: f"<span style='color:{colour}'>{t(key)}</span>" for ok, (colour, key) in FITS.items()}
        rows = "".join(
            f"<tr><td>{html.escape(gpu)}</td><td style='text-align:right'>{_gb(size)}</td>"
            f"<td style='text-align:right'>{total / size:.0%}</td>"
            f"<td>{fits[total + weights <= size]}</td></tr>"
            for gpu, size in m.GPUS.items())
        when = t("calc.never") if crossover is None else t("calc.tokens", n=f"{crossover:,}")
        return (f"<div style='line-height:1.5'><b>{html.escape(arch.name)}</b>: {t('calc.layers', n=arch.n_layer)}, "
                + (t("calc.latent", latent=arch.mla[0], rope=arch.mla[1])
                   if arch.mla else t("calc.heads", heads=arch.n_kv_head, size=arch.head_dim))
                + f"; {t('calc.per_number', n=b)}<br>"
                + t("calc.per_layer", bytes=per_layer) + f"{kinds}<br>"
                + t("calc.per_sequence", context=f"{context:,}", bytes=f"{sequence:,}", gb=_gb(sequence)) + "<br>"
                + t("calc.per_batch", batch=batch, bytes=f"{total:,}", gb=_gb(total), weights=_gb(weights)) + "<br>"
                + t("calc.outweighs", when=when, at_batch=t("calc.at_batch") if batch > 1 else "") + f"{beyond}</div>"
                f"<table style='margin-top:6px'><tr>{t('calc.heads_row')}</tr>{rows}</table>")
