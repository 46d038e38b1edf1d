"""How fast kvlib's own paths run, measured for the lessons: a decode step with and without the KV cache
(notebook 5), time to first token with a warm, a cold and no prompt cache (notebooks 6 and 7), at one length or
at several (notebook 6's curve), and batched decoding's tokens per second (notebook 8). The benchmark suite
(bench.py, `python -m kvlib bench`) runs some of them too, beside transformers.

Each takes turns between what it compares and keeps the fastest (or the median) of several rounds, so a busy
moment of the machine slows all alike. The step and prefill timings first run one round untimed, so what is
timed first does not pay for the warm-up, and run on one CPU thread (measure.one_thread). The clock is
measure.timed, which waits for the device. A timed curve can still bend where the machine's noise outweighs
the work between two lengths: `growth` reads it as it came out, and says where it bent rather than reading a
trend into it.
"""

import statistics

import numpy as np
import torch

from .. import i18n
from ..errors import KVLibError
from ..model.measure import check_repeats, matmul_pass, one_thread, random_ids, timed
from ..server.batching import Batch, Decoding, steps
from ..server.sampling import Generation, Rules
from ..server.paged_cache import PagedKVCache
from ..texttable import pad


def step_seconds(model, lengths=(32, 64, 128, 256, 512), repeats=3, seed=0):
    """Seconds of one decode step after each number of tokens in `lengths`: with the cache (one token fed
    to a cache holding the others) and without (all the tokens fed again), each the fastest of `repeats`
    timed rounds.

    Only these lengths are timed; nothing between them is interpolated. The lengths take turns, after an
    untimed round, so a busy moment of the machine slows all of them alike; on one CPU thread
    (measure.one_thread): on a busy 2-core machine two threads made the uncached step 4-5x slower and let it
    bend (a longer text timed faster than a shorter)."""
    lengths = sorted(int(n) for n in lengths)
    if not lengths or lengths[0] < 2 or not model.fits(lengths[-1]):
        raise KVLibError(f"lengths must lie between 2 and {model.config.n_ctx} ({model.name}'s context); "
                         f"got {lengths}")
    check_repeats(repeats)
    ids = random_ids(model, lengths[-1], seed)
    best = {"cached": [float("inf")] * len(lengths), "uncached": [float("inf")] * len(lengths)}
    with torch.inference_mode(), one_thread():
        caches, cache = [], model.new_cache()
        for n in lengths:  # a cache holding the n - 1 tokens before each step's one
            model.forward(ids[len(cache):n - 1], cache=cache, last_only=True)
            caches.append(cache.copy())
        for round in range(repeats + 1):  # round 0 warms up
            for k, (n, cache) in enumerate(zip(lengths, caches)):
                _, cached = timed(lambda: model.forward(ids[n - 1:n], cache=cache, last_only=True), model.device)
                cache.crop(n - 1)  # forget the timed token: the next round sees the same cache
                _, uncached = timed(lambda: model.forward(ids[:n], last_only=True), model.device)
                if round:
                    best["cached"][k] = min(best["cached"][k], cached)
                    best["uncached"][k] = min(best["uncached"][k], uncached)
    return {"lengths": np.array(lengths), "repeats": repeats, **{k: np.array(v) for k, v in best.items()}}


PREFILLS = {k: i18n.TEXT[f"speed.{k}"]["en"] for k in ("none", "cold", "warm")}  # the bench's labels, in English


def _prefill_rounds(model, lengths, uncached_tail, repeats, seed, kinds):
    """The timed prefills behind prompt_caching and prompt_caching_by_length: {kind: [[seconds of each timed
    round] per length]} for each of `kinds` ("none", "cold", "warm"), and each length's last warm receipt.

    The order is taken out of the measurement: one round untimed first (the first prefill of a process pays
    for its warm-up: 450 ms cold at 64 tokens against 30-80 ms at 128-448, timed first), then round after
    round every length in turn, its kinds in turn, each round with a new tail. On one CPU thread
    (measure.one_thread): on a busy 2-core machine two threads made tiny's prefills several times slower and
    bent the curve."""
    from ..server.prompt_cache import PromptCache

    check_repeats(repeats)
    shared = random_ids(model, lengths[-1], seed)
    warm = []
    for n in lengths:  # a cache per length holding that length's shared part
        cache = PromptCache(model, block_size=16)
        cache.prefill(shared[:n - uncached_tail] + random_ids(model, 1, seed + 1))
        warm.append(cache)
    runs = {k: [[] for _ in lengths] for k in PREFILLS if k in kinds}
    receipts = [None] * len(lengths)
    with torch.inference_mode(), one_thread():
        for round in range(repeats + 1):  # round 0 warms up
            for k, n in enumerate(lengths):
                prompt = shared[:n - uncached_tail] + random_ids(model, uncached_tail, seed + 2 + round)
                took = {}
                if "none" in runs:
                    took["none"] = timed(lambda: model.forward(prompt, cache=model.new_cache(), last_only=True),
                                         model.device)[1]
                if "cold" in runs:
                    took["cold"] = PromptCache(model, block_size=16).prefill(prompt).seconds
                res, took["warm"] = timed(lambda: warm[k].prefill(prompt), model.device)  # always: its receipt
                receipts[k] = res.receipt
                for kind in runs if round else ():
                    runs[kind][k].append(took[kind])
    return runs, receipts


def prompt_caching(model, prompt_len=1024, uncached_tail=16, repeats=3, seed=0, kinds=tuple(PREFILLS)):
    """Median prefill seconds ("seconds") and the fastest ("best": the least disturbed by a busy machine) of
    a prompt whose all but `uncached_tail` tokens are cached (warm), of the same prompt through an empty
    prompt cache (cold), and with no prompt cache (none), and every timed run's ("runs"); `kinds` picks which
    of them to time. After a round untimed, taking turns, on one thread (_prefill_rounds)."""
    runs, receipts = _prefill_rounds(model, [prompt_len], uncached_tail, repeats, seed, kinds)
    runs = {k: v[0] for k, v in runs.items()}
    return {"seconds": {k: statistics.median(v) for k, v in runs.items()},
            "best": {k: min(v) for k, v in runs.items()}, "runs": runs, "receipt": receipts[0],
            "prompt_len": prompt_len, "model": model.name}


def prompt_caching_by_length(model, lengths, uncached_tail=16, repeats=3, seed=0):
    """Time to first token at each prompt length in `lengths`, through an empty prompt cache (cold) and with all
    but the last `uncached_tail` tokens cached (warm): {"lengths", "best": {"cold": [s], "warm": [s]} (each the
    fastest of `repeats` rounds, after a round untimed, the lengths in turn: _prefill_rounds), "receipts" (each
    length's last warm receipt), "repeats", "model"}."""
    lengths = sorted(int(n) for n in lengths)
    if not lengths or lengths[0] <= uncached_tail or not model.fits(lengths[-1]):
        raise KVLibError(f"lengths must lie between {uncached_tail + 1} (more than the uncached tail) and "
                         f"{model.config.n_ctx} ({model.name}'s context); got {lengths}")
    runs, receipts = _prefill_rounds(model, lengths, uncached_tail, repeats, seed, ("cold", "warm"))
    return {"lengths": lengths, "best": {k: np.array([min(r) for r in v]) for k, v in runs.items()},
            "receipts": receipts, "repeats": repeats, "model": model.name}


def bends(lengths, values):
    """Where a curve that should grow with the length does not: the (shorter, longer) neighbouring lengths at
    which the longer took less."""
    points = list(zip(lengths, values))
    return [(a, b) for (a, x), (b, y) in zip(points, points[1:]) if y < x]


def _ms(v):  # milliseconds as a line prints them: 3.2, 45, 1,230
    return f"{v:.1f}" if v < 10 else f"{v:,.0f}"


def growth(lengths, ms, curve):
    """One line reading a timed curve (milliseconds at each length) that the lesson expects to grow with the
    length, as the numbers came out: how much it grew when it grew at every step; else where it bent (a
    longer length timed faster than a shorter), named as this run's noise, not a trend. `curve` names it:
    "cold" (a cold prefill) or "uncached" (a decode step without the cache)."""
    lengths, ms = [int(n) for n in lengths], [float(v) for v in ms]
    if len(lengths) != len(ms) or len(lengths) < 2:
        raise KVLibError(f"growth reads a curve of two points or more, one time per length: got {len(lengths)} "
                         f"lengths and {len(ms)} times")
    what = i18n.t(f"speed.curve.{curve}")
    bent = bends(lengths, ms)
    if not bent:
        return i18n.t("speed.grows", what=what, a=lengths[0], b=lengths[-1], first=_ms(ms[0]), last=_ms(ms[-1]),
                      x=f"{ms[-1] / ms[0]:.1f}", y=f"{lengths[-1] / lengths[0]:.1f}".removesuffix(".0"))
    at = {n: v for n, v in zip(lengths, ms)}
    pairs = i18n.t("speed.bend_join").join(i18n.t("speed.bend", a=a, b=b, x=_ms(at[a]), y=_ms(at[b])) for a, b in bent)
    return i18n.t("speed.bends", what=what, pairs=pairs)


BATCHES = (1, 8, 32)


def batch_rates(model, batches=BATCHES, prompt_len=32, new_tokens=16, repeats=2, seed=0, bare=False):
    """Total decode tokens/s at each batch size b: b random prompts of prompt_len tokens decoded together, as
    generate_batch decodes them (batching.steps on a paged cache; the prompts prefilled in the first step, untimed),
    new_tokens each, no early stop; b tokens over the fastest decode step. Every size takes its turn in each of
    `repeats` rounds, after an untimed warm-up round, so a busy moment of the machine slows all alike; ratios to
    the smallest.
    bare=True also times the step's weight matmuls alone (measure.matmul_pass, b rows) right after each decode step,
    so both meet the machine in the same state, and keeps their fastest run the same way: "bare_tokens_per_second",
    and "matmul_share", each size's fastest matmuls over its fastest step, which is the tokens/s in whole steps
    over those in the matmuls alone (a share from a separate measurement once disagreed with this table 2x)."""
    check_repeats(repeats)
    if new_tokens < 2:
        raise KVLibError(f"batch_rates times decode steps: give at least 2 new tokens (the first comes from the "
                         f"prefill), not {new_tokens}")
    step, matmuls = {b: float("inf") for b in batches}, {b: float("inf") for b in batches}
    for round in range(repeats + 1):  # round 0 warms up
        for b in batches:
            batch = Batch(PagedKVCache(model.config.n_layer, b * -(-(prompt_len + new_tokens) // 16), 16))
            batch.waiting.extend(Decoding(Generation(random_ids(model, prompt_len, seed + i)),
                                          Rules(new_tokens, stop_at_eos=False), spans=[]) for i in range(b))
            loop = steps(model, batch)
            next(loop)  # the prefills, every prompt in one call: not timed
            weights = matmul_pass(model, b) if bare else None
            for _ in range(new_tokens - 1):  # every row in every decode step, a token each
                seconds = timed(lambda: next(loop), model.device)[1]
                bare_seconds = timed(weights, model.device)[1] if bare else float("inf")
                if round:
                    step[b], matmuls[b] = min(step[b], seconds), min(matmuls[b], bare_seconds)
    rates = {b: b / seconds for b, seconds in step.items()}
    return {"prompt_len": prompt_len, "new_tokens": new_tokens, "repeats": repeats, "tokens_per_second": rates,
            "over_batch_1": {b: tps / rates[batches[0]] for b, tps in rates.items()},
            **({"bare_tokens_per_second": {b: b / seconds for b, seconds in matmuls.items()},
                "matmul_share": {b: matmuls[b] / step[b] for b in batches}} if bare else {})}


def _apart(a, b):
    """True when every run of one was faster than every run of the other: the two spreads do not overlap, so
    the machine's noise alone did not order them."""
    return max(a) < min(b) or max(b) < min(a)


def report_prompt_caching(r):
    """Prints prompt_caching's result: each prefill's median, the warm receipt, then warm against cold and cold
    against no prompt cache, each read as the numbers came out (slower when slower; a cost only when cold took
    longer; either named within noise when the two's runs overlapped). A prefill not timed (prompt_caching's
    `kinds`) is left out, with the line that compares it."""
    t, rc, runs = r["seconds"], r["receipt"], r["runs"]
    print(i18n.t("speed.report", model=r["model"], n=r["prompt_len"]))
    for key in t:
        print(f"  {pad(i18n.t(f'speed.{key}'), '<', 32)} {t[key] * 1e3:9.1f} ms")  # a Chinese character is two columns
    print(i18n.t("speed.receipt", input=rc.input_tokens, cached=rc.cached_tokens, written=rc.written_tokens))
    ratio = t["cold"] / t["warm"]
    print(i18n.t("speed.faster" if ratio > 1 else "speed.slower", x=f"{max(ratio, 1 / ratio):.1f}")
          + ("" if _apart(runs["warm"], runs["cold"]) else i18n.t("speed.noise")))
    if "none" not in t:
        return
    cost = t["cold"] / t["none"] - 1
    if cost > 0:
        print(i18n.t("speed.zero_hits", cost=f"{cost:+.1%}")
              + ("" if _apart(runs["cold"], runs["none"]) else i18n.t("speed.noise")))
    else:
        print(i18n.t("speed.zero_hits_none", less=f"{-cost:.1%}")
              + ("" if _apart(runs["cold"], runs["none"]) else i18n.t("speed.noise")))
