"""Shrinking the KV cache, measured: bytes saved against quality lost on held-out text.

Each measurement runs a live model twice over the same token ids: once as it is (the
baseline) and once with its cache compressed, and returns a `Result`:
    bytes_per_token    what the compressed cache holds at the end of the text, divided by
                       the text's tokens, computed from the compressed layout
    loss               mean next-token loss (nats) on the text, compressed
    kl                 mean KL divergence (nats) of the compressed model's next-token
                       distribution from the uncompressed one's, position by position:
                       0 when nothing changed, and it sees changes the loss can hide
The text is `heldout_ids`: *Measure for Measure*, a play the bundled `tiny` model never
saw in training (kvlib/assets/README.md).

Three ways real models shrink the cache, measured here:
- grouped K/V heads (GQA, MQA), here made from a trained model's heads by averaging (heads
  trained grouped from the start, as SmolLM2's, have no ungrouped twin to measure against);
- a quantized cache (int2 to int8), keys per token or per channel, as KIVI does, and
  `key_channel_spread`, which shows why the choice matters on one model and not another;
- a sliding window (the oldest tokens dropped), with or without attention sinks.
Shapes, as in gpt2.py: T tokens, V vocabulary, nh query heads, nkv K/V heads, hs head size.
"""

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from ..errors import KVLibError, check_count, is_count
from ..i18n import t
from ..model.models import ASSETS
from . import memory

HELDOUT = ASSETS / "heldout_measure_for_measure.txt"
GROUP = 32           # numbers sharing one scale and zero-point in a quantized cache (KIVI's group size)
SCALE_BYTES = 2 + 2  # each group stores its scale and zero-point in fp16


def nats(x):  # -> text: 4 decimals, or 2 digits in scientific notation under 0.001, where 4 decimals read 0.0000
    return f"{x:.4f}" if x == 0 or abs(x) >= 1e-3 else f"{x:.1e}"


@dataclass
class Result:
    name: str
    bytes_per_token: float
    baseline_bytes_per_token: float
    loss: float           # nats per token, compressed
    baseline_loss: float  # nats per token, uncompressed
    kl: float             # nats, mean over positions
    per_position: list = field(default=None, repr=False)  # loss of each next token, for a plot
    baseline_per_position: list = field(default=None, repr=False)
    baseline_dtype: str = ""  # the numbers the baseline caches ("fp32", "bf16"): what the saving is set against

    @property
    def saving(self):  # fraction of the cache's bytes saved
        return 1 - self.bytes_per_token / self.baseline_bytes_per_token

    @property
    def loss_increase(self):  # nats per token lost
        return self.loss - self.baseline_loss

    @property
    def loss_noise(self):  # nats: twice the standard error of loss_increase, a mean over the text's positions
        """How far loss_increase may stray from 0 by the luck of one text: a change within it, up or down, is one
        this text cannot tell from none (per-position differences are not independent, so read it as a guide)."""
        return _noise(self.per_position, self.baseline_per_position)

    def __str__(self):
        baseline = f"{self.baseline_bytes_per_token:,.0f}"
        return t("compression.result", name=self.name, bytes=f"{self.bytes_per_token:,.0f}",
                 baseline=t("compression.in_dtype", baseline=baseline, dtype=self.baseline_dtype) if self.baseline_dtype
                 else baseline, saving=f"{self.saving:.0%}", loss=f"{self.loss:.3f}",
                 baseline_loss=f"{self.baseline_loss:.3f}", kl=nats(self.kl))


def _noise(losses, others):  # [T-1], [T-1] per-position losses -> nats: twice the standard error of their mean gap
    diff = torch.tensor(losses) - torch.tensor(others)
    return 2 * diff.std().item() / len(diff) ** 0.5


def loss_gap(a, b):  # two Results on the same text -> (nats, noise): a's loss minus b's, and Result.loss_noise's guide to it
    if len(a.per_position) != len(b.per_position):
        raise KVLibError(f"compare two measurements of the same text: {len(a.per_position)} and {len(b.per_position)} positions")
    return a.loss - b.loss, _noise(a.per_position, b.per_position)


def heldout_ids(model, n_tokens):  # -> list[int], the first n_tokens of the play's first act
    """The held-out text as the model's token ids, from "ACT I." on (tiny never trained on this play)."""
    text = HELDOUT.read_text(encoding="utf-8")
    text = text[text.index("ACT I."):]  # past the title page and the list of characters
    # verbose=False: the text is longer than tiny's context, which the tokenizer would warn about
    ids = model.tokenizer.encode(text, verbose=False)
    if not isinstance(n_tokens, int) or not 2 <= n_tokens <= len(ids):
        raise KVLibError(f"ask for 2 to {len(ids):,} tokens of the held-out text, not {n_tokens!r}")
    return ids[:n_tokens]


SHORT_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _baseline_bytes(model):  # per token, as the model caches it, in its own dtype
    return memory.model_kv_bytes_per_token(model.config, model.dtype.itemsize)


def _log_probs(logits):  # [T, V] -> [T-1, V]: at position t, the distribution of the token at t + 1
    return F.log_softmax(logits[:-1].float(), dim=-1)


def _losses(log_probs, ids):  # [T-1, V], [T] -> [T-1]: the loss of each next token, in nats
    return -log_probs.gather(1, ids[1:, None])[:, 0]


_last_baseline = {}  # {(model, ids): logits} of the last text measured: a run of measurements shares it


def _baseline_logits(model, ids):  # [T] -> [T, V], the uncompressed model's
    key = (model, tuple(ids.tolist()))
    if key not in _last_baseline:
        _last_baseline.clear()
        _last_baseline[key] = model.forward(ids)
    return _last_baseline[key]


def _measure(name, model, ids, logits, bytes_per_token):  # [T], [T, V] -> Result
    log_probs, base = _log_probs(logits), _log_probs(_baseline_logits(model, ids))
    kl = F.kl_div(log_probs, base, log_target=True, reduction="batchmean").item()  # mean of sum p_base log(p_base/p)
    losses, base_losses = _losses(log_probs, ids), _losses(base, ids)
    return Result(name, bytes_per_token, _baseline_bytes(model), losses.mean().item(), base_losses.mean().item(),
                  max(kl, 0.0), losses.tolist(), base_losses.tolist(), SHORT_DTYPES[model.dtype])


# --- grouped K/V heads -------------------------------------------------------------------------

def grouped_params(model, n_kv_head):
    """A copy of the weights of a model with one K/V head per query head (GPT-2's) where each group
    of nh // n_kv_head heads shares one K and one V: the mean of the group's K (and V) projection
    weights and biases (the conversion Ainslie et al., "GQA", 2023, start from). The heads that
    share are those Config.kv_head gives one K/V head (of a config with n_kv_head of them).

    The shared head is repeated into each of the group's slots, so kvlib's own forward pass runs
    unchanged and every query head reads its group's one K/V head; a real GQA cache stores it once."""
    c = model.config
    if c.n_kv_head != c.n_head:  # already grouped: no head of its own per query head to average
        raise KVLibError(f"grouped_kv averages the K/V heads of a model with one per query head, as a GPT-2-family "
                         f"model has; {model.name} is a {c.arch} model with {c.n_kv_head} K/V heads for {c.n_head}")
    if not is_count(n_kv_head) or n_kv_head < 1 or c.n_head % n_kv_head:
        raise KVLibError(f"n_kv_head must divide {model.name}'s {c.n_head} heads (e.g. {c.n_head // 2}), "
                         f"not {n_kv_head!r}")
    heads = replace(c, n_kv_head=n_kv_head).kv_head(torch.arange(c.n_head))  # [nh]: the K/V head each will read

    def share(t):  # [..., nh * hs] -> [..., nh * hs], each head replaced by the mean of the heads sharing its K/V head
        columns = t.unflatten(-1, (c.n_head, c.head_dim))  # [..., nh, hs]
        means = torch.stack([columns[..., heads == j, :].mean(-2) for j in range(n_kv_head)], -2)  # [..., nkv, hs]
        return means[..., heads, :].flatten(-2)

    return {**model.params, "h": [model.family.map_kv(p, share) for p in model.params["h"]]}


def grouped_kv(model, ids, n_kv_head):
    """GQA (or MQA, n_kv_head=1) made from a trained model's K/V heads (one per query head) by averaging them.

    The loss jumps: heads trained apart do not agree on one key and value, which is why real
    models are trained with grouped heads (or, per the GQA paper, uptrained after the averaging)."""
    ids_t = model.check_ids(ids)
    params = grouped_params(model, n_kv_head)
    logits = model.family.forward(ids_t, params, model.config)
    c = model.config
    kind = "MQA" if n_kv_head == 1 else "GQA"
    bytes_per_token = memory.kv_bytes_per_token(c.n_layer, n_kv_head, c.head_dim, model.dtype.itemsize)
    heads = t("compression.kv_head") if n_kv_head == 1 else t("compression.kv_heads", n=n_kv_head)
    return _measure(t("compression.grouped", kind=kind, heads=heads, n=c.n_head), model, ids_t, logits, bytes_per_token)


# --- a quantized cache -------------------------------------------------------------------------

def quantize(x, bits, along):  # [nkv, N, hs] -> same shape, rounded to 2**bits levels per group
    """Asymmetric min-max quantization in groups of GROUP numbers, returned dequantized.

    along="token": a group is GROUP numbers of one token's vector (N any, hs a multiple of GROUP);
    along="channel": a group is one channel over GROUP consecutive tokens (N a multiple of GROUP).
    Each group stores q = round((x - min) / scale) in `bits` bits, scale and min in fp16."""
    nkv, n, hs = x.shape
    groups = x.unflatten(2, (hs // GROUP, GROUP)) if along == "token" else x.unflatten(1, (n // GROUP, GROUP))
    dim = -1 if along == "token" else 2  # the axis a group runs along
    lo = groups.amin(dim, keepdim=True).half().float()
    scale = ((groups.amax(dim, keepdim=True) - lo) / (2 ** bits - 1)).half().float().clamp_min(1e-8)
    q = ((groups - lo) / scale).round().clamp(0, 2 ** bits - 1)
    return (q * scale + lo).flatten(2, 3) if along == "token" else (q * scale + lo).flatten(1, 2)


def quantized_kv(model, ids, bits, keys="channel", values="token", recent=0):
    """Decode the text over a cache whose keys and values are stored in `bits` bits (None: not at all).

    The text goes through in chunks of GROUP tokens; after each chunk, every complete group of
    GROUP tokens older than the `recent` newest is quantized in the cache, so later tokens read
    it rounded, as they would from a quantized cache. Within a chunk tokens read each other in
    full precision (a residual of up to GROUP tokens, as KIVI keeps). keys/values: "channel" or
    "token" (KIVI, Liu et al., 2024: keys have outlier channels, so quantize them per channel,
    and values per token). Scale and zero-point cost 4 bytes per group of GROUP numbers."""
    if bits is not None and bits not in range(2, 9):
        raise KVLibError(f"bits must be 2 to 8 (or None: a full-precision cache), not {bits!r}")
    if keys not in ("channel", "token") or values not in ("channel", "token"):
        raise KVLibError(f"keys and values are quantized per 'channel' or per 'token', not {keys!r}, {values!r}")
    if model.config.head_dim % GROUP:
        raise KVLibError(f"head size {model.config.head_dim} is not a multiple of the group size {GROUP}")
    check_count(recent, "recent (newest tokens kept in full precision)", least=0)
    ids_t = model.check_ids(ids)
    cache, logits, done = model.new_cache(), [], 0  # done: tokens already quantized in the cache
    for start in range(0, len(ids_t), GROUP):
        logits.append(model.forward(ids_t[start:start + GROUP], cache=cache))  # [<=GROUP, V]
        ready = max(len(cache) - recent, 0) // GROUP * GROUP if bits is not None else 0
        if ready > done:

            def round_old(i, K, V):  # K, V [nkv, N, hs]: the groups done..ready stored in `bits` bits
                K[:, done:ready] = quantize(K[:, done:ready], bits, keys)
                V[:, done:ready] = quantize(V[:, done:ready], bits, values)

            cache = cache.edited(round_old)  # the next chunk reads the rounded copy
            done = ready
    total = len(ids_t)
    full = model.dtype.itemsize
    numbers = _baseline_bytes(model) // full  # per token
    quantized_bytes = bits / 8 + SCALE_BYTES / GROUP if bits is not None else full  # per number
    bytes_per_token = numbers * (done * quantized_bytes + (total - done) * full) / total
    name = (t("compression.quantized", bits=bits, keys=t(f"compression.{keys}"), values=t(f"compression.{values}"),
              recent=recent) if bits is not None else t("compression.full"))
    return _measure(name, model, ids_t, torch.cat(logits), bytes_per_token)


def key_channel_spread(model, ids):  # -> list[float], one per layer
    """How far the cached keys' largest channel stands out: per layer, the largest |key| any
    channel reaches over the text, divided by the median channel's largest |key|, averaged
    over K/V heads. About 1-2 when channels are alike; KIVI (Liu et al., 2024) found a few
    channels far larger in real models' keys, which is why it quantizes keys per channel:
    a group along a channel shares that channel's range instead of an outlier's."""
    cache = model.new_cache()
    model.forward(model.check_ids(ids), cache=cache)
    spread = []
    for layer in cache.layers:
        peak = layer.keys.abs().amax(1).float()  # [nkv, N, hs] -> [nkv, hs]: each channel's largest |key|
        spread.append((peak.amax(-1) / peak.median(-1).values).mean().item())
    return spread


# --- a sliding window --------------------------------------------------------------------------

def sliding_window(model, ids, window, sinks=0):
    """Attention limited to the `window` newest tokens (itself included), plus the first `sinks`.

    As StreamingLLM (Xiao et al., 2023, "Efficient Streaming Language Models with Attention
    Sinks"), the cache keeps sinks + window tokens (kv_cache.KVCache's window): the text goes
    through in one pass, where the cache masks what it would have evicted (weight exactly 0),
    which a test holds equal to feeding it token by token. Keys keep their positions in
    the text; StreamingLLM renumbers positions within its cache so that a stream can outrun
    the model's trained length, which this text (shorter than it) does not need. With RoPE
    (SmolLM2: its own window is 8,192) scores depend only on distance, so the window's
    tokens are seen exactly as in the full text. With GPT-2's absolute positions the text
    cannot go past the model's context at all, so a window inside it only mimics eviction:
    use a RoPE model for this. per_position holds the loss at each position."""
    ids_t = model.check_ids(ids)
    cache = model.new_cache(window, sinks)  # refuses a window under 1 token or negative sinks
    if len(ids_t) <= window + sinks:
        raise KVLibError(f"the text ({len(ids_t)} tokens) must be longer than window + sinks ({window + sinks}), "
                         f"or nothing is dropped")
    logits = model.forward(ids_t, cache=cache)
    held = window + sinks  # tokens the cache holds once the text has moved past the window
    return _measure(t("compression.window", window=window, sinks=sinks), model, ids_t, logits,
                    _baseline_bytes(model) * held / len(ids_t))
