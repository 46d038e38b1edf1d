"""A worked step a learner can follow with a pencil: one cached decode step of one attention head.

Part by part: the new token's q row; K with its new row appended; the one row of scores
(q · Kᵀ / √head size); the mask (nothing to hide: the newest token may look at every earlier
one); softmax; V with its new row; the one output row (weights · V). `toy_step()` continues
notebook 4's toy head (small whole numbers a learner can multiply by hand) by one token;
`of(model, ...)` the same step on a real head of the loaded model, with its live numbers."""

import math
import reprlib

import torch
import traitlets as T

from ... import i18n
from ...errors import KVLibError
from ...lessons.attention import toy_cached_step
from ...lessons.cache_evidence import cached_step
from .base import View, check_model, layer_head, link_for, module, numbers, prompt_ids, rounded

PARTS = ["q", "K", "scores", "mask", "weights", "V", "out"]
def attend(q, K, V):  # q [1, hs], K and V [S, hs] -> scores, mask, weights [1, S], out [1, hs]
    scores = q @ K.T / math.sqrt(q.shape[-1])
    mask = torch.zeros_like(scores)  # the newest token sees all S tokens: nothing above the diagonal in its row
    weights = torch.softmax(scores + mask, -1)
    return scores, mask, weights, weights @ V


class DecodeStep(View):
    _esm = module("step.js")
    WORDS = ("step", "matrix")
    title = T.Unicode().tag(sync=True)
    toy = T.Bool(False).tag(sync=True)
    prefill = T.Bool(False).tag(sync=True)  # the last row of a prefill (every row computed at once), not a cached step
    tokens = T.List().tag(sync=True)   # the S tokens in the cache after the step; the last is the new one
    parts = T.Dict().tag(sync=True)    # part -> [rows][cols], rounded for display
    order = T.List(PARTS).tag(sync=True)  # the order the step computes them in (JSON need not keep a dict's)
    digits = T.Int(2).tag(sync=True)
    head_dim = T.Int().tag(sync=True)

    @classmethod
    def from_tensors(cls, tokens, q, K, V, title, toy=False, link=None, prefill=False):
        """q [1, hs], K and V [S, hs] with the new token's row last (prefill: the last row of a whole prompt's)."""
        if not (isinstance(tokens, (list, tuple)) and tokens and all(isinstance(t, str) for t in tokens)):
            raise KVLibError(f"a step's tokens are a list of strings, the new token's last; got {reprlib.repr(tokens)}")
        q, K, V = (numbers(x, name) for x, name in ((q, "q"), (K, "K"), (V, "V")))
        if K.dim() != 2 or q.shape != (1, K.shape[1]) or K.shape != V.shape or K.shape[0] != len(tokens) \
                or not K.shape[1]:
            raise KVLibError(f"a step needs q [1, hs] and K, V [S, hs] for S = {len(tokens)} tokens (hs at least 1); "
                             f"got {tuple(q.shape)}, {tuple(K.shape)}, {tuple(V.shape)}")
        scores, mask, weights, out = attend(q, K, V)
        parts = dict(q=q, K=K, scores=scores, mask=mask, weights=weights, V=V, out=out)
        return cls(title=title, toy=toy, prefill=bool(prefill), tokens=list(tokens), head_dim=K.shape[1],
                   parts={k: rounded(v, 4) for k, v in parts.items()}, link=link or link_for(list(tokens))).check_size()

    @classmethod
    def toy_step(cls):
        """Notebook 4's toy head, one step on: its prefill's K and V kept, the next token fed alone."""
        tokens, q, K, V = toy_cached_step()
        title = i18n.t("step.toy_title", token=repr(tokens[-1]), cached=len(tokens) - 1, hs=K.shape[1])
        return cls.from_tensors(tokens, q, K, V, title, toy=True)

    @classmethod
    def of(cls, model, prompt="Mary had a little", layer=0, head=0, link=None):
        """The same step on a real head: prefill `prompt`, feed its greedy next token, read layer `layer`."""
        ids = prompt_ids(check_model(model, "DecodeStep.of"), prompt, "DecodeStep.of")
        layer, head = layer_head(model, layer, head)  # before the model runs
        trace, cache, token = cached_step(model, ids)
        kv = model.config.kv_head(head)  # grouped heads: query head `head` reads this K/V head
        t, held = trace.layers[layer], cache.layers[layer]
        ids = ids + [token]
        tokens = [model.decode([i]) for i in ids]
        # only grouped heads name the K/V head: with one per query head it is the head itself (notebook 5 names
        # K/V heads when it comes to GQA, after this step)
        reads = i18n.t("step.reads", kv=kv) if model.config.n_kv_head < model.config.n_head else ""
        return cls.from_tensors(tokens, t.q[head].cpu(), held.keys[kv].cpu(), held.values[kv].cpu(),
                                i18n.t("step.title", model=model.name, layer=layer, head=head, reads=reads,
                                       token=repr(tokens[-1])), link=link or link_for(tokens[:-1]))

    def summary(self):
        def row_text(row):  # up to 8 numbers; −∞ as the mask means it
            cut = " ".join("−∞" if x == float("-inf") else f"{x:.{self.digits}f}" for x in row[:8])
            return cut + (" …" if len(row) > 8 else "")

        lines = [self.title]
        for name in PARTS:
            rows = self.parts[name]
            # the last row is the new token's (K and V): never cut it; cut the middle of a long cache instead
            shown = [row_text(r) for r in rows] if len(rows) <= 6 else \
                [*map(row_text, rows[:2]), f"… {len(rows) - 3} rows …", row_text(rows[-1])]
            note = i18n.t("step.summary_mask") \
                if name == "mask" and not any(x for r in rows for x in r) else ""
            lines.append(f"{name} ({len(rows)} × {len(rows[0])}): " + " | ".join(shown) + note)
        return "\n".join(lines)
