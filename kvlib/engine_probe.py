"""Notebook 6's prompt-caching experiment rerun on a real engine, llama.cpp's server, beside kvlib's PromptCache.

    with Engine(slots=2) as engine:                        # kvlib.engine
        ids = compression.heldout_ids(model, 1000)         # ~1,000 tokens of a play, as SmolLM2's ids
        tokenizers_agree(engine, model, text)              # the engine's tokens are kvlib's
        exp = seed_experiment(engine, model, ids)          # cold, warm, first token changed: both caches
        print(exp.table())
        par = parallel_slots(engine, ids[:200], [ids[300:320], ids[400:420]])  # at once, a slot each
        print(par.table())
    repeat(connect(), long_text, chat=True)                # the same prompt twice on any endpoint

The requests send token ids, not text, so both sides count the same tokens: the engine serves the
same model in its 4-bit GGUF, with the same tokenizer (`tokenizers_agree` checks); kvlib's SmolLM2 is
that GGUF dequantized, or the full-precision weights when the hub answered.

What each side reuses, and at what grain:
- The engine: each slot keeps the tokens and K/V of the last prompt it served. A new prompt reuses
  the longest common prefix with its slot, token by token (`timings.cache_n`), and computes the rest
  (`timings.prompt_n`), but always at least the last token, whose logits it needs: an identical
  prompt of n tokens reuses n - 1. The first differing token ends the reuse, so a changed first
  token reuses nothing, however much of the rest is the same.
- kvlib's PromptCache (automatic mode): full blocks of `block_size` tokens that end before the last
  token, so a hit is the shared prefix rounded down to a block: 992 of 1,000 tokens with blocks of 16.
- Time to first token (`Reply.ttft`) is the client's clock from sending the request to the first
  streamed token: the prefill (whose last logits give that token; no decode step runs with
  max_tokens=1) plus HTTP. `timings.prompt_ms` is the server's own prefill time.

"Cold" asks the engine not to reuse anything (`cache_prompt: false`): it computes every token,
whatever its slots hold, so a cold request is cold each time a cell runs. With `repeats` > 1 each
kind of request is taken in turn (cold, warm, changed, cold...) and the medians reported, so a busy
machine slows all three alike. One is the default: a cold prompt of 1,000 tokens takes seconds on a
laptop's CPU (11 s on this project's shared 2-core machine, where kvlib's fp32 prefill takes 2.5 s:
on x86, llama.cpp's only fast batched kernel for this GGUF's 4-bit Q4_1 blocks is its AMX one, which
`make engine`'s portable build leaves out: see the README), and a warm one tens of milliseconds, a gap
no noise closes.
"""

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from .endpoint import Endpoint, connect
from .errors import KVLibError
from .measure import timed
from .prompt_cache import PromptCache
from .texttable import text_table

REQUESTS = ("cold", "warm", "first token changed")


def tokenizers_agree(engine, model, text):
    """(kvlib's ids, the engine's ids) for `text`: the engine's own /tokenize against model.encode."""
    engine_ids = Endpoint(engine.url).request("POST", "/tokenize", {"content": text, "add_special": False})["tokens"]
    return model.encode(text), engine_ids


def erase_slots(engine):
    """Empty every slot of the engine (llama-server's /slots/N?action=erase): nothing left to reuse."""
    for slot in range(engine.slots):
        Endpoint(engine.url).request("POST", f"/slots/{slot}?action=erase", {})


def change_first(ids, vocab_size):
    """The same ids with the first replaced by the next id in the vocabulary: one token differs."""
    return [(ids[0] + 1) % vocab_size] + list(ids[1:])


class Row(NamedTuple):
    """One kind of request, both sides: reused and computed tokens, and median seconds."""
    request: str            # "cold", "warm" or "first token changed"
    prompt_tokens: int
    engine_reused: int      # timings.cache_n: tokens the slot reused
    engine_computed: int    # timings.prompt_n: tokens the engine computed
    engine_ttft: float      # median seconds to the first streamed token, on the client's clock
    engine_prompt_ms: float  # median prefill milliseconds, on the server's clock
    kvlib_reused: int       # the PromptCache receipt's cached_tokens
    kvlib_seconds: float    # median PromptCache prefill seconds


@dataclass
class SeedExperiment:
    """What seed_experiment measured: a Row per kind of request, with the raw replies."""
    rows: list                                    # [Row] in the order of REQUESTS
    replies: dict = field(default_factory=dict)   # request -> [endpoint.Reply], one per repeat
    block_size: int = 16

    def table(self):
        return text_table(
            ["request", "prompt\ntokens", "llama-server\nreused", "computed", "first token", "prefill",
             f"kvlib PromptCache (blocks of {self.block_size})\nreused", "prefill"],
            [[r.request, f"{r.prompt_tokens:,}", f"{r.engine_reused:,}", f"{r.engine_computed:,}",
              f"{r.engine_ttft * 1e3:,.0f} ms", f"{r.engine_prompt_ms:,.0f} ms", f"{r.kvlib_reused:,}",
              f"{r.kvlib_seconds * 1e3:,.0f} ms"] for r in self.rows])


def seed_experiment(engine, model, ids, repeats=1, block_size=16, slot=0):
    """Cold, warm and first-token-changed requests of `ids`, on the engine's slot `slot` and on a kvlib
    PromptCache of the same model, side by side; each kind `repeats` times in turn, medians reported."""
    ids = list(ids)
    if len(ids) < 2:
        raise KVLibError("give a prompt of at least 2 tokens: one to reuse and the last to compute")
    prompts = {"cold": ids, "warm": ids, "first token changed": change_first(ids, model.config.vocab_size)}
    ep = connect(engine)
    replies = {k: [] for k in REQUESTS}
    for _ in range(repeats):
        for request in REQUESTS:  # id_slot: one slot, so the next request meets what the last one left there
            replies[request].append(ep.complete(prompts[request], max_tokens=1, id_slot=slot,
                                                cache_prompt=request != "cold"))
    prefills = {k: [] for k in REQUESTS}
    for _ in range(repeats):
        cache = PromptCache(model, block_size=block_size)  # empty: the first prefill is cold
        for request in REQUESTS:
            prefills[request].append(cache.prefill(prompts[request]))
    rows = []
    for request in REQUESTS:
        last = replies[request][-1]
        rows.append(Row(request, len(ids), last.timings["cache_n"], last.timings["prompt_n"],
                        statistics.median(r.ttft for r in replies[request]),
                        statistics.median(r.timings["prompt_ms"] for r in replies[request]),
                        prefills[request][-1].receipt.cached_tokens,
                        statistics.median(p.seconds for p in prefills[request])))
    return SeedExperiment(rows, replies, block_size)


ROUNDS = ("first", "again", "swapped")


@dataclass
class ParallelRun:
    """Three rounds of requests sent at once, request j to slot j, then to slot j again, then swapped to
    the next slot: each request's Reply per round, the slots they went to, each round's wall seconds."""
    prompts: list
    replies: dict  # round -> [Reply], in the order of the prompts
    slots: dict    # round -> [slot], in the order of the prompts
    seconds: dict  # round -> wall seconds, from sending the first request to the last reply

    def table(self):
        return text_table(["round", "request", "slot", "reused", "computed", "first token", "round took"],
                          [[name if j == 0 else "", str(j + 1), str(slot), f"{r.timings['cache_n']:,}",
                            f"{r.timings['prompt_n']:,}", f"{r.ttft * 1e3:,.0f} ms",
                            f"{self.seconds[name] * 1e3:,.0f} ms" if j == 0 else ""]
                           for name in ROUNDS
                           for j, (slot, r) in enumerate(zip(self.slots[name], self.replies[name]))])


def parallel_slots(engine, shared, tails, max_tokens=8):
    """Requests `shared + tail`, one per tail, all sent at once, in three rounds from emptied slots:
    request j goes to slot j (`id_slot`), then to slot j again, then to slot j + 1 (the last to slot 0).

    The engine runs the requests of a round together, each in its slot, and a slot reuses only what it
    computed itself, the longest common prefix with the prompt it holds. So in the first round every
    slot computes the shared prefix for itself; again, each reuses its whole prompt but the last token;
    swapped, each reuses only the shared prefix, because its slot holds another request's tail. The
    same K and V are held once per slot, where vLLM's shared blocks would hold them once."""
    if not 2 <= len(tails) <= engine.slots:
        raise KVLibError(f"give 2 to {engine.slots} tails, one request per slot (Engine(slots=N) serves N at once)")
    prompts = [list(shared) + list(tail) for tail in tails]
    n = len(prompts)
    plan = {"first": list(range(n)), "again": list(range(n)), "swapped": [(j + 1) % n for j in range(n)]}
    erase_slots(engine)
    ep = connect(engine)
    replies, seconds = {}, {}
    with ThreadPoolExecutor(n) as pool:
        for name in ROUNDS:
            replies[name], seconds[name] = timed(lambda: list(pool.map(
                lambda p, slot: ep.complete(p, max_tokens=max_tokens, id_slot=slot), prompts, plan[name])))
    return ParallelRun(prompts, replies, plan, seconds)


def repeat(endpoint, prompt, times=2, chat=False, max_tokens=1):
    """The same prompt `times` times, one after another, on any endpoint: [Reply]. The first is cold
    only if nobody sent this prefix lately; its `cached_tokens` says. chat=True sends it as one user
    message (a provider's chat models), else as a plain completion."""
    send = (lambda: endpoint.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens)) if chat else \
        (lambda: endpoint.complete(prompt, max_tokens=max_tokens))
    return [send() for _ in range(times)]
