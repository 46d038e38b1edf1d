"""The Llama family's forward pass (SmolLM2, Llama 2 and 3, Mistral...) as pure functions.

Read it beside `gpt2.py`: the skeleton is the same (embed, then per layer attention and
feed-forward around two residual adds, then a final norm and the logits), and four
things change, as rasbt/LLMs-from-scratch ch05/07_gpt_to_llama lists them:
- RMSNorm instead of LayerNorm: divide by the root mean square, no mean taken out, no bias;
- no position table: rotary position embeddings (RoPE) turn each query and key, pair of
  numbers by pair, by angles that grow with the token's position, so a query-key product
  depends on how far apart the two tokens are;
- a SwiGLU feed-forward: silu(x·Wgate) ⊙ (x·Wup), then ·Wdown (three matrices, no biases);
- grouped-query attention: fewer key/value heads (nkv) than query heads (nh); each K/V
  head serves nh // nkv query heads, so the cache holds nkv heads, not nh.

Shapes, as in gpt2.py: T new tokens, P cached, S = P + T, C width, V vocabulary;
nh query heads, nkv key/value heads, hd head size, I feed-forward width.
Weights keep their Hugging Face names inside a layer ("self_attn.q_proj.weight", ...),
but are stored [in, out], transposed at load from nn.Linear's [out, in] (GPT-2's Conv1D
layout), so a projection is x @ w: a decode step's one-row products then read each
matrix in the order it lies in memory, measured ~15 % faster on a CPU.
"""

import torch
import torch.nn.functional as F

from .gpt2 import attention, fused_attention, merge_heads, split_heads
from .kv_cache import KVCache, only_causal


def linear(x, w):  # [T, in] @ [in, out] -> [T, out]; no biases in this family
    return x @ w


def rms_norm(x, w, eps):  # [T, C] -> [T, C]
    return F.rms_norm(x, (x.shape[-1],), w, eps)  # w * x / sqrt(mean(x²) + eps)


def rope_angles(positions, head_dim, theta):  # [T] -> cos, sin [T, hd]
    """The angle of each pair of numbers at each position: position × theta^(-2i/hd).

    Early pairs turn fast (they tell neighbours apart), late pairs slowly (long distances).
    Pairs are (i, i + hd/2), Hugging Face's layout, which its checkpoints are stored in."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)  # [hd/2]
    angles = positions.float()[:, None] * inv_freq[None]  # [T, hd/2]
    angles = torch.cat([angles, angles], dim=-1)  # [T, hd]
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):  # [nh, T, hd] -> [nh, T, hd]
    """Turn each pair (a, b) by its angle: (a cos - b sin, b cos + a sin)."""
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


def grouped_attention(q, k, v, mask):  # [nh, T, hd], [nkv, S, hd] x 2, [T, S] -> [nh, T, hd], [nh, T, S] x 2
    """Each K/V head serves a group of nh // nkv consecutive query heads (which one: Config.kv_head).

    The group's queries are stacked as extra rows, so every K/V head is read once, never copied."""
    nh, T, hd = q.shape
    group = nh // k.shape[0]
    out, scores, weights = attention(q.reshape(-1, group * T, hd), k, v, mask.repeat(group, 1))  # [nkv, g*T, ...]
    return out.view(nh, T, hd), scores.view(nh, T, -1), weights.view(nh, T, -1)


def head_columns(p, config, head):  # one query head's (W [C, hd], b [hd]) for Q, and its group's K and V
    """Query head h reads K/V head config.kv_head(h); the projections have no bias (zeros stand in)."""
    hd, kv = config.head_dim, config.kv_head(head)
    cut = lambda name, h: p[f"self_attn.{name}.weight"][:, h * hd:(h + 1) * hd]  # noqa: E731 -- [C, heads * hd]
    no_bias = torch.zeros(hd, device=p["self_attn.q_proj.weight"].device)
    return [cut("q_proj", head), no_bias, cut("k_proj", kv), no_bias, cut("v_proj", kv), no_bias]


def map_kv(p, f):  # one layer's params -> a copy with f applied to K's and V's projections, [C, nkv * hd] each
    """As gpt2.map_kv; here K and V have matrices of their own and no biases."""
    return {**p, **{name: f(p[name]) for name in ("self_attn.k_proj.weight", "self_attn.v_proj.weight")}}


def gqa(x, p, config, cos, sin, layer_cache, mask, record=None):  # [T, C] -> [T, C]
    q = split_heads(linear(x, p["self_attn.q_proj.weight"]), config.n_head)  # [nh, T, hd]
    k = split_heads(linear(x, p["self_attn.k_proj.weight"]), config.n_kv_head)  # [nkv, T, hd]
    v = split_heads(linear(x, p["self_attn.v_proj.weight"]), config.n_kv_head)  # [nkv, T, hd]
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # position enters here, and only here
    K, V = layer_cache.append(k, v)  # [nkv, S, hd]: keys after RoPE, so a cached key never turns again
    if record is None:  # as in gpt2.mha; the fused kernel serves each K/V head's group of queries itself
        out = fused_attention(q, K, V, mask, gqa=True)
    else:
        out, scores, weights = grouped_attention(q, K, V, mask)  # [nh, T, hd]
        record(x=x, q=q, k=k, v=v, scores=scores, weights=weights, out=out)
    return linear(merge_heads(out), p["self_attn.o_proj.weight"])


def swiglu(x, p):  # [T, C] -> [T, I] -> [T, C]
    gate = F.silu(linear(x, p["mlp.gate_proj.weight"]))
    return linear(gate * linear(x, p["mlp.up_proj.weight"]), p["mlp.down_proj.weight"])


def block(x, p, config, cos, sin, layer_cache, mask, record=None):  # [T, C] -> [T, C]
    x = x + gqa(rms_norm(x, p["input_layernorm.weight"], config.eps), p, config, cos, sin, layer_cache, mask, record)
    return x + swiglu(rms_norm(x, p["post_attention_layernorm.weight"], config.eps), p)


def llama(ids, params, config, cache=None, trace=None, last_only=False):  # [T] -> [T, V]
    """Logits for the new tokens `ids`, which follow the tokens the cache holds (as gpt2.gpt2)."""
    cache = KVCache(config.n_layer) if cache is None else cache
    pos, mask = cache.admit(len(ids), ids.device)  # [T], [T, S]
    x = params["embed_tokens.weight"][ids]  # [T, C]: no position added
    # [T, hd], shared by every layer: computed in fp32, applied in the model's dtype
    cos, sin = (t.to(x.dtype) for t in rope_angles(pos, config.head_dim, config.rope_theta))
    mask = None if trace is None and only_causal(mask) else mask.to(x.dtype)  # None: plain causal, as in gpt2.gpt2
    for i, p in enumerate(params["h"]):
        x = block(x, p, config, cos, sin, cache.layers[i], mask, None if trace is None else trace.recorder(i))
        if trace is not None:
            trace.block_output(i, x)
    if last_only:
        x = x[-1:]  # [1, C]
    x = rms_norm(x, params["norm.weight"], config.eps)
    return x @ params["lm_head.weight"]  # [T, V]: lm_head is [C, V] (SmolLM2's is embed_tokens, tied)
