"""The provider-style prompt cache: exact logits, exact receipts, TTL, LRU, budget, tenants, threads."""

import random
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvlib

from bounds import assert_logits_close
from conftest import hf_greedy


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def ids(n, seed):
    return torch.randint(0, 4096, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def stored_blocks(pc):  # a copy of every stored block's K and V, by key
    return {key: [t.clone() for t in b.keys + b.values] for key, b in pc.blocks.items()}


def assert_blocks_unchanged(pc, before):  # every block copied in `before` is still stored, bit for bit as it was
    for key, tensors in before.items():
        assert key in pc.blocks
        assert all(torch.equal(a, b) for a, b in zip(pc.blocks[key].keys + pc.blocks[key].values, tensors))


def held_bytes(pc):
    """Bytes of the storages the stored blocks keep alive, each counted once, however many blocks view it."""
    runs = {id(b.run): b.run for b in pc.blocks.values()}
    return sum(t.untyped_storage().nbytes() for run in runs.values() for t in run.keys + run.values)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.integers(1, 70), first=st.integers(0, 30), second=st.integers(1, 30), seed=st.integers(0, 10**6))
def test_a_hit_gives_the_logits_of_an_uncached_pass(tiny, prefix, first, second, seed):
    pc = kvlib.PromptCache(tiny, block_size=8)
    shared = ids(prefix, seed)
    pc.prefill(shared + ids(first, seed + 1) or shared)
    prompt = shared + ids(second, seed + 2)
    res = pc.prefill(prompt)
    assert_logits_close(res.logits, tiny.forward(prompt)[-1], tiny)
    assert len(res.cache) == len(prompt)
    # the returned cache decodes on exactly like a fresh one
    nxt = int(res.logits.argmax())
    assert_logits_close(tiny.forward([nxt], cache=res.cache)[-1], tiny.forward(prompt + [nxt])[-1], tiny)


def test_receipts_count_exactly(tiny):
    pc = kvlib.PromptCache(tiny, block_size=16)
    system = ids(100, 1)
    r1 = pc.prefill(system + ids(20, 2)).receipt
    assert (r1.input_tokens, r1.cached_tokens, r1.written_tokens) == (120, 0, 112)  # 7 full blocks of the first 119
    r2 = pc.prefill(system + ids(30, 3)).receipt
    assert (r2.input_tokens, r2.cached_tokens) == (130, 96)  # 6 blocks shared, the 7th differs
    assert r2.written_tokens == 16 * (129 // 16) - 96
    assert r2.blocks[:6] == ["hit"] * 6 and set(r2.blocks[6:]) == {"written"}
    r3 = pc.prefill(system + ids(30, 3)).receipt  # the same prompt again: all but the last token
    assert (r3.cached_tokens, r3.written_tokens) == (128, 0)
    r4 = pc.prefill(ids(1, 9) + system).receipt  # one token in front breaks every block
    assert r4.cached_tokens == 0


def test_ttl_expires_entries_after_their_last_use(tiny):
    clock = Clock()
    pc = kvlib.PromptCache(tiny, block_size=8, ttl_seconds=300, clock=clock)
    prompt = ids(40, 5)
    pc.prefill(prompt)
    clock.now = 299
    assert pc.prefill(prompt).receipt.cached_tokens == 32  # a hit refreshes the entries
    clock.now = 299 + 300
    assert pc.prefill(prompt).receipt.cached_tokens == 32
    clock.now = 599 + 301
    held = pc.nbytes
    assert held == 32 * memory_bytes(tiny) and pc.nbytes == held  # reading the bytes expires nothing
    assert pc.expire() == 4 and pc.nbytes == 0  # expiring is asked for: 4 blocks of 8 past their TTL
    assert pc.prefill(prompt).receipt.cached_tokens == 0
    assert any(e.kind == "expire" for e in pc.events)


def test_lru_evicts_the_least_recently_used_under_the_budget(tiny):
    clock = Clock()
    from kvlib import memory
    per_block = 8 * memory.model_kv_bytes_per_token(tiny.config)
    pc = kvlib.PromptCache(tiny, block_size=8, max_bytes=4 * per_block, clock=clock)
    a, b, c = ids(17, 1), ids(17, 2), ids(17, 3)  # two blocks each
    pc.prefill(a)
    clock.now = 1
    pc.prefill(b)
    clock.now = 2
    assert pc.prefill(a).receipt.cached_tokens == 16  # a is now more recent than b
    clock.now = 3
    pc.prefill(c)  # needs room for two blocks: b goes
    assert pc.nbytes == 4 * per_block
    clock.now = 4
    assert pc.prefill(a).receipt.cached_tokens == 16
    assert pc.prefill(c).receipt.cached_tokens == 16
    assert pc.prefill(b).receipt.cached_tokens == 0


@pytest.mark.slow
def test_the_byte_budget_holds_over_thousands_of_requests(tiny):
    from kvlib import memory
    clock, rng = Clock(), random.Random(0)
    budget = 37 * 4 * memory.model_kv_bytes_per_token(tiny.config) + 123  # not a multiple of a block
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=budget, ttl_seconds=50, clock=clock)
    prefixes = [ids(rng.randint(1, 40), s) for s in range(30)]
    for n in range(2000):
        clock.now += rng.random()
        prompt = rng.choice(prefixes)[: rng.randint(1, 40)] + [rng.randrange(4096) for _ in range(rng.randint(0, 3))]
        r = pc.prefill(prompt or [1], tenant=rng.choice("ab")).receipt
        assert r.cached_tokens % 4 == 0 and r.cached_tokens < r.input_tokens
        held = pc.nbytes  # first: reading nbytes drops what has expired
        assert held_bytes(pc) == held <= budget  # evicted blocks free their bytes, even inside a run
    assert any(e.kind == "evict" for e in pc.events)
    stored = set()  # every event names its block: a drop takes a block that a write stored and nobody dropped
    for e in pc.events:
        if e.kind == "write":
            assert e.key not in stored
            stored.add(e.key)
        elif e.kind in ("expire", "evict"):
            stored.remove(e.key)
        else:
            assert e.key in stored, "a hit on a block not stored"
    assert stored == set(pc.blocks)


def test_tenants_never_hit_each_others_prefixes(tiny):
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(50, 7)
    assert pc.prefill(prompt, tenant="alice").receipt.cached_tokens == 0
    assert pc.prefill(prompt, tenant="mallory").receipt.cached_tokens == 0
    assert pc.prefill(prompt, tenant="alice").receipt.cached_tokens == 48
    shared = kvlib.PromptCache(tiny, block_size=8, share_across_tenants=True)
    shared.prefill(prompt, tenant="alice")
    assert shared.prefill(prompt, tenant="mallory").receipt.cached_tokens == 48  # the leak it demonstrates


def test_a_crafted_tenant_name_cannot_forge_another_tenants_block(tiny):
    """Were the tenant's name and the tokens' bytes hashed as one string, a tenant named "alice" plus the
    bytes of alice's first 8 tokens, marking its first 8 tokens as a prefix, would hash to alice's
    16-token block: a hit on K and V computed for other tokens at other positions. The name is hashed
    on its own first, so no name can stand in for tokens."""
    prompt = list(range(10, 40))  # ids under 128: their int64 bytes are ASCII, so they can spell a name
    pc = kvlib.PromptCache(tiny, block_size=16, mode="explicit")
    assert pc.prefill(prompt, tenant="alice", cache_control=16).receipt.written_tokens == 16
    forged = "alice" + torch.tensor(prompt[:8], dtype=torch.int64).numpy().tobytes().decode("ascii")
    attack = pc.prefill(prompt[8:], tenant=forged, cache_control=8)
    assert attack.receipt.cached_tokens == 0
    assert_logits_close(attack.logits, tiny.forward(prompt[8:])[-1], tiny)  # its own tokens' answer
    assert pc.prefill(prompt, tenant="alice", cache_control=16).receipt.cached_tokens == 16  # alice still hits


def test_concurrent_requests_all_get_correct_results(tiny):
    """Four threads, two tenants, a budget of 12 blocks for two 8-block system prompts: evictions race with hits."""
    per_block = 8 * memory_bytes(tiny)
    pc = kvlib.PromptCache(tiny, block_size=8, max_bytes=12 * per_block)
    system = ids(64, 11)
    prompts = [system + ids(5 + i % 7, 100 + i) for i in range(24)]
    expected = [tiny.forward(p)[-1] for p in prompts]
    results, errors = {}, []

    def worker(k):
        try:
            for i in range(k, len(prompts), 4):
                results[i] = pc.prefill(prompts[i], tenant=f"t{i % 2}")
                assert pc.nbytes <= 12 * per_block
        except BaseException as e:  # a thread's exception would only end the thread: hand it to the test
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    if errors:
        raise errors[0]
    assert sorted(results) == list(range(len(prompts)))  # every request answered
    for i, res in results.items():
        assert_logits_close(res.logits, expected[i], tiny)
        assert len(res.cache) == len(prompts[i])
    kinds = [e.kind for e in pc.events]
    assert "evict" in kinds and "hit" in kinds  # the budget was reached while requests hit
    assert_no_holes(pc)


class Tick:
    """A clock that moves one second every time it is read, as a real clock moves during a prefill."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1
        return self.now


def assert_no_holes(pc):
    for key, block in pc.blocks.items():
        assert (block.parent is None) == (block.depth == 0)
        assert block.parent is None or block.parent in pc.blocks, f"block at depth {block.depth} lost its parent"
        assert block.parent is None or pc.blocks[block.parent].last_used >= block.last_used


def test_eviction_never_leaves_a_hole_under_a_ticking_clock(tiny):
    # a hit stamps the parents before the prefill and the new children after it, so plain LRU took the parents
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=5 * 4 * memory_bytes(tiny), clock=Tick())
    shared = ids(12, 1)
    five = shared + ids(9, 2)
    assert pc.prefill(shared + [7]).receipt.written_tokens == 12  # 3 blocks
    assert pc.prefill(five).receipt.blocks == ["hit"] * 3 + ["written"] * 2
    assert pc.prefill(ids(13, 3)).receipt.written_tokens == 12  # an unrelated 3-block prompt: 3 blocks must go
    assert sum(e.kind == "evict" for e in pc.events) == 3
    assert_no_holes(pc)
    assert sorted(b.depth for b in pc.blocks.values()) == [0, 0, 1, 1, 2]  # five's blocks 4, 3, 2 went, leaves first
    res = pc.prefill(five)
    assert res.receipt.cached_tokens == 8  # the surviving prefix is hit
    assert_logits_close(res.logits, tiny.forward(five)[-1], tiny)


def test_a_hit_renews_its_ancestors_so_expiry_leaves_no_hole(tiny):
    clock = Tick()
    pc = kvlib.PromptCache(tiny, block_size=4, ttl_seconds=100, clock=clock)
    shared = ids(12, 1)
    pc.prefill(shared + [7])
    pc.prefill(shared + ids(9, 2))  # children written a few ticks after their parents were hit
    children = [b.last_used for b in pc.blocks.values() if b.depth >= 3]
    clock.now = min(children) + 99  # past the parents' old stamp, within the children's TTL
    pc.expire()
    assert_no_holes(pc)
    assert len(pc.blocks) == 5


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 24), st.sampled_from("ab"), st.integers(0, 40)),
                       min_size=1, max_size=15),
       budget_blocks=st.integers(1, 12), ttl=st.integers(5, 60))
def test_no_request_stream_leaves_a_hole(tiny, stream, budget_blocks, ttl):
    """Random streams of prompts sharing prefixes, under a ticking clock, a small budget and a short TTL."""
    clock = Tick()
    budget = budget_blocks * 4 * memory_bytes(tiny)
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=budget, ttl_seconds=ttl, clock=clock)
    prefixes = [ids(24, s) for s in range(4)]
    for which, n, tenant, wait in stream:
        clock.now += wait
        prompt = prefixes[which][:n] + [which + 1]
        res = pc.prefill(prompt, tenant=tenant)
        assert res.receipt.cached_tokens % 4 == 0 and len(res.cache) == len(prompt)
        assert_no_holes(pc)
        assert pc.nbytes <= budget
        assert_no_holes(pc)  # nbytes expired what had run out
        held = pc.nbytes
        assert held_bytes(pc) == held


def test_a_request_never_changes_what_another_sees(tiny):
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(33, 3)
    first = pc.prefill(prompt)
    tiny.forward([5, 6, 7], cache=first.cache)  # decoding on from one result must not touch the stored blocks
    second = pc.prefill(prompt)
    assert second.receipt.cached_tokens == 32
    assert_logits_close(second.logits, tiny.forward(prompt)[-1], tiny)


def test_bad_input(tiny):
    import pytest
    pc = kvlib.PromptCache(tiny)
    with pytest.raises(ValueError, match="empty"):
        pc.prefill("")
    for settings in ({"block_size": 0}, {"block_size": 2.5}, {"max_bytes": -5}, {"max_bytes": True},
                     {"ttl_seconds": None}, {"ttl_seconds": 0}):
        with pytest.raises(kvlib.KVLibError, match=next(iter(settings))):
            kvlib.PromptCache(tiny, **settings)
    with pytest.raises(kvlib.KVLibError, match="named by a string, not None"):  # None and "None" must not share blocks
        pc.prefill("To be, or not to be, that is the question", tenant=None)
    explicit = kvlib.PromptCache(tiny, mode="explicit")
    for not_counts in (3.0, True, "3", [3, 4.0], torch.tensor(3), torch.tensor([3, 4])):
        with pytest.raises(kvlib.KVLibError, match="token count or a list of them"):
            explicit.prefill("To be, or not to be, that is the question", cache_control=not_counts)
    for counts in ({3}, range(3, 4), (3,), np.array([3]), np.int64(3)):  # any collection of counts, numpy's too
        assert explicit.spans(9, counts) == [(0, 3)]
    assert kvlib.PromptCache(tiny, max_bytes=np.int64(10**6), ttl_seconds=np.float64(60)).max_bytes == 10**6
    assert explicit.prefill("To be, or not to be, that is the question", cache_control=[3]).receipt.written_tokens == 3
    assert pc.blocks == {}  # the refused request stored nothing


def test_pricing_follows_the_receipt():
    from kvlib import pricing
    from kvlib.prompt_cache import Receipt
    anthropic, openai = pricing.PRICING["anthropic-5m"], pricing.PRICING["openai-gpt-5"]
    r = Receipt(input_tokens=2000, cached_tokens=1500, written_tokens=400)
    assert pricing.cost(r, anthropic) == 1500 * 0.1 + 400 * 1.25 + 100
    assert pricing.billed(r, openai) == (1408, 0, 592)  # hits in 128-token steps; writes billed as input
    short = Receipt(input_tokens=500, cached_tokens=480, written_tokens=0)
    assert pricing.cost(short, anthropic) == 500  # under the minimum: no caching at all
    assert pricing.cost(short, anthropic, apply_minimum=False) == 480 * 0.1 + 20


def test_stream_app_shows_each_requests_blocks(tiny):
    import matplotlib
    matplotlib.use("Agg")
    from kvlib import widgets
    clock = Clock()
    pc = kvlib.PromptCache(tiny, block_size=8, ttl_seconds=300, clock=clock)
    system = "You are Puck, a helpful sprite. Answer in verse. " * 2
    app = widgets.PromptCacheStream(pc, [("q1", "a", system + "Who?"), ("q2", "a", system + "Why?"),
                                         ("other", "b", system + "Who?")])
    app.next.click()
    app.next.click()
    app.next.click()
    (_, _, r1, _), (_, _, r2, _), (_, _, r3, _) = app.results
    assert r1.receipt.cached_tokens == 0 and r2.receipt.cached_tokens > 0 and r3.receipt.cached_tokens == 0
    hits = [b for b in app.view.requests[1]["blocks"] if b["state"] == "hit"]
    assert len(hits) == r2.receipt.cached_tokens // 8  # a hit chip per block read
    app.next.click()
    assert "All requests sent" in app.status.value
    app.forward.click()
    assert "blocks expired" in app.status.value and pc.nbytes == 0


# --- the manual clock, the two modes, sampled answers, prices per mode, the stream's labels ---------------

def test_manual_clock_moves_only_forward():
    import pytest
    from kvlib.prompt_cache import ManualClock
    clock = ManualClock()
    assert clock() == 0 and clock.advance(301) == 301 and clock() == 301
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


def test_automatic_mode_caches_nothing_under_its_minimum_and_counts_hits_in_blocks(tiny):
    pc = kvlib.PromptCache(tiny, block_size=32, min_tokens=128)
    short = ids(100, 1)
    assert pc.prefill(short).receipt.written_tokens == 0 and pc.prefill(short).receipt.cached_tokens == 0
    system = ids(150, 2)
    r1 = pc.prefill(system + ids(20, 3)).receipt
    assert (r1.cached_tokens, r1.written_tokens, r1.mode) == (0, 160, "automatic")  # 5 blocks of the first 169
    r2 = pc.prefill(system + ids(20, 4)).receipt
    assert r2.cached_tokens == 128  # 150 shared tokens, hits in steps of 32
    r3 = pc.prefill(system[:100] + ids(60, 5)).receipt
    assert r3.cached_tokens == 0  # 96 shared tokens: a hit under the 128-token minimum is no hit
    assert_logits_close(pc.prefill(system + ids(20, 4)).logits, tiny.forward(system + ids(20, 4))[-1], tiny)


def test_explicit_mode_finds_a_marked_prefix_however_each_request_cut_it(tiny):
    """A prefix is the same prefix whichever marks cut it into blocks, as Anthropic keys its cache by the
    prefix: marked at 77, then at 10 and 77, it hits all 77; written as 10 + 67, a lone mark at 77 hits both."""
    prefix, question = ids(77, 1), ids(9, 2)
    for first, second in (([77], [10, 77]), ([10, 77], [77]), ([10, 77], [40, 77])):
        pc = kvlib.PromptCache(tiny, mode="explicit")
        pc.prefill(prefix + ids(5, 3), cache_control=first)
        res = pc.prefill(prefix + question, cache_control=second)
        r = res.receipt
        assert (r.cached_tokens, r.written_tokens, r.blocks) == (77, 0, ["hit"] * len(second)), (first, second)
        assert_logits_close(res.logits, tiny.forward(prefix + question)[-1], tiny)
        assert [e.kind for e in pc.events[-len(first):]] == ["hit"] * len(first)  # each stored block read once
    pc = kvlib.PromptCache(tiny, mode="explicit")
    pc.prefill(prefix + ids(5, 3), cache_control=[10, 77])
    r = pc.prefill(prefix + question + ids(4, 4), cache_control=[50, 86]).receipt  # 50 was never a block end
    assert (r.cached_tokens, r.written_tokens, r.blocks) == (0, 86, ["written", "written"])


def test_a_block_written_after_another_requests_blocks_sits_below_them(tiny):
    """Its depth follows its parent, whoever wrote that; room is made by evicting any leaf but its parent."""
    from kvlib.prompt_cache import ManualClock
    prefix = ids(95, 1)
    pc = kvlib.PromptCache(tiny, mode="explicit")
    pc.prefill(prefix[:80], cache_control=[10, 77])            # blocks 0-10 (depth 0) and 10-77 (depth 1)
    r = pc.prefill(prefix, cache_control=[77, 90]).receipt     # hits 0-77, writes 77-90 below 10-77
    assert r.blocks == ["hit", "written"] and pc.events[-1].kind == "write" and pc.events[-1].depth == 2
    assert sorted(b.depth for b in pc.blocks.values()) == [0, 1, 2]
    per_token = memory_bytes(tiny)
    pc = kvlib.PromptCache(tiny, mode="explicit", clock=ManualClock(), max_bytes=95 * per_token)
    pc.prefill(prefix[:20], cache_control=10)                   # a leaf of 10 tokens, no part of what follows
    pc.clock.now += 1
    pc.prefill(prefix[:80], cache_control=77)                   # 77 more: the budget is full but for 8 tokens
    pc.clock.now += 1
    r = pc.prefill(prefix, cache_control=[10, 77, 90]).receipt  # hits 77 through the second request's block
    assert r.blocks == ["hit", "hit", "written"] and r.written_tokens == 13  # the 10-token leaf made room
    assert [e.kind for e in pc.events[-2:]] == ["evict", "write"] and pc.nbytes <= 95 * per_token


def test_explicit_mode_caches_exactly_the_marked_prefix(tiny):
    import pytest
    pc = kvlib.PromptCache(tiny, mode="explicit", min_tokens=50)
    system = ids(70, 1)
    assert pc.prefill(system + ids(10, 2)).receipt.written_tokens == 0  # no marker: nothing cached
    r1 = pc.prefill(system + ids(10, 2), cache_control=70).receipt
    assert (r1.cached_tokens, r1.written_tokens, r1.blocks, r1.mode) == (0, 70, ["written"], "explicit")
    res = pc.prefill(system + ids(12, 3), cache_control=70)
    assert (res.receipt.cached_tokens, res.receipt.written_tokens) == (70, 0)  # not rounded to any block
    assert_logits_close(res.logits, tiny.forward(system + ids(12, 3))[-1], tiny)
    assert pc.prefill(system + ids(12, 3), cache_control=69).receipt.cached_tokens == 0  # another prefix
    r = pc.prefill(system + ids(30, 4), cache_control=[70, 90]).receipt  # two breakpoints: hit one, write one
    assert (r.cached_tokens, r.written_tokens, r.blocks) == (70, 20, ["hit", "written"])
    assert pc.prefill(ids(40, 5) + ids(10, 6), cache_control=40).receipt.written_tokens == 0  # under the minimum
    with pytest.raises(ValueError, match="inside"):
        pc.prefill(system, cache_control=70)  # the last token must be left to compute
    with pytest.raises(ValueError, match="at most 4"):
        pc.prefill(ids(100, 7), cache_control=[60, 70, 80, 90, 95])
    with pytest.raises(ValueError, match="explicit"):
        kvlib.PromptCache(tiny).prefill(system, cache_control=10)
    with pytest.raises(ValueError, match="mode"):
        kvlib.PromptCache(tiny, mode="magic")


def test_a_cached_prompt_is_not_a_cached_answer(tiny, hf_tiny):
    pc = kvlib.PromptCache(tiny, block_size=16)
    prompt = ids(60, 3)
    pc.prefill(prompt)
    answers = [pc.answer(prompt, max_new_tokens=12, temperature=1.0, seed=s) for s in range(3)]
    assert len({tuple(a.ids) for a in answers}) == 3  # sampled anew each time
    assert {(a.receipt.cached_tokens, a.receipt.written_tokens) for a in answers} == {(48, 0)}
    greedy = pc.answer(prompt, max_new_tokens=8)  # a cached prefix, then greedy: what transformers picks afresh
    assert greedy.ids == hf_greedy(hf_tiny[0], prompt, 8)
    assert pc.answer(prompt, 5, temperature=1.0, seed=1).ids == answers[1].ids[:5]  # the same seed, the same answer


def test_each_mode_is_priced_by_its_own_provider_only(tiny):
    import pytest
    from kvlib import pricing
    from kvlib.prompt_cache import Receipt
    assert {p.mode for p in pricing.AUTOMATIC.values()} == {"automatic"}
    assert {p.mode for p in pricing.EXPLICIT.values()} == {"explicit"}
    assert all(p.write == 1.0 and p.step == 128 and p.min_tokens == 1024 for p in pricing.AUTOMATIC.values())
    assert [p.write for p in pricing.EXPLICIT.values()] == [1.25, 2.0]
    assert all(p.read == 0.1 for p in pricing.EXPLICIT.values()) and pricing.PRICING["openai-gpt-4o"].read == 0.5
    auto = Receipt(input_tokens=1300, cached_tokens=1152, written_tokens=0, mode="automatic")
    assert pricing.cost(auto, pricing.PRICING["openai-gpt-5"]) == pytest.approx(1152 * 0.1 + 148)
    with pytest.raises(ValueError, match="explicit"):
        pricing.cost(auto, pricing.PRICING["anthropic-5m"])  # no write premium on automatic caching
    first = Receipt(input_tokens=1300, cached_tokens=0, written_tokens=1200, mode="explicit")
    assert pricing.cost(first, pricing.PRICING["anthropic-1h"]) == pytest.approx(1200 * 2.0 + 100)
    with pytest.raises(ValueError, match="automatic"):
        pricing.cost(first, pricing.PRICING["openai-gpt-5"])
    assert pricing.billed(Receipt(1100, 900, 0, mode="automatic"), pricing.PRICING["openai-gpt-5"]) == (0, 0, 1100)
    text = pricing.table()
    assert all(p.provider in text and p.source in text for p in pricing.PRICING.values())


def test_a_provider_like_cache_follows_its_rules(tiny):
    from kvlib import pricing
    pc = pricing.prompt_cache(tiny, pricing.PRICING["openai-gpt-5"])
    assert (pc.mode, pc.block_size, pc.min_tokens, pc.ttl) == ("automatic", 128, 1024, 300)
    pc = pricing.prompt_cache(tiny, pricing.PRICING["anthropic-1h"])
    assert (pc.mode, pc.min_tokens, pc.ttl) == ("explicit", 1024, 3600)
    prompt = ids(500, 1)  # tiny's context is shorter than the minimum: never cached
    assert pc.prefill(prompt, cache_control=400).receipt.written_tokens == 0


def test_stream_prices_rows_evicts_under_a_budget_and_reads_fully(tiny):
    import pytest
    from kvlib import pricing, widgets
    from kvlib.prompt_cache import ManualClock
    per_block = 16 * memory_bytes(tiny)
    system = [ids(40, s) for s in (1, 2, 3)]  # 2 full blocks each before the question
    pc = kvlib.PromptCache(tiny, block_size=16, max_bytes=4 * per_block, clock=ManualClock())
    requests = [(f"prefix {k}", "acme", system[k] + ids(5, 10 + n)) for n, k in enumerate((0, 1, 0, 2, 1))]
    app = widgets.PromptCacheStream(pc, requests)
    assert app.next.layout.width == "auto" and app.forward.layout.width == "auto"  # labels never cut short
    for _ in requests:
        app.send()
    r = [res.receipt for _, _, res, _ in app.results]
    assert r[2].cached_tokens == 32 and r[4].cached_tokens == 0  # prefix 1 was the least recently used
    assert sum(e.kind == "evict" for e in app.results[3][3]) == 2 and "evicted" in app.status.value
    assert pc.clock() == 40  # ten seconds between requests
    gpt5 = pricing.PRICING["openai-gpt-5"]
    assert app.view.requests[2]["cost"] == pytest.approx(45 - 0.9 * 32)  # the hit row's cost at GPT-5's ratios
    assert app.cost(r[2]) == pytest.approx(r[2].input_tokens - (1 - gpt5.read) * r[2].cached_tokens)
    with pytest.raises(ValueError, match="automatic"):
        widgets.PromptCacheStream(pc, requests, pricing.PRICING["anthropic-5m"])
    app.forward.click()
    assert "4 blocks expired" in app.status.value and "holds 0" in app.status.value


def test_a_refused_request_in_the_stream_leaves_the_clock_where_it_was(tiny):
    from kvlib import pricing, widgets
    from kvlib.prompt_cache import ManualClock
    pc = kvlib.PromptCache(tiny, block_size=16, mode="explicit", clock=ManualClock())
    requests = [("fine", "acme", ids(40, 1), 32), ("bad mark", "acme", ids(40, 2), 99)]  # 99: past its 40 tokens
    app = widgets.PromptCacheStream(pc, requests, pricing.PRICING["anthropic-5m"])
    app.send()
    for _ in range(40):  # clicked again and again: 40 refusals would once have moved the clock past the TTL
        app.send()
    assert "⚠" in app.status.value and "must fall inside" in app.status.value
    assert pc.clock() == 0 and len(app.results) == 1 and len(pc.blocks) == 1  # the one marked prefix


def memory_bytes(model):
    from kvlib import memory
    return memory.model_kv_bytes_per_token(model.config)


def test_writing_into_a_requests_cache_never_changes_the_stored_blocks(tiny):
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(33, 3)
    writer = pc.prefill(prompt)  # the request whose cache the blocks were taken from
    stored = stored_blocks(pc)
    assert len(stored) == 4
    reader = pc.prefill(prompt[:20] + ids(6, 4))  # a hit on 2 blocks, extended by a new third one
    assert reader.receipt.blocks[:2] == ["hit", "hit"]
    stored = stored_blocks(pc) | stored  # the new block's copy added; the first four as they were before the hit
    for res in (writer, reader):
        for layer in res.cache.layers:  # writing into the request's cache in place (before decoding regrows it)
            layer.keys.mul_(-1)
            layer.values.zero_()
        tiny.forward([5, 6, 7], cache=res.cache)  # and decoding on, which appends to it
    assert_blocks_unchanged(pc, stored)
    res = pc.prefill(prompt)
    assert res.receipt.cached_tokens == 32
    assert_logits_close(res.logits, tiny.forward(prompt)[-1], tiny)


def storage(t):
    return t.untyped_storage().data_ptr()


def test_a_hit_shares_the_stored_blocks_by_reference(tiny):
    """No copy: the request's cache reads the stored tensors themselves, one piece per run of blocks."""
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(33, 3)
    pc.prefill(prompt[:17])           # writes blocks 0-1: one run
    pc.prefill(prompt)                # hits them, writes blocks 2-3: a second run
    stored = stored_blocks(pc)
    res = pc.prefill(prompt + ids(5, 9))
    assert res.receipt.blocks == ["hit"] * 4
    by_depth = {b.depth: b for b in pc.blocks.values()}
    for layer, cached in enumerate(res.cache.layers):
        ks, vs = zip(*cached.pieces())
        assert [k.shape[1] for k in ks] == [16, 16, 6]  # run 1, run 2, then the request's own tokens
        for piece, depth in ((0, 0), (1, 2)):
            assert ks[piece].data_ptr() == by_depth[depth].keys[layer].data_ptr()
            assert vs[piece].data_ptr() == by_depth[depth].values[layer].data_ptr()
    assert res.cache.layers[0].shared_length == 32 and len(res.cache) == 38
    assert_logits_close(res.logits, tiny.forward(prompt + ids(5, 9))[-1], tiny)
    tiny.forward([1, 2, 3], cache=res.cache)  # extending the request appends to its own buffer only
    copy = res.cache.copy()
    tiny.forward([4, 5], cache=copy)
    assert storage(copy.layers[3].pieces()[0][0]) == storage(ks[0])  # a copy shares the stored blocks too
    assert len(res.cache) == 41 and len(copy) == 43
    assert_blocks_unchanged(pc, stored)


def test_copy_on_write_never_reaches_the_stored_blocks(tiny):
    """Reading, writing into what was read, copying, decoding on a copy, unsharing: the stored blocks
    stay as they were each time, and the request keeps decoding as an uncached run does."""
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(20, 5)
    pc.prefill(prompt)
    res = pc.prefill(prompt)
    before, layer = stored_blocks(pc), res.cache.layers[0]
    values = layer.values  # read first: one tensor gathered from the shared block and the own tokens
    assert layer.shared_length == 16 and not pc.stores(values) and pc.stores(layer.pieces()[0][1])
    values.zero_()
    layer.keys.mul_(-1)  # writing into what reading handed out changes neither the blocks nor the request
    assert_blocks_unchanged(pc, before)
    in_order = sorted(pc.blocks.values(), key=lambda b: b.depth)
    assert torch.equal(layer.keys[:, :16], torch.cat([b.keys[0] for b in in_order], 1))
    assert torch.equal(layer.values[:, :16], torch.cat([b.values[0] for b in in_order], 1))
    copy = res.cache.copy()
    for copied in copy.layers:
        copied.values.zero_()
    tiny.forward([3], cache=copy)  # decoding on from a copy appends to the copy's own buffer
    assert_blocks_unchanged(pc, before)
    assert_logits_close(tiny.forward([3], cache=res.cache)[-1], tiny.forward(prompt + [3])[-1], tiny)
    with pytest.raises(kvlib.KVLibError, match="starts an empty cache"):
        res.cache.layers[1].share(res.cache.layers[1].pieces())
    layer.unshare()  # asked for: the request's own copy, which writes then reach
    layer.keys.zero_()
    assert layer.shared_length == 0 and layer.keys.abs().sum() == 0
    assert_blocks_unchanged(pc, before)
    assert pc.blocks.keys() == before.keys()  # nor was a block added or dropped


def test_a_live_request_outlives_eviction_compaction_and_expiry_of_its_blocks(tiny):
    """Mid-decode, under a clock that ticks on every read, other requests evict and compact the run a
    request reads and the TTL expires what is left; the request decodes on, equal to an uncached run."""
    per_block = 8 * memory_bytes(tiny)
    ticking = kvlib.prompt_cache.ManualClock()
    clock = lambda: ticking.advance(40)  # noqa: E731 -- every call moves time on
    pc = kvlib.PromptCache(tiny, block_size=8, max_bytes=5 * per_block, ttl_seconds=300, clock=clock)
    prompt = ids(33, 1)
    pc.prefill(prompt)  # 4 blocks, one run
    res = pc.prefill(prompt)
    assert res.receipt.cached_tokens == 32
    seq, logits = list(prompt), res.logits
    for step in range(6):
        token = int(logits.argmax())
        seq.append(token)
        if step == 1:
            pc.prefill(ids(17, 2))  # 2 blocks more than the budget leaves room for: leaves of the run go
            assert len(pc.blocks) < 6 and any(e.kind == "evict" for e in pc.events)
        if step == 3:
            ticking.advance(1000)
            assert pc.expire() > 0 and not pc.blocks  # everything stored is gone now
        logits = tiny.forward([token], cache=res.cache)[-1]
        assert_logits_close(logits, tiny.forward(seq)[-1], tiny)
    assert res.cache.layers[0].shared_length == 32  # still reading the memory nobody else holds now


def test_evicting_part_of_a_run_frees_its_bytes_and_keeps_the_rest(tiny):
    per_block = 4 * memory_bytes(tiny)
    clock = Clock()
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=6 * per_block, clock=clock)
    first = ids(21, 1)
    pc.prefill(first)  # 5 blocks, one run
    kept = stored_blocks(pc)
    clock.now = 1
    pc.prefill(ids(13, 2))  # 3 blocks: two of the first run's leaves must go
    assert sorted(b.depth for b in pc.blocks.values()) == [0, 0, 1, 1, 2, 2]
    held = pc.nbytes
    assert held_bytes(pc) == held == 6 * per_block
    survivors = [key for key in kept if key in pc.blocks]
    assert len(survivors) == 3 and len({id(pc.blocks[key].run) for key in survivors}) == 1
    # the first run, copied down to its 3 blocks, holds what it held
    assert all(pc.blocks[key].run.keys[0].shape[1] == 12 for key in survivors)
    assert_blocks_unchanged(pc, {key: kept[key] for key in survivors})
    res = pc.prefill(first)
    assert res.receipt.cached_tokens == 12
    assert_logits_close(res.logits, tiny.forward(first)[-1], tiny)


def test_a_chat_hit_turn_by_turn_reads_one_piece_per_run(tiny):
    """A chat that grows turn by turn writes one run per turn; a later turn's hit reads every run in
    place, one piece each, and still gives the uncached logits."""
    pc = kvlib.PromptCache(tiny, block_size=4)
    chat = ids(4 * 20 + 1, 8)
    for turn in range(1, 21):
        res = pc.prefill(chat[:4 * turn + 1])
        assert len(res.cache.layers[2].pieces()) == turn  # turn - 1 runs hit, then the request's own tokens
    assert res.receipt.cached_tokens == 4 * 19 and res.cache.shared_nbytes == 4 * 19 * memory_bytes(tiny)
    assert_logits_close(res.logits, tiny.forward(chat)[-1], tiny)


def test_anthropic_prices_use_the_lowest_published_minimum():
    """The explicit-mode price lists stand for every Claude model, so their minimum is the lowest any
    model publishes; a model with a higher one would leave a prefix uncached that these prices cache."""
    from kvlib import pricing
    lowest = min(pricing.ANTHROPIC_MIN_TOKENS.values())
    assert all(p.min_tokens == lowest for p in pricing.EXPLICIT.values())
    assert max(pricing.ANTHROPIC_MIN_TOKENS.values()) == 4 * lowest  # 1,024 to 4,096: the notebook says so


@pytest.mark.parametrize("name", ["tiny", "small_llama"])
def test_the_cache_holds_only_the_prompts_k_and_v_never_the_answer(request, name):
    """Per block: a hash for a name, and per layer K and V of [n_kv_heads, block, head_dim]; answering
    (any seed) neither adds nor changes a stored number (notebook 6 shows this on the learner's model)."""
    model = request.getfixturevalue(name)
    pc = kvlib.PromptCache(model, block_size=8)
    prompt = ids(30, 4)
    first = pc.answer(prompt, max_new_tokens=10, temperature=1.0, seed=0)
    stored = stored_blocks(pc)
    later = [pc.answer(prompt, max_new_tokens=10, temperature=1.0, seed=s) for s in (1, 2)]
    assert len({tuple(a.ids) for a in [first] + later}) > 1
    assert stored.keys() == pc.blocks.keys() and all(isinstance(k, bytes) and len(k) == 16 for k in stored)
    assert_blocks_unchanged(pc, stored)
    cfg = model.config
    assert {tuple(t.shape) for ts in stored.values() for t in ts} == {(cfg.n_kv_head, 8, cfg.head_dim)}
    assert all(len(ts) == 2 * cfg.n_layer for ts in stored.values())
    assert 8 * len(stored) == first.receipt.written_tokens == 24  # 3 blocks of the prompt's first 29 tokens
    assert pc.nbytes == 24 * memory_bytes(model)


def test_the_stream_of_a_cache_without_a_ttl_offers_no_fast_forward(tiny):
    from kvlib import widgets
    from kvlib.prompt_cache import ManualClock
    forever = widgets.PromptCacheStream(kvlib.PromptCache(tiny, ttl_seconds=float("inf"), clock=ManualClock()), [])
    assert forever.forward.disabled and forever.forward.description == "No TTL: entries never expire"
    forever.fast_forward()
    forever.send()
    assert forever.pc.clock() == 0 and forever.status.value == "All requests sent. Build a new stream."
    for ttl, label in ((300, "6 min"), (30, "90 s")):  # the label says how far the clock moves: a minute past the TTL
        app = widgets.PromptCacheStream(kvlib.PromptCache(tiny, ttl_seconds=ttl, clock=ManualClock()), [])
        assert not app.forward.disabled and app.forward.description == f"Fast-forward {label}"
        app.fast_forward()
        assert app.pc.clock() == ttl + 60


def test_a_stream_too_long_to_draw_says_so_in_place(tiny, monkeypatch):
    from kvlib import widgets
    from kvlib.prompt_cache import ManualClock
    from kvlib.views import base
    monkeypatch.setattr(base, "MAX_STATE_BYTES", 20_000)  # the page's limit, lowered so two requests pass it
    requests = [(f"r{k}", "acme", ids(200, k)) for k in range(4)]
    app = widgets.PromptCacheStream(kvlib.PromptCache(tiny, block_size=4, clock=ManualClock()), requests)
    for _ in range(4):
        app.send()
        if "⚠" in app.status.value:
            break
    assert "not drawn: this view would send" in app.status.value and len(app.results) < 4
    assert len(app.view.requests) == len(app.results) - 1 and app.view.state_bytes() <= base.MAX_STATE_BYTES
    app.send()  # and it keeps working: the next click still sends, and says it was not drawn either
    assert "not drawn" in app.status.value and len(app.view.requests) == len(app.results) - 2
