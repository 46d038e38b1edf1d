"""A worked step a learner can follow with a pencil: one cached decode step of one attention head.

Part by part: the new token's q row; K with its new row appended; the one row of scores
(q · Kᵀ / √head size); the mask (nothing to hide: the newest token may look at every earlier
one); softmax; V with its new row; the one output row (weights · V). `toy_step()` uses small
made-up numbers (4 tokens, head size 4, so √4 = 2) that a learner can multiply by hand;
`of(model, ...)` the same step on a real head of the loaded model, with its live numbers."""

import math

import torch
import traitlets as T

from ..cache_evidence import cached_step
from ..errors import KVLibError
from .base import View, link_for, module, rounded

PARTS = ["q", "K", "scores", "mask", "weights", "V", "out"]
TOY_TOKENS = ["Mary", " had", " a", " little"]
TOY = {  # one decimal each, so every product is easy by hand
    "q": [[0.4, -0.2, 0.6, 0.2]],
    "K": [[0.5, 0.1, 0.8, -0.3], [-0.2, 0.4, 0.1, 0.6], [0.1, -0.5, 0.3, 0.2], [0.6, 0.2, 0.9, 0.1]],
    "V": [[0.9, -0.1, 0.2, 0.4], [0.1, 0.8, -0.3, 0.2], [-0.4, 0.3, 0.6, 0.1], [0.3, 0.5, 0.7, -0.2]],
}


def attend(q, K, V):  # q [1, hs], K and V [S, hs] -> scores, mask, weights [1, S], out [1, hs]
    scores = q @ K.T / math.sqrt(q.shape[-1])
    mask = torch.zeros_like(scores)  # the newest token sees all S tokens: nothing above the diagonal in its row
    weights = torch.softmax(scores + mask, -1)
    return scores, mask, weights, weights @ V


class DecodeStep(View):
    _esm = module("step.js")
    title = T.Unicode().tag(sync=True)
    toy = T.Bool(False).tag(sync=True)
    tokens = T.List().tag(sync=True)   # the S tokens in the cache after the step; the last is the new one
    parts = T.Dict().tag(sync=True)    # part -> [rows][cols], rounded for display
    order = T.List(PARTS).tag(sync=True)  # the order the step computes them in (JSON need not keep a dict's)
    digits = T.Int(2).tag(sync=True)
    head_dim = T.Int().tag(sync=True)

    @classmethod
    def from_tensors(cls, tokens, q, K, V, title, toy=False, link=None):
        """q [1, hs], K and V [S, hs] with the new token's row last."""
        q, K, V = (torch.as_tensor(x, dtype=torch.float64) for x in (q, K, V))
        if q.shape != (1, K.shape[1]) or K.shape != V.shape or K.shape[0] != len(tokens):
            raise KVLibError(f"a step needs q [1, hs] and K, V [S, hs] for S = {len(tokens)} tokens; got "
                             f"{tuple(q.shape)}, {tuple(K.shape)}, {tuple(V.shape)}")
        scores, mask, weights, out = attend(q, K, V)
        parts = dict(q=q, K=K, scores=scores, mask=mask, weights=weights, V=V, out=out)
        return cls(title=title, toy=toy, tokens=list(tokens), head_dim=K.shape[1],
                   parts={k: rounded(v, 4) for k, v in parts.items()}, link=link or link_for(list(tokens))).check_size()

    @classmethod
    def toy_step(cls):
        return cls.from_tensors(TOY_TOKENS, TOY["q"], TOY["K"], TOY["V"],
                                "Toy numbers: one cached step, 4 tokens, head size 4", toy=True)

    @classmethod
    def of(cls, model, prompt="Mary had a little", layer=0, head=0, link=None):
        """The same step on a real head: prefill `prompt`, feed its greedy next token, read layer `layer`."""
        trace, cache, token = cached_step(model, prompt)
        c = model.config
        if not (0 <= layer < c.n_layer and 0 <= head < c.n_head):
            raise KVLibError(f"{model.name} has layers 0–{c.n_layer - 1} and heads 0–{c.n_head - 1}")
        kv = head // (c.n_head // c.n_kv_head)  # grouped heads: query head `head` reads this K/V head
        t, held = trace.layers[layer], cache.layers[layer]
        ids = model.check_ids(prompt).tolist() + [token]
        tokens = [model.decode([i]) for i in ids]
        return cls.from_tensors(tokens, t.q[head].cpu(), held.keys[kv].cpu(), held.values[kv].cpu(),
                                f"{model.name}, layer {layer}, head {head} (reading K/V head {kv}): "
                                f"the step that feeds {tokens[-1]!r}", link=link or link_for(tokens[:-1]))

    def summary(self):
        lines = [self.title]
        for name in PARTS:
            rows = self.parts[name]
            lines.append(f"{name} ({len(rows)} × {len(rows[0])}): " + " | ".join(
                " ".join(f"{x:.{self.digits}f}" for x in row[:8]) for row in rows[:4]))
        return "\n".join(lines)
