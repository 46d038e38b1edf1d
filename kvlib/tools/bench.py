"""Side-by-side benchmarks, all measured in one run (machines are noisy, ratios are not).

decode: tokens/s of kvlib with and without its KV cache and of transformers'
`generate` with and without its cache, on the same weights and prompt (random-gpt2,
GPT-2's shape, by default; any model by name, SmolLM2 included), against the
memory-bandwidth floor of a decode step (every weight read once per token) and the
time of that step's bare weight matmuls (the floor torch itself reaches).
prefill: a long prompt through kvlib and through transformers (time to first token's bulk).
prompt caching: time to first token of a long prompt cold, warm (all but its last
tokens cached) and with no prompt cache at all (what a 0 % hit rate costs).
batching: total decode tokens/s of `generate_batch` at batch 1, 8 and 32 (GPT-2's shape and
SmolLM2), each as a ratio to batch 1: the weights are read once per step for the whole batch.
idle neighbour: a decode step of 8 sequences of 32 tokens alone in the paged pool and beside one idle
1,000-token sequence, side by side: each sequence attends to its own blocks, so the ratio stays near 1.
room (`python -m kvlib bench --room N`): N learners' kernels on this machine, each having run notebook 5 with
SmolLM2, alive together: the memory private to each (the weights are one shared copy: weights_file.py).
suite (`python -m kvlib bench --out DIR`): all of it on GPT-2's shape and SmolLM2 at
several prompt lengths, written to DIR/bench.json, DIR/bench.md and plots.

The measuring tools themselves (a clock that waits for the device, random prompts, the bytes
and bare matmuls of a step) live in measure.py, and the measurements the notebooks make too
(prompt caching, batching) in speed.py; this module composes them and adds what compares kvlib
with transformers. Every clock read waits for the device first: a GPU runs ahead of Python.
Only the command line imports it (it draws its figures with matplotlib).
"""

import functools
import json
import os
import platform
import re
import statistics
import time
from pathlib import Path

import torch

from ..errors import KVLibError
from ..lessons import memory
from ..lessons.speed import PREFILLS, batch_rates, prompt_caching, report_prompt_caching
from ..model import models
from ..model.measure import bare_matmul_seconds, random_ids, read_bandwidth, step_weight_bytes, timed
from ..server.batching import forward_rows
from ..server.generate import generate
from ..server.paged_cache import PagedKVCache, blocks_for
from ..ui import plots


class Arrivals:
    """A transformers streamer that reads the clock as each token arrives (after the device is done)."""

    def __init__(self, device):
        self.device, self.times = device, []

    def put(self, value):  # called with the prompt first, then with each new token
        models.synchronize(self.device)
        self.times.append(time.perf_counter())

    def end(self):
        pass


def run_kvlib(model, prompt, new_tokens, use_cache):
    """(new ids, clock at each token's arrival, the Generation)."""
    arrivals = []
    gen = generate(model, prompt, new_tokens, use_cache=use_cache, stop_at_eos=False,
                   on_token=lambda *_: arrivals.append(time.perf_counter()))  # generate has synced the step
    return gen.ids, arrivals, gen


def run_transformers(hf, prompt, new_tokens, use_cache, device):
    """(new ids, clock at each token's arrival, None) for transformers' own greedy `generate`."""
    arrivals = Arrivals(device)
    out = hf.generate(torch.tensor([prompt], device=device), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                      do_sample=False, use_cache=use_cache, pad_token_id=0, streamer=arrivals)
    assert len(arrivals.times) == new_tokens + 1, "transformers' streamer no longer puts the prompt, then each token"
    return out[0, len(prompt):].tolist(), arrivals.times[1:], None


LABELS = ("kvlib, cached", "transformers, cached", "kvlib, uncached", "transformers, uncached")


def load_pair(name, device="cpu"):
    """(kvlib Model, transformers model) holding the same tensors, on one device."""
    hf, tok = models.hf_model(name)
    model = models.from_hf(name, hf, tok, models.pick_device(device))
    return model, hf.to(model.device)


def decode_rates(model, hf, prompt_len, new_tokens, uncached_tokens=None, seed=0, warm_up=True, repeats=2):
    """Decode seconds per token of the four runs on one prompt, each from its first new token's
    arrival to its last (the prefill, time to first token, is timed apart).

    Each run goes `repeats` times, the four in turn, and keeps its best, so a busy machine's drift
    hits all alike. Uncached runs may generate fewer tokens (each of their steps rereads the whole
    sequence)."""
    if new_tokens < 2 or (uncached_tokens or new_tokens) < 2:
        raise KVLibError("decode speed needs at least 2 new tokens (it is timed between tokens)")
    uncached_tokens = uncached_tokens or new_tokens
    prompt = random_ids(model, prompt_len, seed)
    runs = {"kvlib, cached": lambda n: run_kvlib(model, prompt, n, True),
            "transformers, cached": lambda n: run_transformers(hf, prompt, n, True, model.device),
            "kvlib, uncached": lambda n: run_kvlib(model, prompt, n, False),
            "transformers, uncached": lambda n: run_transformers(hf, prompt, n, False, model.device)}
    if warm_up:
        for run in runs.values():
            run(2)
    order = [label for _ in range(repeats) for label in LABELS]
    rows, ttft, gens = {}, {}, {}
    for label in order:
        n = new_tokens if "uncached" not in label else uncached_tokens
        t0 = time.perf_counter()
        ids, arrivals, gen = runs[label](n)
        seconds = (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1)
        if label not in rows or seconds < rows[label][1]:
            rows[label], ttft[label], gens[label] = (ids, seconds), arrivals[0] - t0, gen
    gen = gens["kvlib, cached"]
    return {"rows": {label: rows[label] for label in LABELS}, "ttft": ttft,
            "step": statistics.median(gen.step_seconds[1:]), "cache_tokens": len(gen.cache),
            "cache_bytes": gen.cache.nbytes, "prompt_len": prompt_len, "new_tokens": new_tokens,
            "uncached_tokens": uncached_tokens}


def same_tokens(rows):
    """Did the four runs pick the same tokens (as far as the shortest went)?"""
    n = min(len(ids) for ids, _ in rows.values())
    return len({tuple(ids[:n]) for ids, _ in rows.values()}) == 1


def decode(name="random-gpt2", prompt_len=32, new_tokens=128, seed=0, device="cpu"):
    model, hf = load_pair(name, device)
    r = decode_rates(model, hf, prompt_len, new_tokens, seed=seed)
    nbytes = step_weight_bytes(model)
    return {**r, "model": model, "floor": nbytes / read_bandwidth(model.device), "weight_bytes": nbytes,
            "bare": bare_matmul_seconds(model)}


def report_decode(r):
    print(f"{r['model']}, fp32: {r['prompt_len']} prompt + {r['new_tokens']} new tokens, greedy, "
          f"{torch.get_num_threads()} threads; decode speed, from the first new token to the last")
    tps = {label: 1 / seconds for label, (_, seconds) in r["rows"].items()}
    for label, value in tps.items():
        print(f"  {label:<24} {value:8.1f} tok/s")
    print(f"  same tokens in all four runs: {same_tokens(r['rows'])}")
    print(f"  kvlib cached / transformers cached: {tps['kvlib, cached'] / tps['transformers, cached']:.2f}x")
    print(f"  kvlib cached / kvlib uncached:      {tps['kvlib, cached'] / tps['kvlib, uncached']:.2f}x")
    print(f"  transformers cached / uncached:     "
          f"{tps['transformers, cached'] / tps['transformers, uncached']:.2f}x")
    print(f"  bandwidth floor: {r['weight_bytes'] / 1e6:.0f} MB of weights per step at "
          f"{r['weight_bytes'] / r['floor'] / 1e9:.1f} GB/s = {r['floor'] * 1e3:.1f} ms; kvlib's cached step "
          f"{r['step'] * 1e3:.1f} ms reaches {r['floor'] / r['step']:.0%} of it; the bare weight matmuls "
          f"of a step take {r['bare'] * 1e3:.1f} ms ({r['floor'] / r['bare']:.0%})")


def prefill_rates(model, hf, prompt_len=1024, repeats=5, seed=0):
    """Best seconds of a prefill (the prompt through the model into a new cache, the last token's
    logits out) by kvlib and by transformers, on the same random prompt, taken in turn."""
    prompt = random_ids(model, prompt_len, seed)
    ids = torch.tensor([prompt], device=model.device)
    runs = {"kvlib": lambda: model.forward(prompt, cache=model.new_cache(), last_only=True),
            "transformers": lambda: hf(ids, use_cache=True, logits_to_keep=1)}
    best = {}
    with torch.no_grad():
        for round in range(repeats + 1):  # round 0 warms up
            for label, run in runs.items():
                seconds = timed(run, model.device)[1]
                if round:
                    best[label] = min(best.get(label, seconds), seconds)
    return {"prompt_len": prompt_len, "seconds": best,
            "kvlib_over_transformers": best["transformers"] / best["kvlib"]}


def idle_neighbour(model, batch=8, prompt_len=32, idle_tokens=1000, rounds=20, seed=0, block_size=16):
    """A batched decode step's seconds with and without one idle long sequence in the same pool, side by side.

    Two pools hold the same `batch` sequences of prompt_len tokens (random ids); the second also holds one
    sequence of idle_tokens that is never scheduled (added first, so its blocks lie before theirs). Each round
    runs one decode step of the batch on each pool in turn (one token each, the same ids), so both grow alike;
    the fastest step of each is kept after a warm-up round. A sequence that attends only to its own tokens
    pays nothing for the neighbour: the ratio stays near 1."""
    if not model.fits(idle_tokens + 1) or not model.fits(prompt_len + rounds + 1):
        raise KVLibError(f"{model.name} holds {model.config.n_ctx} tokens: an idle sequence of "
                                f"{idle_tokens} does not fit, take a smaller one or a model with a longer context")
    prompts = [random_ids(model, prompt_len, seed + i) for i in range(batch)]
    n_blocks = blocks_for(idle_tokens, block_size) + batch * blocks_for(prompt_len + rounds + 1, block_size)
    pools = {}
    for label, idle in (("alone", 0), ("beside idle", idle_tokens)):
        cache = PagedKVCache(model.config.n_layer, n_blocks, block_size)
        if idle:
            forward_rows(model, cache, [(cache.add(), random_ids(model, idle, seed - 1))])
        seqs = [cache.add() for _ in prompts]
        for s, ids in zip(seqs, prompts):
            forward_rows(model, cache, [(s, ids)])
        pools[label] = cache, seqs
    best = {}
    for round in range(rounds + 1):  # round 0 warms up
        tokens = random_ids(model, batch, seed + 1000 + round)
        for label, (cache, seqs) in pools.items():
            _, seconds = timed(lambda: forward_rows(model, cache, [(s, [t]) for s, t in zip(seqs, tokens)]),
                               model.device)
            if round:
                best[label] = min(best.get(label, seconds), seconds)
    return {"model": str(model), "batch": batch, "prompt_len": prompt_len, "idle_tokens": idle_tokens,
            "seconds": best, "ratio": best["beside idle"] / best["alone"]}


def report_idle_neighbour(r):
    t = r["seconds"]
    print(f"{r['model']}: decode step of {r['batch']} sequences of {r['prompt_len']} tokens (fastest of rounds)")
    print(f"  alone in the pool:                        {t['alone'] * 1e3:7.2f} ms")
    print(f"  beside an idle {r['idle_tokens']}-token sequence:     {t['beside idle'] * 1e3:7.2f} ms")
    print(f"  ratio: {r['ratio']:.2f}x (a sequence attends to its own tokens only: near 1)")


def report_batches(name, r):
    print(f"{name}, {r['prompt_len']}-token prompts, {r['new_tokens']} new tokens each: total decode tokens/s")
    for b, tps in r["tokens_per_second"].items():
        print(f"  batch {b:>3}: {tps:8.1f} tok/s  ({r['over_batch_1'][b]:.1f}x batch 1)")


# --- the suite: python -m kvlib bench --out DIR ---

SUITE_MODELS = ("random-gpt2", "smollm2")
SUITE_PROMPTS = (32, 256, 900)


def uncached_tokens_for(prompt_len, cached_tokens):
    """Fewer uncached tokens at long prompts: each uncached step rereads the whole prompt. At least 3, so
    at least two steps are timed (the first new token's arrival starts the clock)."""
    return max(3, min(cached_tokens, 2048 // prompt_len))  # 32 -> 32, 256 -> 8, 900 -> 3


def cpu_name():
    """The processor's model name where the system says it (Linux), else its architecture."""
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine(device):
    """What ran the suite, in words and numbers."""
    device = torch.device(device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"device": str(device), "gpu": gpu, "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "processor": cpu_name(),
            "torch": torch.__version__}


def suite_model(name, device, prompts, cached_tokens, cache_prompt_tokens, bandwidth, say):
    """Everything the suite measures on one model, as plain numbers for JSON."""
    model, hf = load_pair(name, device)
    say(f"{model}")
    nbytes = step_weight_bytes(model)
    floor = nbytes / bandwidth
    say(f"  floor {floor * 1e3:.1f} ms/token ({nbytes / 1e6:.0f} MB of weights)")
    decodes, bares = [], []
    for i, p in enumerate(prompts):
        p = min(p, model.config.n_ctx - cached_tokens)  # room for the answer in the context
        # timed before each prompt's runs and the fastest kept: timed once, a slow moment of a shared
        # machine made a step look faster than its own matmuls
        bares.append(bare_matmul_seconds(model))
        r = decode_rates(model, hf, p, cached_tokens, uncached_tokens_for(p, cached_tokens), warm_up=i == 0)
        seconds = {label: s for label, (_, s) in r["rows"].items()}
        decodes.append({"prompt_len": p, "new_tokens": {"cached": cached_tokens, "uncached": r["uncached_tokens"]},
                        "tokens_per_second": {k: 1 / s for k, s in seconds.items()},
                        "fraction_of_floor": {k: floor / s for k, s in seconds.items()},
                        "time_to_first_token_seconds": r["ttft"], "kvlib_step_seconds": r["step"],
                        "same_tokens": same_tokens(r["rows"]),
                        "kvlib_over_transformers_cached": seconds["transformers, cached"] / seconds["kvlib, cached"],
                        "kvlib_over_transformers_uncached":
                            seconds["transformers, uncached"] / seconds["kvlib, uncached"],
                        "cache_tokens": r["cache_tokens"], "cache_bytes": r["cache_bytes"]})
        tps = decodes[-1]["tokens_per_second"]
        say(f"  prompt {p}: " + ", ".join(f"{k} {v:.1f}" for k, v in tps.items()) + " tok/s; "
            f"kvlib/transformers cached {decodes[-1]['kvlib_over_transformers_cached']:.2f}x")
    bare = min(bares)
    say(f"  bare matmuls {bare * 1e3:.1f} ms (fastest of {len(bares)})")
    for d in decodes:
        d["step_over_bare_matmuls"] = d["kvlib_step_seconds"] / bare
    prefill = prefill_rates(model, hf, min(cache_prompt_tokens, model.config.n_ctx))
    say(f"  prefill of {prefill['prompt_len']} tokens: kvlib {prefill['seconds']['kvlib'] * 1e3:.0f} ms, "
        f"transformers {prefill['seconds']['transformers'] * 1e3:.0f} ms ({prefill['kvlib_over_transformers']:.2f}x)")
    pc = prompt_caching(model, min(cache_prompt_tokens, model.config.n_ctx), repeats=2)
    say(f"  time to first token, {pc['prompt_len']}-token prompt: cold {pc['seconds']['cold'] * 1e3:.0f} ms, "
        f"warm {pc['seconds']['warm'] * 1e3:.0f} ms")
    batches = batch_rates(model)
    say("  batches: " + ", ".join(f"{b}: {t:.0f} tok/s ({batches['over_batch_1'][b]:.1f}x)"
                                  for b, t in batches["tokens_per_second"].items()))
    neighbour = idle_neighbour(model, idle_tokens=min(1000, cache_prompt_tokens, model.config.n_ctx - 64))
    say(f"  decode step of 8 sequences beside an idle {neighbour['idle_tokens']}-token one: "
        f"{neighbour['ratio']:.2f}x the step alone")
    per_token = memory.model_kv_bytes_per_token(model.config, bytes_per_number=model.dtype.itemsize)
    return {"model": str(model), "weight_bytes": nbytes, "floor_seconds": floor, "bare_matmul_seconds": bare,
            "bare_matmul_fraction_of_floor": floor / bare, "decode": decodes, "prefill": prefill,
            "time_to_first_token": {"prompt_len": pc["prompt_len"], "seconds": pc["seconds"],
                                    "warm_cached_tokens": pc["receipt"].cached_tokens},
            "batches": batches, "idle_neighbour": neighbour,
            "kv_bytes": {"formula_bytes_per_token": per_token,
                         "tokens": [d["cache_tokens"] for d in decodes],
                         "measured": [d["cache_bytes"] for d in decodes],
                         "formula": [d["cache_tokens"] * per_token for d in decodes]}}


def suite(out, device="cpu", names=SUITE_MODELS, prompts=SUITE_PROMPTS, cached_tokens=32,
          cache_prompt_tokens=1024, say=functools.partial(print, flush=True)):
    """Run every measurement, write out/bench.json, out/bench.md (a table) and out/*.png; returns the dict."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def progress(line):
        say(f"[{time.perf_counter() - start:5.0f} s] {line}")

    device = models.pick_device(device)
    bandwidth = read_bandwidth(device)
    progress(f"{device}: reads {bandwidth / 1e9:.1f} GB/s")
    result = {"machine": machine(device), "bandwidth_bytes_per_second": bandwidth,
              "models": {name: suite_model(name, device, prompts, cached_tokens, cache_prompt_tokens, bandwidth,
                                           progress) for name in names}}
    result["seconds"] = time.perf_counter() - start
    for name, figure in FIGURES.items():
        figure(result).savefig(out / name, dpi=100)
    result["plots"] = list(FIGURES)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    (out / "bench.md").write_text(table := markdown_table(result))
    say(table)
    progress(f"wrote {out / 'bench.json'}, {out / 'bench.md'} and {len(result['plots'])} plots")
    return result


def markdown_table(result):
    """The suite's figures as Markdown: per model and prompt, kvlib's decode speed and its ratios to
    transformers (cached and uncached, > 1 is kvlib faster) and to the step's bare weight matmuls
    (> 1 is kvlib's overhead); per model, prefill against transformers and time to first token."""
    m = result["machine"]
    lines = [f"{m['gpu'] or m['processor']}, {m['cpu_cores']} cores, {m['torch_threads']} torch threads, "
             f"{m['device']}, torch {m['torch']}; memory read at {result['bandwidth_bytes_per_second'] / 1e9:.1f} GB/s",
             "", "| model | prompt | kvlib cached | ÷ transformers cached | kvlib uncached | ÷ transformers uncached "
             "| kvlib step | ÷ bare matmuls |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in result["models"].items():
        for d in r["decode"]:
            tps = d["tokens_per_second"]
            lines.append(f"| {name} | {d['prompt_len']} | {tps['kvlib, cached']:.1f} tok/s | "
                         f"{d['kvlib_over_transformers_cached']:.2f}x | {tps['kvlib, uncached']:.1f} tok/s | "
                         f"{d['kvlib_over_transformers_uncached']:.2f}x | {d['kvlib_step_seconds'] * 1e3:.1f} ms | "
                         f"{d['step_over_bare_matmuls']:.2f}x |")
    lines += ["", "| model | prefill | kvlib | transformers | kvlib ÷ transformers | TTFT cold / warm |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, r in result["models"].items():
        p, t = r["prefill"], r["time_to_first_token"]["seconds"]
        lines.append(f"| {name} | {p['prompt_len']:,} tokens | {p['seconds']['kvlib'] * 1e3:.0f} ms | "
                     f"{p['seconds']['transformers'] * 1e3:.0f} ms | {p['kvlib_over_transformers']:.2f}x | "
                     f"{t['cold'] * 1e3:.0f} / {t['warm'] * 1e3:.0f} ms |")
    lines += ["", "| model | batch | total decode tokens/s | ÷ batch 1 |", "|---|---:|---:|---:|"]
    for name, r in result["models"].items():
        for b, tps in r["batches"]["tokens_per_second"].items():
            lines.append(f"| {name} | {b} | {tps:.1f} | {r['batches']['over_batch_1'][b]:.1f}x |")
    return "\n".join(lines) + "\n"


FIGURES = {"decode_tokens_per_second.png": plots.bench_decode,
           "time_to_first_token.png": functools.partial(plots.bench_time_to_first_token, labels=PREFILLS),
           "kv_bytes.png": plots.bench_kv_bytes, "bandwidth_floor.png": plots.bench_floor}


def main(args):
    if args.room:
        report_room(room(learners=args.room))
        return
    if args.threads:
        torch.set_num_threads(args.threads)  # oversubscribed cores make every thread wait on the slowest
    if args.out:
        suite(args.out, args.device)
        return
    r = decode(args.model, args.prompt_tokens, args.new_tokens, device=args.device)
    report_decode(r)
    print()
    report_prompt_caching(prompt_caching(r["model"], args.cache_prompt_tokens))
    print()  # batching on the same model, at most 16 new tokens each (the suite runs it on both families)
    report_batches(args.model, batch_rates(r["model"], prompt_len=args.prompt_tokens,
                                           new_tokens=max(2, min(args.new_tokens, 16))))
    print()  # paged attention reads each sequence's own blocks: an idle long neighbour costs the batch nothing
    report_idle_neighbour(idle_neighbour(r["model"], idle_tokens=min(1000, r["model"].config.n_ctx - 64)))


def room(notebook="notebooks/05_kv_cache.ipynb", learners=3, model="smollm2"):
    """A workshop room on this machine: `learners` kernels, each having run every code cell of `notebook` with
    `model` as the default (one after another: a 2-core machine), all alive together at the end; then each
    kernel's private and resident memory. The weights file is mapped by every kernel, so its pages count once
    for the room, shared; what stays private to a learner is their activations, caches and Python."""
    import nbformat
    from jupyter_client.manager import start_new_kernel

    cells = [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    # as the room's hub starts each learner's server (etc/hub/jupyterhub_config.py): freed tensors go back to the system
    env = {**os.environ, "KVLIB_MODEL": model, "MPLBACKEND": "Agg", "MALLOC_MMAP_THRESHOLD_": "131072"}
    kernels = []
    try:
        for _ in range(learners):
            manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=str(Path(notebook).parent))
            kernels.append((manager, client))
            for source in cells:
                client.execute_interactive(source, timeout=900, output_hook=lambda msg: None)
        return [memory_of(client) for _, client in kernels]
    finally:
        for manager, client in kernels:
            client.stop_channels()
            manager.shutdown_kernel(now=True)


def memory_of(client):  # -> (private MB, resident MB) of the kernel behind client (Linux's /proc)
    lines = []
    client.execute_interactive(
        "print(open('/proc/self/smaps_rollup').read())", timeout=60,
        output_hook=lambda msg: lines.append(msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None)
    fields = {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+) kB", "".join(lines), re.M)}
    return (fields["Private_Clean"] + fields["Private_Dirty"]) / 1024, fields["Rss"] / 1024


def report_room(measured, machine_gb=24):
    private = max(p for p, _ in measured)
    shared = max(r - p for p, r in measured)  # the weights' and libraries' pages: once for the whole room
    print(f"{len(measured)} learner kernels alive together after notebook 5 with SmolLM2: private memory "
          + ", ".join(f"{p:.0f} MB" for p, _ in measured) + " (resident " + ", ".join(f"{r:.0f}" for _, r in measured)
          + f" MB, the {shared:.0f} MB of shared pages counted in each). At {private:.0f} MB each and the shared pages "
          f"once, a {machine_gb} GB machine holds about {(machine_gb * 1024 - shared) // private:.0f} learners, before "
          f"the system's own needs.")
