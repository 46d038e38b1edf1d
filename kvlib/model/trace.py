"""Trace: what attention saw in one forward pass, per layer and head.

Pass a Trace to `Model.forward` and each layer records its tensors (as
`encode_and_show_work` in karpathy/minGPT's bpe.py returns every intermediate):
    x        [T, C]          the layer-normed input that attention projects (E)
    q        [nh, T, hs]     the new tokens' queries
    k, v     [nkv, T, hs]    their keys and values (nkv = nh in GPT-2; fewer with grouped
                             KV heads); in the Llama family q and k are taken after RoPE
    scores   [nh, T, S]      q . k / sqrt(hs), -inf where the mask hides a key
    weights  [nh, T, S]      softmax of scores; each row sums to 1
    out      [nh, T, hs]     weights . v, before the output projection
    resid    [T, C]          the block's output: the residual stream after attention and
                             feed-forward, what the next layer reads
S counts the cached tokens too. A Trace holds one pass: pass a new one per step.
"""

from dataclasses import dataclass

import torch


@dataclass
class LayerTrace:
    x: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scores: torch.Tensor
    weights: torch.Tensor
    out: torch.Tensor
    resid: torch.Tensor = None


class Trace:
    def __init__(self):
        self.layers = []

    def recorder(self, layer):
        """A callback for layer `layer` that stores detached copies of its tensors."""
        def record(**tensors):
            del self.layers[layer:]  # a reused trace starts over at layer 0
            self.layers.append(LayerTrace(**{k: t.detach().clone() for k, t in tensors.items()}))
        return record

    def block_output(self, layer, x):  # [T, C], recorded after the block's two residual adds
        self.layers[layer].resid = x.detach().clone()
