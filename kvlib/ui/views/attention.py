"""View 3, the attention grid: which earlier tokens each token looks at, filling row by row.

Row i is the token that looks (its query), column j a token it looks at (its key); a cell is a
softmax weight, so each row sums to 1, and the masked upper triangle is drawn empty. Step s shows
the first prompt_len + s rows (Play adds one per step); layer, head and step switch in the
browser. Where every head of every layer would not fit in the 1 MB a view may send (SmolLM2:
30 layers x 9 heads, T x T each), the view sends the layers around the chosen one and fills in
another when the browser asks for it: the one message it sends the kernel."""

import json
import reprlib

import traitlets as T

from ...errors import KVLibError, is_count
from ...i18n import t
from ...model.trace import Trace
from .base import MAX_STATE_BYTES, View, check_model, layer_head, link_for, module, pieces, prompt_ids, rounded


def layer_bytes(n_head, n):  # most bytes one layer's [n_head][n][n] can take as JSON: "0.123, " is 7
    return n_head * n * (7 * n + 4) + 4 * n_head


def mean_of_heads(layer):  # [n_head][n][n] -> [n][n]
    return [[sum(col) / len(col) for col in zip(*rows)] for rows in zip(*layer)]


class AttentionGrid(View):
    _esm = module("attention.js")
    WORDS = ("att", "stepper")
    title = T.Unicode("").tag(sync=True)
    tokens = T.List().tag(sync=True)       # the whole sequence, one string per token
    weights = T.List().tag(sync=True)      # [L][n_head][T][T], 3 decimals; None for a layer not sent (yet)
    prompt_len = T.Int(1).tag(sync=True)   # rows at step 0; step s shows prompt_len + s
    step = T.Int(0).tag(sync=True)         # the first step shown; then the browser steps alone
    layer = T.Int(0).tag(sync=True)        # the first layer shown; the browser sets it only to ask for one
    head = T.Union([T.Int(), T.Enum(["mean"])], default_value=0).tag(sync=True)  # or the mean of the heads
    notes = T.List().tag(sync=True)        # one line per step, under the grid

    @classmethod
    def of(cls, model, ids_or_text, prompt_len=None, notes=None, link=None, layer=0, head=0, title=None,
           trace=None):
        """Run `model` on the ids (or text) and show its attention. prompt_len: rows at step 0 (default:
        all, nothing to step); notes: one line per step; link: by default one made from the prompt's
        tokens, so views of one generation light up together; trace: this very run's Trace, if already made."""
        ids = prompt_ids(check_model(model, "AttentionGrid.of"), ids_or_text, "AttentionGrid.of")
        c, n = model.config, len(ids)
        prompt_len = n if prompt_len is None else prompt_len
        notes = [] if notes is None else notes
        if not (is_count(prompt_len) and 1 <= prompt_len <= n and isinstance(notes, (list, tuple))) \
                or notes and len(notes) != n - prompt_len + 1:
            raise KVLibError(f"{n} tokens, prompt_len {prompt_len!r} and notes {reprlib.repr(notes)}: give a whole "
                             "number 1 <= prompt_len <= the tokens, and a list of one note per step (or none)")
        layer, head = layer_head(model, layer, head, mean=True)
        if trace is None:
            trace = Trace()
            model.forward(ids, trace=trace)
        shapes = {tuple(t.weights.shape) for t in trace.layers} if isinstance(trace, Trace) else None
        if shapes != {(c.n_head, n, n)} or len(trace.layers) != c.n_layer:
            got = f"a {type(trace).__name__}" if shapes is None else \
                f"{len(trace.layers)} layers of weights {', '.join(map(str, sorted(shapes))) or '(none)'}"
            raise KVLibError(f"trace= takes the Trace of this very run: {c.n_layer} layers of weights "
                             f"{(c.n_head, n, n)} (heads, tokens, tokens) for these {n} tokens; got {got}")
        tokens = pieces(model, ids)
        view = cls(title=t("att.title", model=model.name, tokens=len(tokens)) if title is None else title,
                   tokens=tokens, prompt_len=int(prompt_len), notes=list(notes), head=head,
                   link=link or link_for(tokens[:prompt_len]))
        view._weights = [t.weights.cpu() for t in trace.layers]  # [n_head, T, T] per layer, sent on demand
        view.weights = view._around(layer)
        view.layer = layer
        return view.check_size()

    @T.observe("layer")
    def _fill(self, change):  # the browser asks for a layer it lacks by setting `layer`
        if self.weights and self.weights[change.new] is None:
            self.weights = self._around(change.new)

    def _around(self, layer):  # -> [L]: the layers nearest `layer` that fit in the state, rounded; None elsewhere
        L, (n_head, n, _) = len(self._weights), self._weights[0].shape
        room = MAX_STATE_BYTES - len(json.dumps([self.tokens, self.notes, self.title, self.link])) - 1000
        k = max(1, min(L, room // layer_bytes(n_head, n)))  # one layer at least: check_size says if it is too big
        start = min(max(0, layer - k // 2), L - k)
        return [rounded(w, 3) if start <= l < start + k else None for l, w in enumerate(self._weights)]

    def summary(self):
        layer = self.weights[self.layer]
        grid = mean_of_heads(layer) if self.head == "mean" else layer[self.head]
        which = t("att.summary_mean") if self.head == "mean" else t("att.head_n", h=self.head)
        lines = [self.title, t("att.summary", layer=self.layer, which=which)]
        if len(grid) <= 14:
            lines += [f"{t!r:>14} " + " ".join(f"{w:.2f}" for w in row[:i + 1])
                      for i, (t, row) in enumerate(zip(self.tokens, grid))]
        else:
            top = sorted(range(len(grid)), key=lambda j: -grid[-1][j])[:3]
            lines.append(t("att.summary_top", last=repr(self.tokens[-1]),
                           top=", ".join(f"{self.tokens[j]!r} {grid[-1][j]:.2f}" for j in top)))
        return "\n".join(lines + [f"step {s}: {note}" for s, note in enumerate(self.notes)])
