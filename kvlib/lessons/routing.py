"""Routing requests across replicas, each with its own prompt cache: why automatic caching is best effort.

A provider serves a model from many machines (replicas). Each keeps recent prompts' K and V in
its own memory, so a request can only hit on the machine it is sent to. Where a request goes
is the router's choice:

- "prefix hash": a hash of the prompt's first tokens picks the machine, so a prompt sent
  again lands where its blocks are. OpenAI routes this way.
- "prefix hash + overflow": the same, until one prefix sends more than `per_minute` requests
  a minute to its machine; the rest go to another machine, picked at random, which does not
  hold the prefix yet. OpenAI says requests beyond a rate "may overflow" to additional
  machines; how it picks them is not published, so the pick here is our guess.
- "random": the router ignores the prompt (as a load balancer that only spreads load does),
  so a resend lands on the machine that holds it one time in `replicas`.

Facts, from OpenAI's "Prompt caching" guide (developers.openai.com/docs/guides/prompt-caching,
read 1 December 2026): requests are routed "based on a hash of the initial prefix of the
prompt", typically its first 256 tokens; above about 15 requests per minute for one prefix
(and prompt_cache_key), some overflow to additional machines. Our prompts are a few dozen
tokens, so `hash_tokens` defaults to one 16-token block rather than 256.

A run is a pure function of the model, the requests, the router and its seed; it returns
named records (Routed, RoutingRun) for a notebook to print, plot and assert on.
"""

import random
from collections import deque
from dataclasses import dataclass

from ..model.measure import Fed, one_thread, random_ids
from ..model.models import KVLibError
from ..server.blocks import block_keys
from ..server.prompt_cache import ManualClock, PromptCache

OPENAI_OVERFLOW_PER_MINUTE = 15  # "approximately 15 requests per minute" per prefix (OpenAI's guide, above)
ROUTERS = ("prefix hash", "prefix hash + overflow", "random")


@dataclass(frozen=True)
class Routed:
    """One request as it was served: where it went and what its receipt says."""
    time: float         # seconds since the stream began
    prefix: str         # the first hex digits of the hash of its first tokens: what the router reads
    replica: int        # the machine that served it
    input_tokens: int
    cached_tokens: int
    repeat: bool        # had a request with the same first tokens been sent before (to any machine)?
    first_replica: int  # the machine that served the first request with these first tokens
    computed: int       # tokens the model was fed for it: its work, counted on the model (measure.Fed), not the receipt

    @property
    def hit(self):
        return self.cached_tokens > 0


@dataclass(frozen=True)
class RoutingRun:
    router: str
    replicas: int
    served: tuple       # (Routed, ...) in the order sent
    bytes_held: tuple   # per replica: bytes of K and V its cache holds at the end

    @property
    def repeats(self):
        return [s for s in self.served if s.repeat]

    @property
    def repeat_hit_rate(self):
        """Of the requests whose start had been sent before, the share that hit: all of them could have."""
        repeats = self.repeats
        return sum(s.hit for s in repeats) / len(repeats) if repeats else float("nan")


def prefix_hash(ids, hash_tokens):
    """A stable hash of the first `hash_tokens` ids (not Python's hash(), which changes between runs): the pool's
    own key of that prefix (blocks.block_keys), every tenant in one namespace, as the router reads no tenant."""
    return block_keys(ids, "default", [(0, min(hash_tokens, len(ids)))], shared=True)[0].hex()


def simulate(model, requests, replicas, router="prefix hash", hash_tokens=16, block_size=16,
             per_minute=OPENAI_OVERFLOW_PER_MINUTE, seed=0):
    """Send `requests` ([(seconds, prompt text or ids)], in time order) to `replicas` machines, each with
    its own PromptCache on one shared simulated clock; returns a RoutingRun. Every replica runs `model`, each
request's tokens fed counted on it (Routed.computed)."""
    if router not in ROUTERS:
        raise KVLibError(f"router must be one of {ROUTERS}, not {router!r}")
    if replicas < 1:
        raise KVLibError("replicas must be at least 1")
    if hash_tokens < 1 or per_minute < 1:
        raise KVLibError("hash_tokens and per_minute must be at least 1")
    clock, rng, fed = ManualClock(), random.Random(seed), Fed(model)
    caches = [PromptCache(fed, block_size=block_size, clock=clock) for _ in range(replicas)]
    recent = {}    # prefix -> times of its recent requests sent to its own machine (overflow only)
    first, served = {}, []  # prefix -> the machine its first request went to
    # prefills of a few dozen tokens: a second thread only waits (10x slower on a busy 2-core machine)
    with one_thread():
        for t, prompt in requests:
            if t < clock.now:
                raise KVLibError(f"requests must come in time order: one at {t} s follows one at {clock.now} s")
            clock.now = float(t)
            ids = model.check_ids(prompt).tolist()
            key = prefix_hash(ids, hash_tokens)
            home = int(key, 16) % replicas
            if router == "random":
                replica = rng.randrange(replicas)
            elif (router == "prefix hash + overflow" and replicas > 1
                  and _busy(recent.setdefault(key, deque()), t, per_minute)):
                replica = (home + 1 + rng.randrange(replicas - 1)) % replicas  # any machine but its own
            else:
                replica = home
                recent.setdefault(key, deque()).append(t)
            before = fed.total
            r = caches[replica].prefill(ids).receipt
            repeat = key in first
            first.setdefault(key, replica)
            served.append(Routed(t, key[:6], replica, r.input_tokens, r.cached_tokens, repeat, first[key],
                                 fed.total - before))
    for pc in caches:
        pc.expire()  # what each still holds at the end, past-TTL entries dropped
    return RoutingRun(router, replicas, tuple(served), tuple(pc.nbytes for pc in caches))


def _busy(times, now, per_minute):  # has this prefix's own machine taken per_minute of its requests in the last minute?
    while times and now - times[0] >= 60:
        times.popleft()
    return len(times) >= per_minute


def resend_pairs(model, prompts, tokens=40, seconds_between=10, seed=0):
    """The seed essay's test: `prompts` new prompts (random tokens, so no two share a start), each sent
    and at once (1 s later) sent again; a new prompt every `seconds_between` seconds. -> [(seconds, ids)]"""
    out = []
    for k in range(prompts):
        ids = random_ids(model, tokens, seed + k)
        out += [(k * seconds_between, ids), (k * seconds_between + 1, ids)]
    return out
