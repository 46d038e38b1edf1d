"""One attention head, step by step, recomputed by hand from the layer's weights.

The seeds' pseudocode, with the real matrices: E (the layer-normed input),
Q = E·WQ, K = E·WK, scores = Q·Kᵀ / √d, the causal mask (-inf above the
diagonal), softmax rows that sum to 1, V = E·WV, out = weights·V. `explain`
returns every intermediate (as minGPT's `encode_and_show_work` does), taking E from
a Trace of the real forward pass so the numbers are the model's own.
"""

import math
from dataclasses import dataclass

import torch

from .gpt2 import causal_mask
from .trace import Trace


@dataclass
class HeadSteps:
    tokens: list      # the tokens as text
    E: torch.Tensor   # [T, C]
    WQ: torch.Tensor  # [C, hs] (and bias terms folded in below)
    WK: torch.Tensor
    WV: torch.Tensor
    Q: torch.Tensor   # [T, hs]
    K: torch.Tensor
    V: torch.Tensor
    scores: torch.Tensor   # [T, T] before the mask
    masked: torch.Tensor   # [T, T] -inf above the diagonal
    weights: torch.Tensor  # [T, T] rows sum to 1
    out: torch.Tensor      # [T, hs]


def head_weights(model, layer, head):  # -> (WQ, bQ), (WK, bK), (WV, bV); W [C, hs], b [hs]
    """GPT-2 keeps Q, K and V of all heads in one matrix c_attn [C, 3C]: cut out one head."""
    p = model.params["h"][layer]
    C, hs = model.config.n_embd, model.config.head_dim
    w, b = p["attn.c_attn.weight"], p["attn.c_attn.bias"]
    cols = [slice(part * C + head * hs, part * C + (head + 1) * hs) for part in range(3)]
    return [(w[:, c], b[c]) for c in cols]


def explain(model, text, layer=0, head=0):
    ids = model.check_ids(text)
    trace = Trace()
    model.forward(ids, trace=trace)
    E = trace.layers[layer].x  # [T, C]
    (WQ, bQ), (WK, bK), (WV, bV) = head_weights(model, layer, head)
    Q, K, V = E @ WQ + bQ, E @ WK + bK, E @ WV + bV  # [T, hs]
    scores = Q @ K.T / math.sqrt(Q.shape[-1])  # [T, T]
    masked = scores + causal_mask(len(ids), len(ids), scores.device)
    weights = torch.softmax(masked, dim=-1)
    tokens = [model.decode([i]) for i in ids.tolist()]
    return HeadSteps(tokens, E, WQ, WK, WV, Q, K, V, scores, masked, weights, weights @ V)
