"""GPT-2's forward pass as pure functions over its checkpoint's weights.

Read top to bottom, this is the whole model: embed (token + position), then per
layer attention and feed-forward around two residual adds, then the final norm and
the logits. Written after jaymody/picoGPT `gpt2.py` and karpathy/nanoGPT `model.py`.

Shapes, declared once:
    T   new tokens in this call        P   tokens already in the cache
    S   P + T, every token attended to C   n_embd
    nh  heads                          hs  head size, C // nh
    V   vocabulary size
Weights keep their Hugging Face names inside a layer ("attn.c_attn.weight", ...).
GPT-2 stores its linear weights as [in, out] (Conv1D), so a projection is x @ w + b.
"""

import math

import torch
import torch.nn.functional as F


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


def causal_mask(t_new, t_total, device=None, window=None, sinks=0):  # -> [T, S]
    """0 where a token may look, -inf above the diagonal (the future).

    -inf, not 0: softmax takes exp, exp(0) = 1 would still give the future weight,
    exp(-inf) = 0 gives it none. The new tokens sit at positions S-T .. S-1. With a sliding
    `window`, a token also stops seeing tokens `window` or more behind it, except the first
    `sinks` (kept as attention sinks, as StreamingLLM does)."""
    i = torch.arange(t_total - t_new, t_total, device=device)[:, None]  # where the new tokens sit
    j = torch.arange(t_total, device=device)[None]
    seen = j <= i
    if window is not None:
        seen &= (i - j < window) | (j < sinks)
    return torch.zeros(t_new, t_total, device=device).masked_fill(~seen, float("-inf"))


def attention(q, ks, vs, mask):  # [nh, T, hs], K and V as pieces [nh, S_i, hs] (S in all), [T, S] -> out [nh, T, hs]
    """K and V arrive in pieces when a request shares a prompt cache's stored blocks (kv_cache.py):
    each piece's scores sit side by side in one softmax, and each piece's values are mixed by
    its own columns of the weights. Without a hit there is one piece, and this is the usual
    softmax(Q·Kᵀ/√d + mask)·V."""
    scores = [q @ k.transpose(-2, -1) for k in ks]  # [nh, T, S_i] each
    scores = (scores[0] if len(ks) == 1 else torch.cat(scores, -1)) / math.sqrt(q.shape[-1]) + mask.to(q.dtype)
    weights = torch.softmax(scores, dim=-1)  # [nh, T, S], each row sums to 1
    cols = weights.split([v.shape[1] for v in vs], dim=-1)
    out = sum((w @ v for w, v in zip(cols[1:], vs[1:])), cols[0] @ vs[0])  # [nh, T, hs]
    return out, scores, weights


def mha(x, p, n_head, layer_cache=None, record=None, window=None, sinks=0):  # [T, C] -> [T, C]
    q, k, v = linear(x, p["attn.c_attn.weight"], p["attn.c_attn.bias"]).chunk(3, dim=-1)  # 3 x [T, C]
    q, k, v = (split_heads(t, n_head) for t in (q, k, v))  # [nh, T, hs]
    ks, vs = ([k], [v]) if layer_cache is None else layer_cache.append(k, v)  # pieces of [nh, S, hs]
    mask = causal_mask(q.shape[1], sum(k.shape[1] for k in ks), x.device, window, sinks)
    out, scores, weights = attention(q, ks, vs, mask)  # [nh, T, hs]
    if record is not None:
        record(x=x, q=q, k=k, v=v, scores=scores, weights=weights, out=out)
    return linear(merge_heads(out), p["attn.c_proj.weight"], p["attn.c_proj.bias"])


def ffn(x, p):  # [T, C] -> [T, 4C] -> [T, C]
    h = gelu(linear(x, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"]))
    return linear(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"])


def block(x, p, n_head, eps, layer_cache=None, record=None, window=None, sinks=0):  # [T, C] -> [T, C]
    x = x + mha(layer_norm(x, p["ln_1.weight"], p["ln_1.bias"], eps), p, n_head, layer_cache, record, window, sinks)
    return x + ffn(layer_norm(x, p["ln_2.weight"], p["ln_2.bias"], eps), p)


def gpt2(ids, params, config, past_len=0, cache=None, trace=None, last_only=False, window=None, sinks=0):  # [T] -> [T, V]
    """Logits for the new tokens `ids`, which sit at positions past_len .. past_len+T-1.

    With a cache, only the new tokens go through the layers; each layer appends its
    K and V and attends over everything cached. With a trace, each layer records
    what attention saw."""
    pos = torch.arange(past_len, past_len + len(ids), device=ids.device)
    x = params["wte.weight"][ids] + params["wpe.weight"][pos]  # [T, C]
    for i, p in enumerate(params["h"]):
        x = block(x, p, config.n_head, config.eps,
                  layer_cache=None if cache is None else cache.layers[i],
                  record=None if trace is None else trace.recorder(i), window=window, sinks=sinks)
        if trace is not None:
            trace.block_output(i, x)
    if last_only:
        x = x[-1:]  # [1, C]
    x = layer_norm(x, params["ln_f.weight"], params["ln_f.bias"], config.eps)
    return x @ params["lm_head.weight"]  # [T, V]: the output head, GPT-2's token table transposed ([C, V])
