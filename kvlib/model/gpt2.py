"""GPT-2's forward pass as pure functions over its checkpoint's weights.

Read top to bottom, this is the whole model: embed (token + position), then per
layer attention and feed-forward around two residual adds, then the final norm and
the logits. Written after jaymody/picoGPT `gpt2.py` and karpathy/nanoGPT `model.py`.

Shapes, declared once:
    T   new tokens in this call        P   tokens the cache held before
    S   P + T, every token attended to C   n_embd
    nh  heads                          hs  head size, C // nh
    V   vocabulary size
Weights keep their Hugging Face names inside a layer ("attn.c_attn.weight", ...).
GPT-2 stores its linear weights as [in, out] (Conv1D), so a projection is x @ w + b.

Attention is written out in `attention`, the path a trace records; when no trace watches,
torch's fused `scaled_dot_product_attention` computes the same sum (tests hold both to
transformers). The cache (kv_cache.py) hands each layer the K and V to attend over and
the mask, whatever it keeps (a prompt cache's shared blocks, a sliding window).
`llama.py` is a diff of this file, as rasbt's GPT → Llama chapter is: GPT-2 has as
many K/V heads as query heads, and grouping them is one of the things Llama changes.
"""

import math

import torch
import torch.nn.functional as F

from .kv_cache import KVCache, only_causal


def linear(x, w, b):  # [T, in] -> [T, out]
    return torch.addmm(b, x, w)  # x @ w + b in one call


def layer_norm(x, w, b, eps):  # [T, C] -> [T, C]
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def gelu(x):  # GPT-2's tanh approximation ("gelu_new")
    return F.gelu(x, approximate="tanh")


def split_heads(x, n_head):  # [T, C] -> [nh, T, hs]
    return x.view(x.shape[0], n_head, -1).transpose(0, 1)


def merge_heads(x):  # [nh, T, hs] -> [T, C]
    return x.transpose(0, 1).reshape(x.shape[1], -1)


def attention(q, k, v, mask):  # [nh, T, hs], [nh, S, hs] x 2, [T, S] -> out [nh, T, hs], scores and weights [nh, T, S]
    """softmax(Q·Kᵀ/√d + mask)·V, written out: the path a trace records and a reader reads."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask
    weights = torch.softmax(scores, dim=-1)  # [nh, T, S], each row sums to 1
    return weights @ v, scores, weights


def fused_attention(q, k, v, mask, gqa=False):  # as attention, out only
    """torch's fused kernel. mask None: plain causal (see gpt2 below), which the kernel applies itself, skipping
    the scores above the diagonal. [None]: a batch of one, the 4-D shape its CPU kernel takes.
    A paged cache serving several sequences hands K and V per group of sequences instead: attend_groups."""
    if isinstance(k, list):
        return attend_groups(q, k, v, mask, gqa)
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, is_causal=mask is None,
                                          enable_gqa=gqa)[0]


def attend_groups(q, ks, vs, groups, gqa=False):  # [nh, T, hs], per group [b, nkv, L, hs] x 2 -> [nh, T, hs]
    """Each row attends to its own sequence's tokens only (paged_cache.Groups): the b sequences of a group
    have as many rows and tokens each, so they are one batch of b for the kernel, and no row scores a slot
    of another sequence."""
    out = torch.empty_like(q)
    for g, k, v in zip(groups, ks, vs):
        qg = q[:, g.rows].unflatten(1, (-1, g.n)).transpose(0, 1)  # [b, nh, n, hs]
        o = F.scaled_dot_product_attention(qg, k, v, attn_mask=g.mask, is_causal=g.causal, enable_gqa=gqa)
        out[:, g.rows] = o.transpose(0, 1).flatten(1, 2)  # [nh, b * n, hs]
    return out


def head_columns(p, config, head):  # one head's (W [C, hs], b [hs]) for Q, K and V
    """c_attn [C, 3C] holds Q, K and V of all heads side by side; head h is columns h*hs.. of each third."""
    w, b, C, hs = p["attn.c_attn.weight"], p["attn.c_attn.bias"], config.n_embd, config.head_dim
    cols = [slice(part * C + head * hs, part * C + (head + 1) * hs) for part in range(3)]
    return [t for c in cols for t in (w[:, c], b[c])]


def map_kv(p, f):  # one layer's params -> a copy with f applied to K's and V's projections, [..., C] each
    """c_attn [C, 3C] and its bias [3C] hold Q | K | V: f gets the K and V thirds, Q's is kept as it is."""
    p = dict(p)  # the caller's layer keeps its own tensors
    for part in ("weight", "bias"):
        q, k, v = p[f"attn.c_attn.{part}"].chunk(3, dim=-1)  # weights [C, C] x 3, biases [C] x 3
        p[f"attn.c_attn.{part}"] = torch.cat([q, f(k), f(v)], dim=-1)
    return p


def mha(x, p, n_head, layer_cache, mask, record=None):  # [T, C] -> [T, C]
    q, k, v = linear(x, p["attn.c_attn.weight"], p["attn.c_attn.bias"]).chunk(3, dim=-1)  # 3 x [T, C]
    q, k, v = (split_heads(t, n_head) for t in (q, k, v))  # [nh, T, hs]
    K, V = layer_cache.append(k, v)  # [nh, S, hs]: every token this layer holds, the new ones last
    if record is None:  # nobody looks at the weights: torch's fused kernel computes the same out without
        out = fused_attention(q, K, V, mask)  # holding all [T, S] scores (3-5x faster on a long prompt)
    else:
        out, scores, weights = attention(q, K, V, mask)  # [nh, T, hs]
        record(x=x, q=q, k=k, v=v, scores=scores, weights=weights, out=out)
    return linear(merge_heads(out), p["attn.c_proj.weight"], p["attn.c_proj.bias"])


def ffn(x, p):  # [T, C] -> [T, 4C] -> [T, C]
    h = gelu(linear(x, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"]))
    return linear(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"])


def block(x, p, n_head, eps, layer_cache, mask, record=None):  # [T, C] -> [T, C]
    x = x + mha(layer_norm(x, p["ln_1.weight"], p["ln_1.bias"], eps), p, n_head, layer_cache, mask, record)
    return x + ffn(layer_norm(x, p["ln_2.weight"], p["ln_2.bias"], eps), p)


def gpt2(ids, params, config, cache=None, trace=None, last_only=False):  # [T] -> [T, V]
    """Logits for the new tokens `ids`, which follow the tokens the cache holds.

    Only the new tokens go through the layers; each layer appends its K and V to the cache
    and attends over everything held. Without a cache, a throwaway one: the new tokens
    attend to one another. With a trace, each layer records what attention saw."""
    cache = KVCache(config.n_layer) if cache is None else cache
    pos, mask = cache.admit(len(ids), ids.device)  # [T] where the new tokens sit, [T, S] what each may see
    x = params["wte.weight"][ids] + params["wpe.weight"][pos]  # [T, C]
    # a prompt fed whole with nothing before it: the fused kernel knows the plain causal mask without being
    # handed it, and then skips half the work (a trace keeps it: the written-out attention adds it)
    mask = None if trace is None and only_causal(mask) else mask.to(x.dtype)
    for i, p in enumerate(params["h"]):
        x = block(x, p, config.n_head, config.eps, cache.layers[i], mask, None if trace is None else trace.recorder(i))
        if trace is not None:
            trace.block_output(i, x)
    if last_only:
        x = x[-1:]  # [1, C]
    x = layer_norm(x, params["ln_f.weight"], params["ln_f.bias"], config.eps)
    return x @ params["lm_head.weight"]  # [T, V]: the output head, GPT-2's token table transposed ([C, V])
