"""Long context: what a decode step still costs when the cache holds many tokens.

With a cache, a step feeds one token, but that token's query is scored against every
cached key and mixes every cached value, in every layer: the work (and the bytes read)
of attention grows linearly with the context, while the weight matmuls stay fixed.
"""

import bisect

import torch

from ..errors import KVLibError
from ..i18n import t
from ..model.gpt2 import fused_attention
from ..model.measure import check_repeats, one_thread, random_ids, timed
from ..texttable import text_table
from . import memory

ATTENTION = "attention (scores and mixing)"

# shapes to count multiply-adds with, without loading weights: the catalogue's (sourced there; the tests
# check them against the live models)
SHAPES = {name: memory.as_config(memory.CATALOGUE[name]) for name in ("GPT-2 small", "SmolLM2-135M")}


def step_seconds_by_context(model, lengths, repeats=5, seed=0):
    """Seconds of one cached decode step (one token fed) after each number of cached tokens in `lengths`.

    One cache per length is filled first; then, round after round (an untimed one first), each is
    fed one token, timed, and the appended token dropped again, so every repeat sees the same cache, and a busy moment
    of the machine slows all lengths of a round alike. The fastest repeat of each length is kept,
    on one thread (see measure.one_thread)."""
    lengths = sorted(int(n) for n in lengths)
    if not lengths or lengths[0] < 1 or not model.fits(lengths[-1] + 1):
        raise KVLibError(f"lengths must lie between 1 and {model.config.n_ctx - 1} ({model.name}'s context "
                         f"{model.config.n_ctx} minus the token fed); got {lengths}")
    check_repeats(repeats)
    ids = random_ids(model, lengths[-1] + 1, seed)
    best = [float("inf")] * len(lengths)
    with torch.inference_mode(), one_thread():
        caches, cache = [], model.new_cache()
        for n in lengths:
            model.forward(ids[len(cache):n], cache=cache, last_only=True)  # fill up to n cached tokens
            caches.append(cache.copy())
        for round in range(repeats + 1):  # round 0 warms up: the first append grows each copy's storage
            for k, (n, cache) in enumerate(zip(lengths, caches)):
                _, seconds = timed(lambda: model.forward([ids[n]], cache=cache, last_only=True), model.device)
                if round:
                    best[k] = min(best[k], seconds)
                cache.crop(n)  # forget the timed token: the next round sees n cached tokens again
    return lengths, best


def attention_share(config, lengths):
    """For a cached decode step after each context length: the fraction of its multiply-adds spent in
    attention (scores and mixing), the rest going to the weight matmuls and the logits."""
    shares = []
    for n in lengths:
        parts = memory.forward_macs_by_part(config, n, 1)
        shares.append(parts[ATTENTION] / sum(parts.values()))
    return shares


def attention_overtakes(config, limit=10_000_000):
    """The smallest context (cached tokens) at which a decode step's attention multiply-adds exceed all
    the others together (weights and logits); None if not within `limit`. Found by bisection, as the share
    only grows with context."""
    share = lambda n: attention_share(config, [n])[0]
    return bisect.bisect_right(range(limit + 1), 0.5, key=share) if share(limit) > 0.5 else None


def _size(nbytes):
    return f"{nbytes / 1e9:,.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:,.1f} MB"


PAST = "*"  # beside a figure for a context longer than the model was trained to read


def mark(arch, context):  # -> PAST beside a figure for a context past the model's trained one, else ""
    return PAST if memory.past_context(arch, context) else ""


def _past_note(marked):
    return "\n" + t("longcontext.past", mark=PAST) if marked else ""


def kv_table(names, contexts=(1024, 8192, 131072), bytes_per_number=2):
    """A text table: each catalogued model's KV cache for one sequence at each context, beside its weights;
    a figure for a context past the model's own is marked (PAST) and explained under the table."""
    archs = [memory.architecture(name) for name in names]
    rows = [[arch.name] + [_size(memory.kv_bytes(arch, n, 1, bytes_per_number)) + mark(arch, n) for n in contexts]
            + [_size(memory.all_weight_bytes(arch, bytes_per_number))] for arch in archs]
    marked = any(memory.past_context(arch, n) for arch in archs for n in contexts)
    heads = [t("longcontext.model")] + [t("longcontext.tokens", n=f"{n:,}") for n in contexts] + [t("longcontext.weights")]
    return text_table(heads, rows) + _past_note(marked)


def mistakes_table(name, context, bytes_per_number=2):
    """A text table of the classic wrong estimates of one catalogued model's cache, against the right one
    (marked, as kv_table does, if the context is past the model's own)."""
    arch = memory.architecture(name)
    wrong = memory.mistakes(arch, context, bytes_per_number)
    if not wrong:
        return t("longcontext.none", name=name)
    right = next(iter(wrong.values()))[1]
    rows = [[t(f"longcontext.{mistake}"), _size(w), f"{w / r:.2f}x"] for mistake, (w, r) in wrong.items()]
    heads = [t(f"longcontext.{h}") for h in ("mistake", "estimate", "of_right")]
    return (t("longcontext.right", name=name, context=f"{context:,}", size=_size(right)) + f"{mark(arch, context)}\n"
            + text_table(heads, rows) + _past_note(memory.past_context(arch, context)))


def cache_read_seconds(model, lengths, repeats=5, seed=0):
    """Seconds that one decode step's attention takes, in all layers, over a cache of each length in
    `lengths`: one query per head scored against n cached keys and mixing n values, read per K/V head
    as the model caches them, through the fused kernel the forward pass runs (gpt2.fused_attention,
    grouped; with as many K/V heads as query heads, GPT-2's).

    The cache is random numbers in the model's shape (heads × head size), so the lengths may go past
    the model's context: this is the part of a step that grows with the cache, timed alone. As in
    step_seconds_by_context, the lengths take turns (after an untimed round) and the fastest is kept."""
    c, g, lengths = model.config, torch.Generator().manual_seed(seed), sorted(int(n) for n in lengths)
    if not lengths or lengths[0] < 1:
        raise KVLibError(f"a cache holds at least 1 token: give lengths of 1 or more, not {lengths}")
    check_repeats(repeats)
    rand = lambda *shape: torch.randn(*shape, generator=g).to(model.device)
    q = rand(c.n_head, 1, c.head_dim)  # [nh, 1, hs]: the new token's queries
    caches = [(rand(c.n_kv_head, n, c.head_dim), rand(c.n_kv_head, n, c.head_dim), torch.zeros(1, n, device=model.device))
              for n in lengths]  # K, V [n_kv_head, n, hs] as cached, and a mask [1, n] that lets the new token see all
    best = [float("inf")] * len(lengths)
    with torch.inference_mode(), one_thread():
        for round in range(repeats + 1):
            for i, (k, v, mask) in enumerate(caches):
                _, seconds = timed(lambda: [fused_attention(q, k, v, mask, gqa=True) for _ in range(c.n_layer)], model.device)
                if round:
                    best[i] = min(best[i], seconds)
    return lengths, best
