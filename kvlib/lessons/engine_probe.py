"""Notebook 8's stream of users rerun on a real engine, llama.cpp's server, beside kvlib's server.

    with Engine(slots=2) as engine:                        # kvlib.server.llamacpp
        tokenizers_agree(engine, model, text)              # the engine's tokens are kvlib's
        replies = send_stream(engine, requests)            # serving.Requests, with and without the engine's cache
        runs = serving.caching_side_by_side(model, requests)
        print(stream_table(runs, replies))                 # each request's reused tokens and first token, both sides
        par = parallel_slots(engine, ids[:200], [ids[300:320], ids[400:420]])  # at once, a slot each
        print(par.table())
    repeat(connect(), long_text, chat=True)                # the same prompt twice on any endpoint

The requests send token ids, not text, so both sides count the same tokens: the engine serves the
same model in its 4-bit GGUF, with the same tokenizer (`tokenizers_agree` checks); kvlib's SmolLM2 is
that GGUF dequantized, or the full-precision weights when the hub answered.

What each side reuses, and at what grain:
- The engine: each slot keeps the tokens and K/V of the last prompt it served (and its answer). A new
  prompt reuses the longest common prefix with its slot, token by token (`timings.cache_n`), and
  computes the rest (`timings.prompt_n`), but always at least the last token, whose logits it needs.
  It compares with one earlier request only, the slot's last.
- kvlib's server (serving.serve with prefix_caching): full blocks of `block_size` tokens that end before
  the last token, found by hash in an index of every earlier request's blocks (blocks.py), so a hit is
  the longest cached prefix rounded down to a block.
- Time to first token (`Reply.ttft`) is the client's clock from sending the request to the first
  streamed token: the prefill plus HTTP. `timings.prompt_ms` is the server's own prefill time.

"No prefix caching" asks the engine not to reuse anything (`cache_prompt: false`): it computes every
token, whatever its slots hold. On x86, llama.cpp's only fast batched kernel for this GGUF's 4-bit Q4_1
blocks is its AMX one, which `make engine`'s portable build leaves out (see the README), so its prefill
is slower than kvlib's fp32 one on a laptop's CPU: compare each side with itself.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import KVLibError
from ..i18n import t
from ..model.measure import timed
from ..server.endpoint import Endpoint, connect
from ..server.serving import CACHING
from ..texttable import text_table


def tokenizers_agree(engine, model, text):
    """(kvlib's ids, the engine's ids) for `text`: the engine's own /tokenize against model.encode."""
    engine_ids = Endpoint(engine.url).request("POST", "/tokenize", {"content": text, "add_special": False})["tokens"]
    return model.encode(text), engine_ids


def erase_slots(engine):
    """Empty every slot of the engine (llama-server's /slots/N?action=erase): nothing left to reuse."""
    for slot in range(engine.slots):
        Endpoint(engine.url).request("POST", f"/slots/{slot}?action=erase", {})


def send_stream(engine, requests, slot=0):
    """serving.Requests sent to the engine one after another, all to slot `slot`, each answering exactly its
    max_new_tokens (ignore_eos, as serve does), first with the engine's cache and then without, each round
    from an emptied slot; -> {"prefix caching": [Reply], "no prefix caching": [Reply]} (serving.CACHING's names),
    in the order of the requests. With it, each request reuses what it shares with the one before, which the
    slot kept; without it (`cache_prompt: false`), every prompt is computed whole."""
    if not requests:
        raise KVLibError("send_stream takes at least one serving.Request")
    ep, replies = connect(engine), {}
    for name, on in CACHING.items():
        erase_slots(engine)
        replies[name] = [ep.complete(r.prompt_ids, max_tokens=r.max_new_tokens, id_slot=slot, cache_prompt=on,
                                     ignore_eos=True) for r in requests]
    return replies


def stream_table(runs, replies):
    """caching_side_by_side's runs and send_stream's replies of the same requests, a row per request: prompt
    tokens, each side's reused tokens, and each side's time to first token with and without its cache."""
    (kvlib, kvlib_off), (engine, engine_off) = ([runs[n].served for n in CACHING]), ([replies[n] for n in CACHING])
    ms = lambda seconds: f"{seconds * 1e3:,.0f} ms"
    return text_table(
        t("engine.stream_heads").split("|"),  # six heads, in kvlib's language
        [[s.request.label, f"{len(s.request.prompt_ids):,}", f"{s.reused:,}", f"{r.timings['cache_n']:,}",
          f"{ms(s.ttft)} / {ms(s_off.ttft)}", f"{ms(r.ttft)} / {ms(r_off.ttft)}"]
         for s, s_off, r, r_off in zip(kvlib, kvlib_off, engine, engine_off)])


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
        return text_table(t("engine.slots_heads").split("|"),
                          [[t(f"engine.{name}") if j == 0 else "", str(j + 1), str(slot), f"{r.timings['cache_n']:,}",
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
