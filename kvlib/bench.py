"""Side-by-side benchmarks, all measured in one run (machines are noisy, ratios are not).

decode: tokens/s of kvlib with and without its KV cache and of transformers'
`generate` with and without its cache, on the same weights and prompt (random-gpt2,
GPT-2's shape, by default; any model by name, SmolLM2 included), against the
memory-bandwidth floor of a decode step (every weight read once per token).
prompt caching: time to first token of a long prompt cold, warm (all but its last
tokens cached) and with no prompt cache at all (what a 0 % hit rate costs).
"""

import statistics
import time

import numpy as np
import torch

from . import models
from .generate import generate


def read_bandwidth(nbytes=512 * 2**20, repeats=5):
    """Bytes per second this machine reads from memory (a big tensor summed, best of a few)."""
    x = torch.ones(nbytes // 4)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def weight_bytes(model):
    """Bytes of weights one decode step reads: every matrix once, but only a row of a lookup table."""
    lookups = {"wpe.weight", "embed_tokens.weight"}  # GPT-2's wte is also its output head: read whole
    tensors = [t for k, t in model.params.items() if k != "h" and k not in lookups]
    tensors += [t for layer in model.params["h"] for t in layer.values()]
    return sum(t.numel() * t.element_size() for t in tensors)


def random_ids(model, n, seed):
    """n token ids drawn from the model's vocabulary, the same for the same seed."""
    return torch.randint(0, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def decode(name="random-gpt2", prompt_len=32, new_tokens=128, seed=0, device="cpu"):
    hf, tok = models.hf_model(name)
    model = models.from_hf(name, hf, tok, models.pick_device(device))  # the same tensors as hf
    hf = hf.to(model.device)
    prompt = random_ids(model, prompt_len, seed)

    def ours(use_cache):
        return generate(model, prompt, new_tokens, use_cache=use_cache, stop_at_eos=False).ids

    def theirs(use_cache):
        out = hf.generate(torch.tensor([prompt], device=model.device), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, use_cache=use_cache, pad_token_id=0)
        return out[0, prompt_len:].tolist()

    ours(True), theirs(True)  # warm up both
    rows = {}
    for label, fn in [("kvlib, cached", lambda: ours(True)), ("transformers, cached", lambda: theirs(True)),
                      ("kvlib, uncached", lambda: ours(False)), ("transformers, uncached", lambda: theirs(False))]:
        rows[label] = timed(fn)
    step = statistics.median(generate(model, prompt, 16, stop_at_eos=False).step_seconds[1:])
    nbytes = weight_bytes(model)
    return {"model": model, "rows": rows, "step": step, "floor": nbytes / read_bandwidth(), "weight_bytes": nbytes,
            "prompt_len": prompt_len, "new_tokens": new_tokens}


def step_seconds(model, prompt_len=32, new_tokens=256, sample_every=32, seed=0):
    """Seconds per decode step with and without the cache, over one long generation.

    With the cache every step is timed. Without it, a step at length n is one forward
    pass over n tokens: timed at every `sample_every`-th length (the slow half of a
    full uncached run would take minutes on a CPU) and interpolated in between."""
    gen = generate(model, random_ids(model, prompt_len, seed), new_tokens, stop_at_eos=False)
    seq = gen.prompt_ids + gen.ids
    lengths = np.arange(prompt_len, prompt_len + new_tokens)  # tokens fed by the uncached step
    sampled = sorted(set(lengths[::sample_every].tolist()) | {int(lengths[-1])})
    model.forward(seq[:sampled[0]], last_only=True)  # warm up
    timed_at = [min(timed(lambda: model.forward(seq[:n], last_only=True))[1] for _ in range(2)) for n in sampled]
    # step 0 is the prompt's prefill for both; after it the cached step feeds one token
    return {"lengths": lengths, "cached": np.array(gen.step_seconds), "uncached": np.interp(lengths, sampled, timed_at)}


def report_decode(r):
    n = r["new_tokens"]
    print(f"{r['model']}, fp32: {r['prompt_len']} prompt + {n} new tokens, greedy, {torch.get_num_threads()} threads")
    tps = {label: n / seconds for label, (_, seconds) in r["rows"].items()}
    for label, value in tps.items():
        print(f"  {label:<24} {value:8.1f} tok/s")
    ids = {label: out for label, (out, _) in r["rows"].items()}
    print(f"  same tokens in all four runs: {len({tuple(v) for v in ids.values()}) == 1}")
    print(f"  kvlib cached / transformers cached: {tps['kvlib, cached'] / tps['transformers, cached']:.2f}x")
    print(f"  kvlib cached / kvlib uncached:      {tps['kvlib, cached'] / tps['kvlib, uncached']:.2f}x")
    print(f"  transformers cached / uncached:     "
          f"{tps['transformers, cached'] / tps['transformers, uncached']:.2f}x")
    print(f"  bandwidth floor: {r['weight_bytes'] / 1e6:.0f} MB of weights per step at "
          f"{r['weight_bytes'] / r['floor'] / 1e9:.1f} GB/s = {r['floor'] * 1e3:.1f} ms; kvlib's cached step "
          f"{r['step'] * 1e3:.1f} ms reaches {r['floor'] / r['step']:.0%} of it")


PREFILLS = {"none": "no prompt cache", "cold": "prompt cache, cold (0 % hits)", "warm": "prompt cache, warm"}


def prompt_caching(model, prompt_len=1024, uncached_tail=16, repeats=3, seed=0):
    """Median prefill seconds of a prompt whose all but `uncached_tail` tokens are cached (warm),
    of the same prompt through an empty prompt cache (cold), and with no prompt cache (none)."""
    from .prompt_cache import PromptCache

    shared = random_ids(model, prompt_len - uncached_tail, seed)
    warm = PromptCache(model, block_size=16)
    warm.prefill(shared + random_ids(model, 1, seed + 1))  # caches the shared part
    runs = {k: [] for k in PREFILLS}
    for r in range(repeats):  # interleaved, so drift hits all three alike; a new tail each time
        prompt = shared + random_ids(model, uncached_tail, seed + 2 + r)
        runs["none"].append(timed(lambda: model.forward(prompt, cache=model.new_cache(), last_only=True))[1])
        runs["cold"].append(PromptCache(model, block_size=16).prefill(prompt).seconds)
        res = warm.prefill(prompt)
        runs["warm"].append(res.seconds)
    return {"seconds": {k: statistics.median(v) for k, v in runs.items()}, "receipt": res.receipt,
            "prompt_len": prompt_len, "model": model.name}


def report_prompt_caching(r):
    t, rc = r["seconds"], r["receipt"]
    print(f"{r['model']}, {r['prompt_len']}-token prompt, time to first token (median of runs):")
    for key, label in PREFILLS.items():
        print(f"  {label:<32} {t[key] * 1e3:9.1f} ms")
    print(f"  warm receipt: {rc.input_tokens} input, {rc.cached_tokens} cached, {rc.written_tokens} written")
    print(f"  warm vs cold: {t['cold'] / t['warm']:.1f}x faster")
    print(f"  cost of a 0 % hit rate: {t['cold'] / t['none'] - 1:+.1%} over no prompt cache")


def main(args):
    r = decode(args.model, args.prompt_tokens, args.new_tokens, device=args.device)
    report_decode(r)
    print()
    report_prompt_caching(prompt_caching(r["model"], args.cache_prompt_tokens))
