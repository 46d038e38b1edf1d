"""Serving a stream of requests on one model: static against continuous batching, and a shared
system prompt held once. Real forward passes on a paged cache (paged_cache.py), timed by the wall clock.

A server decodes many requests together, so each weight matrix read serves every row of the batch.
Static batching takes up to `max_batch` waiting requests and runs them until the last is done (a
request that finishes early leaves its slot idle); continuous batching (Yu et al., "Orca", OSDI 2022;
vLLM's scheduler) lets a waiting request join at the next step after one leaves. Both run
batching.step through its one loop (batching.steps), one forward call a step; only when waiting
requests may join differs (`Batch.static`). A joining request is prefilled (its first token) beside one
decode row for every running one, so every occupied slot makes one token a step. It joins while the
blocks for its prompt are free, nothing reserved for its answer; when a running request's next token
finds no free block, the most recently admitted is preempted and prefilled again later (what that
costs: `Served.preempted`, steps, `ServingRun.tokens_fed`). With `step_tokens`, a step feeds at most that
many tokens, decodes first: a long prompt is prefilled in chunks, in steps that decodes share.

Prefix caching (on by default, vLLM's automatic prefix caching): a prompt that starts as an earlier one
did (a system prompt, a conversation sent again) holds those full blocks from the pool's index and its
prefill computes only the rest (`Served.reused`); the answers are the same (greedy). Blocks the index
keeps count as free for admission: the pool evicts them when it needs their memory. A server's cache
outlives its requests: the run ends with the index holding what it kept (`blocks_cached`), every block
allocated then freed, kept, or (a leak) still in use.

The stream arrives at time 0 (a burst, as a benchmark replays one), so which request runs when depends
on the seed alone: time to first token and latency are counted in steps too (`steps_to_first_token`,
`steps_to_last_token`), which no clock changes. As in vLLM's benchmark (ignore_eos), each request makes
exactly its drawn answer length.
"""

import itertools
import time
from dataclasses import dataclass, field, replace

from .batching import Batch, Decoding, steps
from ..errors import KVLibError, check_count, is_count
from .sampling import Generation, Rules
from ..model.measure import check_repeats, one_thread, random_ids, request_lengths
from .paged_cache import PagedKVCache, blocks_for

POLICIES = ("static", "continuous")


def label(i):  # 0 -> "A", 25 -> "Z", 26 -> "AA": a request's name, short enough for a cell of the timeline
    name = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        name = chr(65 + r) + name
    return name


@dataclass
class Request:
    label: str
    prompt_ids: list
    max_new_tokens: int  # the answer's length: it stops after exactly this many tokens
    tenant: str = "default"  # prefix caching shares blocks only between requests of one tenant


@dataclass
class Served:  # one request's life in a run; times in seconds from the start (when every request arrived)
    request: Request
    slot: int = -1
    ids: list = field(default_factory=list)  # its answer
    reused: int = 0       # prompt tokens read from the pool's index (prefix caching), not computed, at its admission
    first: int = None     # the step that made its first token: its prefill's last
    last: int = None      # the step that made its last token
    preempted: int = 0    # times it was preempted (its blocks freed, its tokens computed again)
    fed: int = 0          # tokens fed for it, prompt and answer, recomputed ones again
    ttft: float = 0.0     # time to first token
    latency: float = 0.0  # time to its last token

    @property
    def steps_to_first_token(self):
        """Steps from the start to its first token, the step that made it included: its time to first token
        counted in steps, which depends on the stream and the policy alone, never on the machine's speed."""
        return self.first + 1

    @property
    def steps_to_last_token(self):  # its latency counted in steps, as steps_to_first_token counts its TTFT
        return self.last + 1


@dataclass
class Step:  # a preempted request's cell is the slot it held, at the step that sent it back (0 tokens fed)
    cells: list     # per slot: (request index, "prefill" | "decode" | "preempted", tokens fed), or None when idle
    seconds: float  # its forward call, with its sampling and bookkeeping
    blocks: int     # blocks in use at the end of the step
    cached: int = 0  # blocks the index keeps at the end of the step that no request holds

    @property
    def preempted(self):  # -> the requests preempted at this step (their blocks freed, to be recomputed)
        return [c[0] for c in self.cells if c and c[1] == "preempted"]


@dataclass
class ServingRun:
    policy: str
    max_batch: int
    block_size: int
    n_blocks: int
    prefix_caching: bool = True
    step_tokens: int = None                     # tokens a step feeds at most (None: every prompt whole)
    served: list = field(default_factory=list)  # [Served], in the stream's order
    steps: list = field(default_factory=list)   # [Step]
    blocks_allocated: int = 0                   # at the end, allocated == freed + cached + in use
    blocks_freed: int = 0
    blocks_in_use: int = 0                      # at the end: 0 when every request gave its blocks back
    blocks_cached: int = 0                      # kept by the index when the last request left, for the next ones

    @property
    def seconds(self):  # wall clock of the whole run: the calls follow one another with nothing between
        return sum(step.seconds for step in self.steps)

    @property
    def tokens(self):  # answer tokens made by all requests
        return sum(len(s.ids) for s in self.served)

    @property
    def tokens_fed(self):  # tokens the forward calls computed: every prompt past its cached prefix, recomputes too
        return sum(s.fed for s in self.served)

    @property
    def tokens_per_second(self):
        return self.tokens / self.seconds

    @property
    def mean_latency(self):
        return sum(s.latency for s in self.served) / len(self.served)

    @property
    def mean_ttft(self):
        return sum(s.ttft for s in self.served) / len(self.served)

    @property
    def mean_steps_to_first_token(self):  # mean_ttft counted in steps (Served.steps_to_first_token): no clock in it
        return sum(s.steps_to_first_token for s in self.served) / len(self.served)

    @property
    def mean_steps_to_last_token(self):  # mean_latency counted in steps
        return sum(s.steps_to_last_token for s in self.served) / len(self.served)

    @property
    def idle(self):  # the fraction of slot-steps that held no request (a preempted one's slot holds none)
        cells = [c for step in self.steps for c in step.cells]
        return sum(c is None or c[1] == "preempted" for c in cells) / len(cells)

    def clock(self):  # -> [seconds from the start to the end of each step]
        return list(itertools.accumulate(step.seconds for step in self.steps))

    def time_requests(self):  # each request's TTFT and latency, read off the clock of its steps
        at = self.clock()
        for s in self.served:
            s.ttft, s.latency = at[s.first], at[s.last]
        return self


def request_stream(model, n, seed=0, scale=0.1, max_len=None):
    """n requests with random prompt and answer lengths (measure.request_lengths: log-normal, times
    scale), each at most max_len tokens in all (default: the model's context); prompts are random
    token ids of the model's vocabulary (measure.random_ids), the same for the same seed."""
    if max_len is None:
        max_len = model.config.n_ctx
    if not model.fits(max_len):  # request_lengths checks the rest
        raise KVLibError(f"max_len {max_len} is past {model.name}'s context of {model.config.n_ctx}")
    lengths = request_lengths(n, seed, max_len, scale)
    return [Request(label(i), random_ids(model, p, seed=seed * 100_003 + i), a) for i, (p, a) in enumerate(lengths)]


def check_fits(model, prompt_len, max_new_tokens, who, fix):
    """A served answer is exactly max_new_tokens long (ignore_eos), so prompt and answer must fit the context."""
    if max_new_tokens < 1 or not model.fits(prompt_len + max_new_tokens):
        raise KVLibError(f"{who}{prompt_len} prompt tokens and {max_new_tokens} to answer must fit {model.name}'s "
                         f"context of {model.config.n_ctx}, answering at least 1{fix}")


def blocks_needed(request, block_size):  # blocks it holds at its end: the last token picked is never fed
    return blocks_for(len(request.prompt_ids) + request.max_new_tokens - 1, block_size)


def new_run(model, requests, policy="continuous", max_batch=4, block_size=16, n_blocks=None, prefix_caching=True,
            step_tokens=None):
    """A ServingRun not yet run, its arguments checked. n_blocks: the pool (default: enough for the max_batch
    largest requests at their ends, so slots, not blocks, are the limit and nobody is preempted). step_tokens:
    tokens a step feeds at most, at least max_batch (every running request's decode fits; None: no limit)."""
    if policy not in POLICIES:
        raise KVLibError(f"policy must be one of {POLICIES}, not {policy!r}")
    if not requests:
        raise KVLibError("serve takes at least one request: serving.request_stream makes a stream of them")
    check_count(max_batch, "max_batch (slots)")
    check_count(block_size, "block_size (tokens per block)")
    if step_tokens is not None and not (is_count(step_tokens) and step_tokens >= max_batch):
        raise KVLibError(f"step_tokens must be a whole number of at least max_batch ({max_batch}), so that every "
                         f"running request's decode fits a step, or None (no limit), not {step_tokens!r}")
    for r in requests:
        if isinstance(r.prompt_ids, str) or not is_count(r.max_new_tokens):
            raise KVLibError(f"request {r.label}: prompt_ids holds token ids (model.encode(text) gives them) and "
                             f"max_new_tokens a whole number, not {r.prompt_ids!r:.40}, {r.max_new_tokens!r}")
        check_fits(model, len(r.prompt_ids), r.max_new_tokens,
                   f"request {r.label}: ", " (request_stream's max_len keeps them inside)")
    need = [blocks_needed(r, block_size) for r in requests]
    n_blocks = sum(sorted(need)[-max_batch:]) if n_blocks is None else check_count(n_blocks, "n_blocks (or None)")
    if max(need) > n_blocks:  # alone in the pool, every request can finish: preemption never takes the last one
        raise KVLibError(f"request {requests[need.index(max(need))].label} needs {max(need)} blocks of {block_size} "
                         f"tokens, more than the pool's {n_blocks}: give a larger n_blocks (or None: room for the "
                         f"max_batch largest requests)")
    return ServingRun(policy, max_batch, block_size, n_blocks, bool(prefix_caching), step_tokens,
                      served=[Served(r) for r in requests])


def calls(model, run):
    """Run `run` (from new_run), one step at a time: a generator that yields its PagedKVCache after each step
    (one forward call), so two runs can take turns step by step (taking_turns) and a test can watch the pool.
    It observes batching.steps, the one loop: each step's time runs from its resumption to the end of its
    sampling and bookkeeping (time spent between a yield and the next resumption is not counted), and its
    Record says who ran in which slot."""
    batch = Batch(PagedKVCache(model.config.n_layer, run.n_blocks, run.block_size), max_batch=run.max_batch,
                  step_tokens=run.step_tokens, static=run.policy == "static")
    who = {}  # id(Decoding) -> its request's index
    for i, s in enumerate(run.served):  # greedy, exactly max_new_tokens (ignore_eos); the answer grows in s.ids
        r = s.request
        batch.waiting.append(Decoding(Generation(r.prompt_ids, s.ids), Rules(r.max_new_tokens, stop_at_eos=False),
                                      r.tenant, None if run.prefix_caching else []))
        who[id(batch.waiting[-1])] = i
    slots = [None] * run.max_batch  # the request in each slot
    model.synchronize()
    mark = time.perf_counter()
    for record in steps(model, batch):
        model.synchronize()
        seconds, k = time.perf_counter() - mark, len(run.steps)
        cells = [None] * run.max_batch
        for d in record.preempted:  # it leaves its slot; its answer so far stays, its tokens are computed again
            s = run.served[who[id(d)]]
            slots[s.slot], s.preempted, cells[s.slot] = None, s.preempted + 1, (who[id(d)], "preempted", 0)
        for d, n in record.rows:
            i = who[id(d)]
            s = run.served[i]
            if i not in slots:  # admitted this step: the lowest free slot
                s.slot, s.reused = slots.index(None), d.seq.reused
                slots[s.slot] = i
            s.fed += n
            cells[s.slot] = (i, "decode" if n == 1 and d.seq.length > len(d.gen.prompt_ids) else "prefill", n)
            if d.seq.length == len(d.gen.prompt_ids) + len(d.gen.ids) - 1:  # it read everything: it picked a token
                s.first = k if s.first is None else s.first
        for d in record.finished:  # it leaves its slot after the step
            s = run.served[who[id(d)]]
            s.last, slots[s.slot] = k, None
        run.steps.append(Step(cells, seconds, batch.cache.pool.in_use, batch.cache.pool.cached))
        yield batch.cache
        mark = time.perf_counter()
    pool = batch.cache.pool  # the index keeps its blocks: a server's cache outlives the requests that filled it
    run.blocks_allocated, run.blocks_freed = pool.allocated, pool.freed
    run.blocks_in_use, run.blocks_cached = pool.in_use, pool.cached
    run.time_requests()


def serve(model, requests, policy="continuous", max_batch=4, block_size=16, n_blocks=None, prefix_caching=True,
          step_tokens=None):
    """Serve `requests` (all arrived at time 0) greedily, static or continuous; -> a ServingRun.

    Each step records which request holds which slot, whether it was that request's prefill (a chunk of it, with
    step_tokens), a decode or its preemption, the tokens it fed, and the wall clock of its forward call (see new_run
    for n_blocks and step_tokens). With
    prefix_caching, each request's prefill reads its prompt's longest cached prefix (Served.reused)."""
    run = new_run(model, requests, policy, max_batch, block_size, n_blocks, prefix_caching, step_tokens)
    for _ in calls(model, run):
        pass
    return run


def fastest(runs):
    """Runs of one schedule (the same policy on the same requests) -> one run whose every step takes the fastest
    of its times across them. The schedule depends on the requests alone, so step k does the same work in every
    run; a busy machine only ever slows a step, so its fastest time is the least disturbed."""
    first = runs[0]
    if any([s.cells for s in r.steps] != [s.cells for s in first.steps] for r in runs):
        raise KVLibError("these runs did not run the same schedule: give runs of one policy on the same requests")
    fast = [replace(s, seconds=min(r.steps[k].seconds for r in runs)) for k, s in enumerate(first.steps)]
    return replace(first, steps=fast, served=[replace(s) for s in first.served]).time_requests()


def taking_turns(model, requests, settings, max_batch=4, block_size=16, n_blocks=None, repeats=3):
    """Runs of the same requests under several settings ({name: new_run's arguments, which override the ones given
    here}), measured together; -> {name: fastest(its runs)}.

    After a warm-up run of each, `repeats` rounds in which the runs take turns step by step, the one less far
    through its steps going next, so all spread over the same moments of a busy machine; then the fastest time
    of each step (fastest). All on one CPU thread (measure.one_thread): on a busy machine a call split over
    two threads waits for the slower one, and torch splits only the larger calls, so the batch's own rows would
    be what is slowed (measured here: a 4-row decode step 2.4 ms on one thread, 11 ms on two)."""
    check_repeats(repeats)
    runs, common = {name: [] for name in settings}, dict(max_batch=max_batch, block_size=block_size, n_blocks=n_blocks)
    settings = {name: {**common, **how} for name, how in settings.items()}
    with one_thread():
        total = {name: len(serve(model, requests, **how).steps) for name, how in settings.items()}
        for _ in range(repeats):
            live = {name: new_run(model, requests, **how) for name, how in settings.items()}
            turns, done = {name: calls(model, live[name]) for name in settings}, dict.fromkeys(settings, 0)
            while turns:
                name = min(turns, key=lambda name: done[name] / total[name])
                if next(turns[name], StopIteration) is StopIteration:
                    del turns[name]
                done[name] += 1
            for name in settings:
                runs[name].append(live[name])
    return {name: fastest(r) for name, r in runs.items()}


def side_by_side(model, requests, max_batch=4, block_size=16, n_blocks=None, repeats=3, prefix_caching=True):
    """Static and continuous batching on the same requests, taking turns (taking_turns); -> {policy: run}."""
    return taking_turns(model, requests, {p: dict(policy=p, prefix_caching=prefix_caching) for p in POLICIES},
                        max_batch, block_size, n_blocks, repeats)


CACHING = {"prefix caching": True, "no prefix caching": False}


def caching_side_by_side(model, requests, policy="continuous", max_batch=4, block_size=16, n_blocks=None, repeats=3):
    """The same requests served with and without prefix caching, taking turns (taking_turns); -> {"prefix
    caching": run, "no prefix caching": run}. With the index, a prompt whose next block another prompt is computing
    in the same step waits a step to read it (batching.schedule), so the schedules may differ by such waits."""
    return taking_turns(model, requests, {name: dict(policy=policy, prefix_caching=on) for name, on in CACHING.items()},
                        max_batch, block_size, n_blocks, repeats)


VERDICTS = ("nothing cached", "sooner", "about the same", "later")


def ttft_verdict(on, off, within=0.10, ms=2.0):
    """Each request's time to first token with the index (run `on`) against without it (run `off`, the same
    requests) -> {verdict: [labels]} for each of VERDICTS. A request that reused no token had nothing cached to
    read and is named apart; the others are "about the same" when their two times differ by at most `within`
    of the longer or `ms` milliseconds, whichever is more (a gap under a millisecond flips between runs of a
    busy machine), else sooner or later with the index."""
    verdict = {name: [] for name in VERDICTS}
    for s, t in zip(on.served, off.served):
        gap = t.ttft - s.ttft  # > 0: sooner with the index
        same = abs(gap) <= max(within * max(s.ttft, t.ttft), ms / 1e3)
        name = "nothing cached" if s.reused == 0 else "about the same" if same else "sooner" if gap > 0 else "later"
        verdict[name].append(s.request.label)
    return verdict
