"""Serving a stream on tiny: static against continuous batching on real forward passes, and a shared system
prompt. The schedules are checked against a simulation written here by hand, the answers against
transformers' own greedy decoding, the blocks against the allocator's counters and a formula worked out
here, and what continuous batching buys as counts no clock changes: forward calls, idle slot-steps, and the
steps each request waited for its first token and its last."""

import heapq
from collections import Counter
from dataclasses import replace

import pytest
import torch

from kvlib import KVLibError
from kvlib.lessons import memory, sharing
from kvlib.lessons.compression import heldout_ids
from kvlib.model import measure
from kvlib.model.measure import one_thread, random_ids
from kvlib.server import batching, serving
from conftest import hf_greedy, hf_model


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    """On one thread, as side_by_side measures: on this shared machine two threads waited on each other so long
    that a single serve of the stream took 36 s instead of half a second (nothing here depends on the count)."""
    with one_thread():
        yield


@pytest.fixture(scope="module")
def stream(tiny):
    return serving.request_stream(tiny, 16, seed=1)


@pytest.fixture(scope="module")
def runs(tiny, stream):
    return {policy: serving.serve(tiny, stream, policy, max_batch=4) for policy in serving.POLICIES}


def expected_schedule(answers, max_batch, policy):
    """{request: (slot, first step, last step)} by hand: a request holds its slot for exactly as many steps as
    its answer has tokens (its prefill makes the first). Static: batches of max_batch in order, the next batch
    when the longest of this one is done. Continuous: each request, in order, takes the slot that frees first
    (the lower slot on a tie), from the step after the one its last holder finished."""
    out = {}
    if policy == "static":
        start = 0
        for b in range(0, len(answers), max_batch):
            batch = answers[b:b + max_batch]
            out.update({b + k: (k, start, start + a - 1) for k, a in enumerate(batch)})
            start += max(batch)
        return out
    free = [(0, slot) for slot in range(max_batch)]  # (step it is free from, slot)
    for i, a in enumerate(answers):
        step, slot = heapq.heappop(free)
        out[i] = (slot, step, step + a - 1)
        heapq.heappush(free, (step + a, slot))
    return out


def check_cells(run):  # every step's cells say who was where: its prefill at its first step (its prompt past the
    for i, s in enumerate(run.served):  # cached prefix fed), a decode of one token at each step until its last
        held = [(k, step.cells[s.slot]) for k, step in enumerate(run.steps) if step.cells[s.slot] and
                step.cells[s.slot][0] == i]
        prefill = (i, "prefill", len(s.request.prompt_ids) - s.reused)
        assert held == [(k, prefill if k == s.first else (i, "decode", 1)) for k in range(s.first, s.last + 1)]
    assert all(len(step.cells) == run.max_batch for step in run.steps)


@pytest.mark.parametrize("policy", serving.POLICIES)
def test_each_policy_runs_the_schedule_worked_out_by_hand(stream, runs, policy):
    run = runs[policy]
    plan = expected_schedule([r.max_new_tokens for r in stream], 4, policy)
    assert {i: (s.slot, s.first, s.last) for i, s in enumerate(run.served)} == plan
    assert len(run.steps) == max(last for _, _, last in plan.values()) + 1
    check_cells(run)
    assert [len(s.ids) for s in run.served] == [r.max_new_tokens for r in stream]  # end-of-text does not stop one
    assert run.blocks_allocated == run.blocks_freed + run.blocks_cached > 0 and run.blocks_in_use == 0
    assert all(step.blocks <= run.n_blocks for step in run.steps)
    assert [(s.steps_to_first_token, s.steps_to_last_token) for s in run.served] == \
           [(plan[i][1] + 1, plan[i][2] + 1) for i in range(len(stream))]  # the step that made it counts
    assert [s.first for s in run.served] == sorted(s.first for s in run.served)  # first come, first served


def test_every_answer_is_the_one_the_prompt_gets_alone(hf_tiny, stream, runs):
    assert runs["static"].served[0].ids == runs["continuous"].served[0].ids
    late = max(range(len(stream)), key=lambda i: runs["continuous"].served[i].first)  # joined a running batch last
    longest = max(range(len(stream)), key=lambda i: len(stream[i].prompt_ids))
    for i in (0, late, longest):
        alone = hf_greedy(hf_tiny[0], stream[i].prompt_ids, stream[i].max_new_tokens)  # transformers, one prompt
        assert runs["continuous"].served[i].ids == runs["static"].served[i].ids == alone, stream[i].label
    for i in range(len(stream)):  # and the two policies agree on every request
        assert runs["continuous"].served[i].ids == runs["static"].served[i].ids


def test_continuous_batching_beats_static_in_steps_idle_slots_and_steps_waited(stream, runs):
    """What the lesson claims, in counts the seeded stream alone decides, each worked out from the hand plans:
    one forward call a step; every prompt is fed once and every answer token but the last once (no prefix is
    shared, no request preempted), whatever the policy; a request holds its slot for exactly its answer's length
    in steps, so the rest of the slot-steps are idle. Seed 1 is a middling stream: static takes 126 steps
    against continuous's 80 (1.58x), with 42% of its slot-steps idle against 9%; a request waits 55 steps for
    its first token on average against 26.6, and 72.1 for its last against 43.8."""
    answers = [r.max_new_tokens for r in stream]
    for policy, run in runs.items():
        plan = expected_schedule(answers, 4, policy)
        assert len(run.steps) == max(last for _, _, last in plan.values()) + 1, policy
        assert run.tokens_fed == sum(len(r.prompt_ids) + r.max_new_tokens - 1 for r in stream)
        assert sum(c is None for step in run.steps for c in step.cells) == 4 * len(run.steps) - sum(answers)
        assert run.idle == (4 * len(run.steps) - sum(answers)) / (4 * len(run.steps))
        assert run.mean_steps_to_first_token == sum(first + 1 for _, first, _ in plan.values()) / len(stream)
        assert run.mean_steps_to_last_token == sum(last + 1 for _, _, last in plan.values()) / len(stream)
    static, cont = runs["static"], runs["continuous"]
    assert static.tokens == cont.tokens == sum(answers)
    assert len(static.steps) > 1.4 * len(cont.steps) and static.idle > 2 * cont.idle
    assert cont.mean_steps_to_first_token < 0.6 * static.mean_steps_to_first_token
    assert cont.mean_steps_to_last_token < 0.7 * static.mean_steps_to_last_token


def test_side_by_side_times_the_schedule_serve_runs(tiny, stream, runs):
    """The two policies measured taking turns: each comes back as one run of the schedule serve runs (its
    fastest time of each call kept), its requests timed off those calls and its blocks all given back."""
    measured = serving.side_by_side(tiny, stream, max_batch=4, repeats=2)
    assert measured.keys() == runs.keys()
    for policy, run in measured.items():
        assert [step.cells for step in run.steps] == [step.cells for step in runs[policy].steps]
        assert [(s.ids, s.first, s.last) for s in run.served] == [(s.ids, s.first, s.last) for s in runs[policy].served]
        # the requests are timed off this run's own steps (the fastest of each): A's first token came with the
        # first step, and the last request's last token with the end of the run
        assert run.served[0].ttft == run.steps[0].seconds
        assert max(s.latency for s in run.served) == pytest.approx(run.seconds)
        assert run.blocks_allocated == run.blocks_freed + run.blocks_cached and run.blocks_in_use == 0


def test_fastest_keeps_the_least_disturbed_time_of_each_step(tiny, stream):
    """Three runs of one schedule given known step times: across them each step took 1, 2 and 3 seconds, in an
    order that turns with the step, so no run holds the least of every step; fastest keeps 1 for each."""
    run = serving.serve(tiny, stream[:6], "continuous", max_batch=2)

    def given(r):  # run r: its k-th step took 1 + (k + r) % 3 seconds
        steps = [replace(step, seconds=1.0 + (k + r) % 3) for k, step in enumerate(run.steps)]
        return replace(run, steps=steps, served=[replace(s) for s in run.served]).time_requests()

    best = serving.fastest([given(r) for r in range(3)])
    assert [step.seconds for step in best.steps] == [1.0] * len(run.steps) and best.seconds == len(run.steps)
    # every step took 1 s: a request's first and last token come as many seconds in as steps were made by then
    assert [(s.ttft, s.latency) for s in best.served] == [(s.first + 1, s.last + 1) for s in run.served]
    with pytest.raises(KVLibError, match="same schedule"):
        serving.fastest([run, serving.serve(tiny, stream[:6], "static", max_batch=2)])


def check_blocks(cache):
    """What must hold after every step: no block leaks (allocated == freed + cached + in use), and every block a live
    sequence's table names is counted held as often as tables name it, none of them free."""
    pool = cache.pool
    assert pool.allocated == pool.freed + pool.cached + pool.in_use
    holders = Counter(b for q in cache.sequences.values() for b in q.blocks)
    assert pool.refs == [holders[b] for b in range(pool.n_blocks)] and not set(pool.free) & set(holders)


def test_a_pool_too_small_preempts_the_newest_and_every_answer_is_still_transformers(tiny, hf_tiny):
    """Six requests after one 20-token system prompt (2 full blocks of 8, shared through the index), answering 12 to
    20 tokens on 4 slots, in a pool of 8 blocks: fewer than the running requests come to hold, since a request joins
    on its prompt's blocks alone. When a running request's next token finds no free block, the most recently
    admitted is preempted (the largest sequence id of those live before the step, as ids are handed out in order):
    its blocks go free, the shared ones staying with their other holders, and it prefills again later, prompt and
    answer so far, reading the system prompt from the index. After every step no block leaked and none a live
    sequence holds is free; every answer is transformers' greedy one; the preemptions cost steps and tokens fed
    against a pool large enough for all, counted. Each step records whom it preempted (Step.preempted) exactly when
    their Served.preempted went up, in the cell of the slot each held the step before, and the tokens its cells say
    were fed add up to each request's ledger (Served.fed)."""
    play = heldout_ids(tiny, 600)
    requests = [serving.Request(serving.label(i), play[:20] + play[100 + 37 * i:103 + 39 * i], 12 + i % 3 * 4)
                for i in range(6)]
    run = serving.new_run(tiny, requests, "continuous", max_batch=4, block_size=8, n_blocks=8)
    before, preemptions = set(), 0
    counts = [0] * len(requests)  # each request's Served.preempted before the step
    for cache in serving.calls(tiny, run):
        check_blocks(cache)
        new = sum(s.preempted for s in run.served) - preemptions
        if new:  # the newest ones went, and no one joined in their place
            assert set(sorted(before)[-new:]) <= before - set(cache.sequences) and set(cache.sequences) <= before
        went = [i for i, s in enumerate(run.served) if s.preempted > counts[i]]
        assert sorted(run.steps[-1].preempted) == went and len(went) == new
        for i in went:  # marked in the slot it held the step before, feeding nothing
            slot = next(j for j, c in enumerate(run.steps[-2].cells) if c and c[0] == i)
            assert run.steps[-1].cells[slot] == (i, "preempted", 0)
        before, preemptions, counts = set(cache.sequences), preemptions + new, [s.preempted for s in run.served]
    preempted = [i for i, s in enumerate(run.served) if s.preempted]
    assert preempted and preemptions >= 2
    for i in preempted:  # resumed: prefilled again after it lost its blocks, then decoded to its last token
        prefills = [k for k, step in enumerate(run.steps) if any(c and c[:2] == (i, "prefill") for c in step.cells)]
        assert len(prefills) == 1 + run.served[i].preempted and run.served[i].last > prefills[-1]
    for i, s in enumerate(run.served):
        assert s.fed == sum(c[2] for step in run.steps for c in step.cells if c and c[0] == i)
    for r, s in zip(requests, run.served):
        assert s.ids == hf_greedy(hf_tiny[0], r.prompt_ids, r.max_new_tokens, stop_at_eos=False), r.label
    assert run.blocks_in_use == 0 and run.blocks_allocated == run.blocks_freed + run.blocks_cached
    roomy = serving.serve(tiny, requests, "continuous", max_batch=4, block_size=8)  # room for the 4 largest
    assert [s.preempted for s in roomy.served] == [0] * 6 and [s.ids for s in roomy.served] == [s.ids for s in run.served]
    assert len(run.steps) > len(roomy.steps) and run.tokens_fed > roomy.tokens_fed


def test_a_long_prompt_is_prefilled_in_chunks_while_the_others_decode(tiny, hf_tiny):
    """Three short requests (4 tokens, answering 12) and a 100-token one, 4 slots, at most 16 tokens a step, decodes
    first. Worked by hand: step 0 prefills the three short prompts (12 tokens) and D's first 4; from step 1 the three
    decode (3 tokens) and D's prefill goes on 13 tokens a step: 4 + 7 x 13 = 95, its last 5 at step 8, which picks
    its first token. So in steps 1-8 decodes and D's prefill share the forward call, and D's answer is the one it
    gets unchunked, and transformers'."""
    play = heldout_ids(tiny, 600)
    requests = [serving.Request(label, play[10 * k:10 * k + 4], 12) for k, label in enumerate("ABC")]
    requests.append(serving.Request("D", play[200:300], 6))
    run = serving.new_run(tiny, requests, "continuous", max_batch=4, step_tokens=16)
    fed = []  # D's tokens fed at each step
    for _ in serving.calls(tiny, run):
        fed.append(run.served[3].fed - sum(fed))
    assert fed[:9] == [4] + [13] * 7 + [5] and fed[9:] == [1] * 5 and run.served[3].first == 8
    chunks = [c[2] for step in run.steps for c in step.cells if c and c[:2] == (3, "prefill")]  # the cells say it too
    assert chunks == fed[:9] and sum(chunks) == len(requests[3].prompt_ids) - run.served[3].reused == 100
    assert max(sum(c[2] for c in step.cells if c) for step in run.steps) == 16  # the budget, filled
    shared = [k for k, step in enumerate(run.steps) if step.cells[3][:2] == (3, "prefill")
              and any(c and c[1] == "decode" for c in step.cells)]
    assert shared == list(range(1, 9))
    whole = serving.serve(tiny, requests, "continuous", max_batch=4)  # no budget: D's prompt in one step
    assert whole.served[3].first == 0
    assert run.served[3].ids == whole.served[3].ids == hf_greedy(hf_tiny[0], requests[3].prompt_ids, 6, stop_at_eos=False)
    assert [s.ids for s in run.served] == [s.ids for s in whole.served]
    with pytest.raises(KVLibError, match="step_tokens must be a whole number of at least max_batch"):
        serving.serve(tiny, requests, max_batch=4, step_tokens=3)


@pytest.mark.parametrize("policy", serving.POLICIES)
def test_a_full_pool_keeps_first_come_first_served(tiny, policy):
    """Two large requests, then two small ones, in a pool of 5 blocks of 8 tokens. A request joins when the blocks
    its prompt fills are free: A's 20 tokens take 3 blocks at step 0; B, next in line, needs 3 of the 2 left and
    waits, and C and D, whose 3 tokens would fit in 1, wait behind it. A decodes in steps 1-5, its 25th token (fed
    at step 5) taking a 4th block, and leaves at the end of step 5; at step 6 B, C and D join together (3 + 1 + 1
    = 5) and are prefilled into slots 0-2; C and D end at step 7, B at step 9. Nobody is preempted: B never had
    blocks while A ran. Static batching runs the same steps: every batch here starts on an empty one."""
    lengths = {"A": (20, 6), "B": (20, 4), "C": (3, 2), "D": (3, 2)}
    requests = [serving.Request(name, random_ids(tiny, prompt, seed=k), answer)
                for k, (name, (prompt, answer)) in enumerate(lengths.items())]
    run = serving.serve(tiny, requests, policy, max_batch=4, block_size=8, n_blocks=5)
    assert {s.request.label: (s.slot, s.first, s.last) for s in run.served} == \
           {"A": (0, 0, 5), "B": (0, 6, 9), "C": (1, 6, 7), "D": (2, 6, 7)}
    A, B, C, D = range(4)
    idle = [None] * 3
    assert [step.cells for step in run.steps] == [[(A, "prefill", 20)] + idle] + [[(A, "decode", 1)] + idle] * 5 + [
        [(B, "prefill", 20), (C, "prefill", 3), (D, "prefill", 3), None],
        [(B, "decode", 1), (C, "decode", 1), (D, "decode", 1), None], [(B, "decode", 1)] + idle, [(B, "decode", 1)] + idle]
    # blocks in use after each step: A's 20..24 tokens fill 3, its 25th a 4th, given back as it ends at step 5;
    # then B's 20 tokens 3, C's and D's 3 one each; C and D leave after step 7 (4 tokens, still 1 block each)
    assert [step.blocks for step in run.steps] == [3, 3, 3, 3, 3, 0, 5, 3, 3, 0]
    # prefix caching kept A's 2 full prompt blocks after it left, and they counted as free at step 6: C and D
    # took their memory (evicted); at the end the index keeps B's 2, for requests to come
    assert run.blocks_allocated == 4 + 3 + 1 + 1 and (run.blocks_freed, run.blocks_cached) == (9 - 2, 2)
    assert run.blocks_in_use == 0 and [s.reused for s in run.served] == [0] * 4
    assert [s.preempted for s in run.served] == [0] * 4


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_users_sharing_a_system_prompt_reuse_its_blocks_and_answer_as_alone(request, name):
    """Eight users after one 64-token system prompt (4 full blocks of 16), the sixth asking what the second did,
    served continuously with prefix caching. Every request after the first reads at least the system prompt's
    64 tokens, the repeat 80 (the second's fifth block too); the answers are those without prefix caching, and
    transformers' greedy answers to each prompt alone. After every forward call the pool's counters add up:
    allocated == freed + cached (kept by the index, no holder) + in use, and in use is exactly the blocks the
    live requests' tables name. At the end no request holds a block, and the index keeps one block per distinct
    full-block prefix of the prompts (the pool is large enough that none was evicted): the server keeps them for
    the requests to come."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    play = heldout_ids(model, 600)  # text, not random ids: tiny answers random ids alike, whatever they are
    system = play[:64]
    own = [play[a:a + n] for a, n in ((100, 3), (200, 20), (300, 1), (400, 40), (500, 7))]
    own += [own[1], play[150:166], play[250:255]]
    requests = [serving.Request(serving.label(i), system + u, 6) for i, u in enumerate(own)]
    room = sum(serving.blocks_needed(r, 16) for r in requests)  # every request's blocks at once: nothing evicted
    run = serving.new_run(model, requests, "continuous", max_batch=4, block_size=16, n_blocks=room)
    for cache in serving.calls(model, run):
        pool = cache.pool
        assert pool.allocated == pool.freed + pool.cached + pool.in_use
        assert pool.in_use == len({b for q in cache.sequences.values() for b in q.blocks})
    assert [s.reused for s in run.served] == [0, 64, 64, 64, 64, 80, 64, 64]
    off = serving.serve(model, requests, "continuous", max_batch=4, block_size=16, n_blocks=room, prefix_caching=False)
    assert [s.reused for s in off.served] == [0] * 8 and off.blocks_cached == 0
    assert [s.ids for s in run.served] == [s.ids for s in off.served]
    for r, s in zip(requests, run.served):
        assert s.ids == hf_greedy(hf, r.prompt_ids, 6, stop_at_eos=False), r.label
    # the system prompt's 4 blocks, B's 5th (F's too), D's 5th and 6th: 7, kept for the next requests (G's 80
    # tokens fill a 5th that ends at its last token, which is never filed: blocks.prompt_spans)
    prefixes = {tuple(r.prompt_ids[:end]) for r in requests for end in range(16, len(r.prompt_ids), 16)}
    assert run.blocks_cached == len(prefixes) == 7 and run.blocks_in_use == 0 and not [e for e in pool.events if e.kind == "evict"]
    assert run.blocks_allocated == run.blocks_freed + run.blocks_cached
    assert off.blocks_allocated == off.blocks_freed and off.blocks_in_use == 0
    # the system prompt's blocks held once: fewer taken, fewer held at once
    assert run.blocks_allocated < off.blocks_allocated
    assert max(step.blocks for step in run.steps) < max(step.blocks for step in off.steps)


def test_request_stream_is_seeded_and_scaled(tiny):
    a = serving.request_stream(tiny, 40, seed=3, max_len=64)
    assert a == serving.request_stream(tiny, 40, seed=3, max_len=64) != serving.request_stream(tiny, 40, seed=4, max_len=64)
    assert [r.label for r in a[:3]] + [serving.label(25), serving.label(26), serving.label(27)] == \
           ["A", "B", "C", "Z", "AA", "AB"]
    assert all(1 <= len(r.prompt_ids) and 1 <= r.max_new_tokens and len(r.prompt_ids) + r.max_new_tokens <= 64
               for r in a)
    assert all(0 <= t < tiny.config.vocab_size for r in a for t in r.prompt_ids)
    assert measure.request_lengths(50, seed=2, scale=1.0) == measure.request_lengths(50, seed=2)  # the default stays
    small = measure.request_lengths(2001, seed=0, scale=0.1)
    prompts, answers = sorted(p for p, _ in small), sorted(o for _, o in small)
    assert 12 <= prompts[1000] <= 18 and 7 <= answers[1000] <= 11  # medians ~15 and ~9 (e^5 and e^4.5, over 10)


def test_bad_requests_are_refused_with_a_hint(tiny, stream):
    with pytest.raises(KVLibError, match="policy must be one of"):
        serving.serve(tiny, stream, "greedy")
    with pytest.raises(KVLibError, match="at least one request: serving.request_stream"):
        serving.serve(tiny, [])
    too_long = serving.Request("Z", [1] * 500, 20)
    with pytest.raises(KVLibError, match="context of 512"):
        serving.serve(tiny, [too_long])
    with pytest.raises(KVLibError, match="give a larger n_blocks"):
        serving.serve(tiny, stream, block_size=4, n_blocks=2)
    for n_blocks in (0, 100.0, "64"):  # 0 is no pool, not the default one
        with pytest.raises(KVLibError, match=r"n_blocks \(or None\) must be a whole number"):
            serving.serve(tiny, stream, n_blocks=n_blocks)
    for block_size in (0, -1, 2.5):
        with pytest.raises(KVLibError, match="block_size .* must be a whole number"):
            serving.serve(tiny, stream, block_size=block_size)
    with pytest.raises(KVLibError, match="max_batch .* not 2.5"):
        serving.serve(tiny, stream, max_batch=2.5)
    text = "To be, or not to be, that is the question: " * 10  # 450 characters, far fewer tokens
    with pytest.raises(KVLibError, match="model.encode"):
        serving.serve(tiny, [serving.Request("T", text, 5)])
    with pytest.raises(KVLibError, match="repeats .* at least 1, not 0"):
        serving.side_by_side(tiny, stream, repeats=0)
    for n, max_len in ((0, None), (3, 0), (3, 10**6)):
        with pytest.raises(KVLibError, match="n \\(requests\\)|max_len"):
            serving.request_stream(tiny, n, max_len=max_len)


# a system prompt of 37 tokens in blocks of 8: 4 full blocks shared, the 5th partly filled (5 tokens), so every
# user copies it before writing (copy-on-write); users of 3, 12, 1, 20 and 7 tokens of their own, 6 tokens answered
SYSTEM, USERS, NEW = 37, [3, 12, 1, 20, 7], 6


@pytest.mark.parametrize("system, block_size, prompts, end", [
    # (blocks in use once the prompts are in, then at the end), without sharing and with it, worked out by hand:
    # users hold 40, 49, 38, 57, 44 tokens, then 45, 54, 43, 62, 49
    (SYSTEM, 8, (5 + 7 + 5 + 8 + 6, 5 + (1 + 3 + 1 + 4 + 2)), (6 + 7 + 6 + 8 + 7, 5 + (2 + 3 + 2 + 4 + 3))),
    # a system prompt of 32 tokens fills its 4 blocks: nobody copies; users hold 35, 44, 33, 52, 39, then 5 more
    (32, 8, (5 + 6 + 5 + 7 + 5, 4 + (1 + 2 + 1 + 3 + 1)), (5 + 7 + 5 + 8 + 6, 4 + (1 + 3 + 1 + 4 + 2))),
    # a system prompt shorter than a block: nothing to share, and the system's own block costs one more;
    # users hold 8, 17, 6, 25, 12 tokens, then 13, 22, 11, 30, 17
    (5, 16, (1 + 2 + 1 + 2 + 1, 1 + 7), (1 + 2 + 1 + 2 + 2, 1 + 8)),
])
def test_a_shared_system_prompt_holds_its_blocks_once(tiny, hf_tiny, system, block_size, prompts, end):
    system_ids = random_ids(tiny, system, seed=11)
    users = [random_ids(tiny, u, seed=20 + k) for k, u in enumerate(USERS)]
    per_token = 2 * tiny.config.n_layer * tiny.config.n_kv_head * tiny.config.head_dim * 4  # float32 K and V
    alone = [hf_greedy(hf_tiny[0], system_ids + u, NEW) for u in users[:2]]
    for share, at_prompts, at_end in zip((False, True), prompts, end):
        r = sharing.serve_shared_prefix(tiny, system_ids, users, NEW, block_size=block_size, share=share)
        assert r.blocks == {"prompts": at_prompts, "end": at_end}
        assert (r.formula("prompts"), r.formula("end")) == (at_prompts, at_end)
        assert r.nbytes("end") == at_end * block_size * per_token == at_end * block_size * \
            memory.model_kv_bytes_per_token(tiny.config)
        assert r.blocks_allocated == r.blocks_freed == at_end  # no block went back before the end, then every one did
        assert r.answers[:2] == alone  # a user on shared blocks answers as the whole prompt does alone


def test_shared_prefix_refuses_what_does_not_fit(tiny):
    with pytest.raises(KVLibError, match="list of users .*, at least one"):
        sharing.serve_shared_prefix(tiny, "You are Puck.", [])
    for one_user in ("Hello there", [5, 6, 7], torch.tensor([5, 6, 7])):  # not 11 users of a character, or 3 of a token
        with pytest.raises(KVLibError, match="list of users .*, not one prompt"):
            sharing.serve_shared_prefix(tiny, "You are Puck.", one_user)
    users = (u for u in ["What is love?", "Who art thou?"])  # any iterable of users, a generator too
    assert len(sharing.serve_shared_prefix(tiny, "You are Puck.", users, max_new_tokens=2).answers) == 2
    with pytest.raises(KVLibError, match="block_size .* must be a whole number"):
        sharing.shared_blocks(100, [120] * 4, 0)
    with pytest.raises(KVLibError, match="context of 512"):
        sharing.serve_shared_prefix(tiny, [1] * 500, [[2] * 10], max_new_tokens=5)


def test_batch_rates_times_each_decode_step_then_its_bare_matmuls(tiny, monkeypatch):
    """Notebook 8's table: each decode step of b rows, then the step's bare weight matmuls on b rows, in turn (both
    meet the machine in the same state), every size in every round after a warm-up round; the fastest of each kept,
    so the share of a step the matmuls take is read off the same two numbers. The times are given here (no clock):
    what is timed when, and which time counts, is pinned; which is faster is the machine's to say."""
    from kvlib.lessons import speed

    given = {"batch_rates": iter([0.001] * 4 + [0.010, 0.008, 0.020, 0.030] + [0.009, 0.012, 0.016, 0.040]),
             "matmul_pass": iter([0.0001] * 4 + [0.004, 0.005, 0.016, 0.012] + [0.003, 0.006, 0.013, 0.020])}
    timed, rows = [], []  # the warm-up round's times are the fastest of all: they must not count

    def clock(fn, device):
        kind = fn.__qualname__.split(".")[0]  # the decode step (a lambda in batch_rates) or matmul_pass's step
        timed.append(kind)
        return fn(), next(given[kind])

    real = batching.step
    monkeypatch.setattr(speed, "timed", clock)
    monkeypatch.setattr(batching, "step", lambda model, batch: rows.append(len(real(model, batch).rows)))
    r = speed.batch_rates(tiny, (1, 4), prompt_len=4, new_tokens=3, repeats=2, bare=True)
    # 3 rounds; per size its prefills (one step, untimed), then 2 decode steps of every row, each step's matmuls after it
    assert timed == ["batch_rates", "matmul_pass"] * 2 * 2 * 3
    assert rows == ([1] + [1] * 2 + [4] + [4] * 2) * 3
    assert r["tokens_per_second"] == {1: pytest.approx(1 / 0.008), 4: pytest.approx(4 / 0.016)}
    assert r["bare_tokens_per_second"] == {1: pytest.approx(1 / 0.003), 4: pytest.approx(4 / 0.012)}
    assert r["matmul_share"] == {1: pytest.approx(0.003 / 0.008), 4: pytest.approx(0.012 / 0.016)}
    assert r["matmul_share"][4] == pytest.approx(r["tokens_per_second"][4] / r["bare_tokens_per_second"][4])
    assert r["over_batch_1"] == {1: 1, 4: pytest.approx(2)}
    monkeypatch.undo()
    plain = speed.batch_rates(tiny, (1,), prompt_len=4, new_tokens=3, repeats=1)
    assert "bare_tokens_per_second" not in plain and "matmul_share" not in plain
    with pytest.raises(KVLibError, match="at least 2 new tokens"):
        speed.batch_rates(tiny, (1,), new_tokens=1)


def test_the_ttft_verdict_names_a_gap_within_its_tolerance_about_the_same():
    """Notebook 8's user-by-user verdict, on given times (no clock): a request that reused nothing is named apart
    whatever its times; a gap within 10 % of the longer time or 2 ms, whichever is more, is about the same."""
    def run(rows):  # rows [(label, reused, ttft ms)] -> a run that served them
        return serving.ServingRun("continuous", 4, 16, 64, served=[
            serving.Served(serving.Request(label, [1], 1), reused=reused, ttft=ms / 1e3) for label, reused, ms in rows])
    on = run([("A", 0, 14), ("B", 112, 19), ("C", 112, 23), ("D", 112, 50), ("E", 112, 60), ("F", 112, 120), ("G", 112, 100)])
    off = run([("A", 0, 15), ("B", 0, 28), ("C", 0, 22), ("D", 0, 54.9), ("E", 0, 55), ("F", 0, 100), ("G", 0, 89.9)])
    # A: nothing cached (1 ms apart); B: 9 ms sooner; C: 1 ms, under 2 ms; D: 4.9 of 54.9 ms, under 10 %;
    # E: 5 of 60 ms, under 10 %; F: 20 ms later; G: 10.1 ms of 100, over 10 %: later
    assert serving.ttft_verdict(on, off) == {"nothing cached": ["A"], "sooner": ["B"], "about the same": ["C", "D", "E"],
                                             "later": ["F", "G"]}
    assert serving.ttft_verdict(on, off, within=0, ms=0)["about the same"] == []  # no tolerance: every gap decides
    assert serving.ttft_verdict(on, off, within=0.5)["about the same"] == ["B", "C", "D", "E", "F", "G"]
