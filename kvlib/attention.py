"""One attention head, step by step, recomputed by hand from the layer's weights.

The seeds' pseudocode, with the real matrices: E (the layer-normed input),
Q = E·WQ + bQ, K = E·WK + bK, scores = Q·Kᵀ / √d, the causal mask (-inf above the
diagonal), softmax rows that sum to 1, V = E·WV + bV, out = weights·V. GPT-2 has the
biases b; a Llama-family model has none, and turns Q and K by their positions (RoPE)
before the scores, and its query head h reads K/V head h // (n_head // n_kv_head). `explain`
returns every intermediate (as minGPT's `encode_and_show_work` does), taking E from
a Trace of the real forward pass so the numbers are the model's own.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .kv_cache import causal_mask
from .llama import rope_angles, rotate
from .trace import Trace


@dataclass
class HeadSteps:
    tokens: list      # the tokens as text
    E: torch.Tensor   # [T, C]
    WQ: torch.Tensor  # [C, hs]
    WK: torch.Tensor
    WV: torch.Tensor
    bQ: torch.Tensor  # [hs] (zeros for a family without biases)
    bK: torch.Tensor
    bV: torch.Tensor
    Q: torch.Tensor   # [T, hs] (after RoPE in the Llama family)
    K: torch.Tensor
    V: torch.Tensor
    scores: torch.Tensor   # [T, T] before the mask
    masked: torch.Tensor   # [T, T] -inf above the diagonal
    weights: torch.Tensor  # [T, T] rows sum to 1
    out: torch.Tensor      # [T, hs]


class HeadWeights(NamedTuple):  # one head's columns of its layer's projections: W [C, hs], b [hs]
    WQ: torch.Tensor
    bQ: torch.Tensor
    WK: torch.Tensor
    bK: torch.Tensor
    WV: torch.Tensor
    bV: torch.Tensor


class Guess(NamedTuple):  # one candidate for the next token
    token: str
    p: float


class Attended(NamedTuple):  # where one query puts its largest weight
    position: int
    token: str
    weight: float


def head_weights(model, layer, head):  # -> HeadWeights
    """Cut one head's columns out of the layer's projections (where they sit is its family's knowledge)."""
    return HeadWeights(*model.family.head_weights(model.params["h"][layer], model.config, head))


def explain(model, text, layer=0, head=0):
    ids = model.check_ids(text)
    trace = Trace()
    model.forward(ids, trace=trace)
    E = trace.layers[layer].x  # [T, C]
    WQ, bQ, WK, bK, WV, bV = head_weights(model, layer, head)
    Q, K, V = E @ WQ + bQ, E @ WK + bK, E @ WV + bV  # [T, hs]
    if model.family.position_table is None:  # no position table: position enters by turning Q and K (RoPE)
        cos, sin = rope_angles(torch.arange(len(ids), device=ids.device), model.config.head_dim, model.config.rope_theta)
        Q, K = rotate(Q, cos, sin), rotate(K, cos, sin)
    scores = Q @ K.T / math.sqrt(Q.shape[-1])  # [T, T]
    pos = torch.arange(len(ids), device=scores.device)
    masked = scores + causal_mask(pos, pos)  # -inf above the diagonal
    weights = torch.softmax(masked, dim=-1)
    tokens = [model.decode([i]) for i in ids.tolist()]
    return HeadSteps(tokens, E, WQ, WK, WV, bQ, bK, bV, Q, K, V, scores, masked, weights, weights @ V)


def top_next(model, text, k=5, trace=None):  # -> [Guess(token text, probability)] for the token after `text`
    """What the model really predicts next, best first (fills `trace` when one is passed)."""
    probs = torch.softmax(model.forward(model.check_ids(text), trace=trace, last_only=True)[-1].float(), dim=-1)
    top = probs.topk(k)
    return [Guess(model.decode([i]), p) for i, p in zip(top.indices.tolist(), top.values.tolist())]


def most_attended(row, tokens):  # one query's weights [S], S token texts -> Attended
    j = int(row.argmax())
    return Attended(j, tokens[j], row[j].item())


def word_or_place(before, after):  # two (trace, tokens) runs -> {kind: [(layer, head)]}
    """Does each head's last token follow a word, or a place? Feed two texts that end alike, the second
    with words put in between, and compare where each head's last row puts its largest weight:
    "word": the same word, now at another distance back; "place": the same distance back, another word;
    "both": the same word at the same distance (these texts cannot tell); "first": the first token in
    both (an attention sink, below); "neither": anything else."""
    (trace_a, tokens_a), (trace_b, tokens_b) = before, after
    kinds = {kind: [] for kind in ("word", "place", "both", "first", "neither")}
    for layer, (a, b) in enumerate(zip(trace_a.layers, trace_b.layers)):
        for head in range(a.weights.shape[0]):
            ja, jb = int(a.weights[head, -1].argmax()), int(b.weights[head, -1].argmax())
            same_word = tokens_a[ja] == tokens_b[jb]
            same_place = len(tokens_a) - ja == len(tokens_b) - jb  # as many tokens back from the last
            kind = ("first" if ja == jb == 0 else "both" if same_word and same_place else
                    "word" if same_word else "place" if same_place else "neither")
            kinds[kind].append((layer, head))
    return kinds


def first_token_share(trace):  # -> [L, nh]: the mean weight each head gives the first token
    """Averaged over the queries after the first (the first token can only look at itself)."""
    return torch.stack([layer.weights[:, 1:, 0].mean(-1) for layer in trace.layers])


def even_first_share(n_tokens):  # what first_token_share would be if every query spread its weight evenly
    return sum(1 / (i + 1) for i in range(1, n_tokens)) / (n_tokens - 1)


def kv_groups(model, layer):  # -> [[query heads]] per K/V head, found by comparing the weights themselves
    """The query heads that read the very same key weights WK: one group per K/V head."""
    wk = [head_weights(model, layer, h).WK for h in range(model.config.n_head)]
    groups = {}  # the group's first head -> its heads
    for h, w in enumerate(wk):
        first = next((g for g in groups if torch.equal(wk[g], w)), h)
        groups.setdefault(first, []).append(h)
    return list(groups.values())
