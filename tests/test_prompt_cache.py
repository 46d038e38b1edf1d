"""The provider-style prompt cache: exact logits, exact receipts, TTL, LRU, budget, tenants, threads."""

import random
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvlib
from kvlib.model.measure import Fed
from kvlib.server.blocks import chains
from kvlib.server.paged_cache import blocks_for

from bounds import assert_logits_close
from conftest import hf_greedy, hf_model
from test_blocks import Watched, check_pool


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def ids(n, seed):
    return torch.randint(0, 4096, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def stored_blocks(pc):  # a copy of every filed block's K and V, by key, cut from the pool's tensors
    return {key: [t.clone() for kv in pc.kv(key) for t in kv] for key in pc.index}


def assert_blocks_unchanged(pc, before):  # every block copied in `before` is still filed, bit for bit as it was
    now = stored_blocks(pc)
    for key, tensors in before.items():
        assert key in now and all(torch.equal(a, b) for a, b in zip(now[key], tensors))


def filed_bytes(pc):  # what the index holds, block by block, at the formula's bytes per token
    return len(pc.cache.pool.index) * pc.block_size * memory_bytes(pc.model)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.integers(1, 70), first=st.integers(0, 30), second=st.integers(1, 30), seed=st.integers(0, 10**6))
def test_a_hit_gives_the_logits_of_an_uncached_pass(tiny, prefix, first, second, seed):
    pc = kvlib.PromptCache(tiny, block_size=8)
    shared = ids(prefix, seed)
    pc.prefill(shared + ids(first, seed + 1) or shared)
    prompt = shared + ids(second, seed + 2)
    res = pc.prefill(prompt)
    assert_logits_close(res.logits, tiny.forward(prompt)[-1], tiny)
    hit = res.receipt.cached_tokens // 8  # its first blocks are the index's own, then blocks of its own for the rest
    assert len(res.table) == blocks_for(len(prompt), 8) and len(set(res.table)) == len(res.table)
    keys = pc.block_keys(prompt, "default", pc.spans(len(prompt)))
    assert res.table[:hit] == [pc.cache.pool.index[k] for k in keys[:hit]]
    assert_no_holes(pc)


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
    clock, fed = Clock(), Fed(tiny)
    pc = kvlib.PromptCache(fed, block_size=8, ttl_seconds=300, clock=clock)
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
    assert pc.cache.pool.cached == 0 and pc.cache.pool.in_use == 0  # their blocks are free again
    assert pc.prefill(prompt).receipt.cached_tokens == 0
    assert any(e.kind == "expire" for e in pc.events)
    assert fed.rows == [40, 8, 8, 40]  # the model's own count: the tail while the blocks lived, all 40 once they expired


def test_lru_evicts_the_least_recently_used_under_the_budget(tiny):
    clock = Clock()
    from kvlib.lessons import memory
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
    from kvlib.lessons import memory
    clock, rng = Clock(), random.Random(0)
    budget = 37 * 4 * memory.model_kv_bytes_per_token(tiny.config) + 123  # not a multiple of a block
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=budget, ttl_seconds=50, clock=clock)
    prefixes = [ids(rng.randint(1, 40), s) for s in range(30)]
    for n in range(2000):
        clock.now += rng.random()
        prompt = rng.choice(prefixes)[: rng.randint(1, 40)] + [rng.randrange(4096) for _ in range(rng.randint(0, 3))]
        r = pc.prefill(prompt or [1], tenant=rng.choice("ab")).receipt
        assert r.cached_tokens % 4 == 0 and r.cached_tokens < r.input_tokens
        assert filed_bytes(pc) == pc.nbytes <= budget  # the bytes counted are the blocks filed, within the budget
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
    assert stored == set(pc.index)
    assert_no_holes(pc)


def test_tenants_never_hit_each_others_prefixes(tiny):
    fed = Fed(tiny)
    pc = kvlib.PromptCache(fed, block_size=8)
    prompt = ids(50, 7)
    assert pc.prefill(prompt, tenant="alice").receipt.cached_tokens == 0
    assert pc.prefill(prompt, tenant="mallory").receipt.cached_tokens == 0
    assert pc.prefill(prompt, tenant="alice").receipt.cached_tokens == 48
    assert fed.rows == [50, 50, 2]  # mallory's request computed every token, as alice's first did
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
        assert len(res.table) == blocks_for(len(prompts[i]), 8)
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
    """The pool's counts hold for the requests running now; every filed block's prefix is filed (check_pool);
    a parent was used no earlier than its children, so its TTL never runs out first."""
    pool = pc.cache.pool
    check_pool(pool, {s: q.blocks for s, q in pc.cache.sequences.items()})
    for entry in pool.entries.values():
        assert entry.parent is None or pool.entries[entry.parent].last_used >= entry.last_used


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
    assert sorted(e.depth for e in pc.index.values()) == [0, 0, 1, 1, 2]  # five's blocks 4, 3, 2 went, leaves first
    res = pc.prefill(five)
    assert res.receipt.cached_tokens == 8  # the surviving prefix is hit
    assert_logits_close(res.logits, tiny.forward(five)[-1], tiny)


def test_a_hit_renews_its_ancestors_so_expiry_leaves_no_hole(tiny):
    clock = Tick()
    pc = kvlib.PromptCache(tiny, block_size=4, ttl_seconds=100, clock=clock)
    shared = ids(12, 1)
    pc.prefill(shared + [7])
    pc.prefill(shared + ids(9, 2))  # children written a few ticks after their parents were hit
    children = [e.last_used for e in pc.index.values() if e.depth >= 3]
    clock.now = min(children) + 99  # within the children's TTL
    pc.expire()
    assert_no_holes(pc)
    assert len(pc.index) == 5


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
        assert res.receipt.cached_tokens % 4 == 0 and len(res.table) == blocks_for(len(prompt), 4)
        assert_no_holes(pc)
        assert filed_bytes(pc) == pc.nbytes <= budget


def test_a_request_never_changes_what_another_sees(tiny):
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(33, 3)
    pc.prefill(prompt)
    stored = stored_blocks(pc)
    pc.answer(prompt, max_new_tokens=10)  # decoding on from a hit writes into blocks of its own only
    assert_blocks_unchanged(pc, stored)
    second = pc.prefill(prompt)
    assert second.receipt.cached_tokens == 32
    assert_logits_close(second.logits, tiny.forward(prompt)[-1], tiny)


def test_bad_input(tiny):
    import pytest
    pc = kvlib.PromptCache(tiny)
    with pytest.raises(ValueError, match="empty"):
        pc.prefill("")
    for bad in ({"block_size": 0}, {"block_size": 2.5}, {"max_bytes": -5}, {"max_bytes": True},
                {"ttl_seconds": None}, {"ttl_seconds": 0}):
        with pytest.raises(kvlib.KVLibError, match=next(iter(bad))):
            kvlib.PromptCache(tiny, **bad)
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
    assert pc.index == {}  # the refused request stored nothing


def test_pricing_follows_the_receipt():
    from kvlib.lessons import pricing
    from kvlib.server.prompt_cache import Receipt
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
    from kvlib.ui import widgets
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



def test_a_chip_names_the_bytes_of_a_character_its_block_cuts(tiny):
    """Byte-level tokens hold parts of Chinese characters, so blocks cut characters: a chip's text names the cut
    bytes (<0xE8>) as notebook 2's chips do. Read back, the chips' texts are the prompt's own bytes; decoded alone,
    each cut would show '\ufffd' and those bytes would be lost."""
    import re
    from kvlib.ui.views import PromptBlocks
    pc = kvlib.PromptCache(tiny, block_size=4, ttl_seconds=300, clock=Clock())
    prompt = "你是迫克，夜里快活的小精灵。回答要押韵。"
    view = PromptBlocks(pc)
    view.add("q", "a", prompt, pc.prefill(prompt, tenant="a"), 0.0)
    texts = [b["text"] for b in view.requests[0]["blocks"]]
    read_back = b"".join(re.sub(rb"<0x([0-9A-F]{2})>", lambda m: bytes([int(m[1], 16)]), t.encode()) for t in texts)
    assert any("<0x" in t for t in texts) and not any("\ufffd" in t for t in texts), texts
    assert prompt.encode().startswith(read_back) and len(read_back) > len(prompt.encode()) // 2, texts

# --- the manual clock, the two modes, sampled answers, prices per mode, the stream's labels ---------------

def test_manual_clock_moves_only_forward():
    import pytest
    from kvlib.server.prompt_cache import ManualClock
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
        assert [e.kind for e in pc.events[-5:]] == ["hit"] * 5  # each block of the 77 tokens read once (4 full, a part)
    pc = kvlib.PromptCache(tiny, mode="explicit")
    pc.prefill(prefix + ids(5, 3), cache_control=[10, 77])
    r = pc.prefill(prefix + question + ids(4, 4), cache_control=[50, 86]).receipt  # 50 was never a block end
    assert (r.cached_tokens, r.written_tokens, r.blocks) == (0, 86, ["written", "written"])


def test_a_block_written_after_another_requests_blocks_sits_below_them(tiny):
    """Its depth follows its parent, whoever wrote that; room is made by evicting any unheld leaf, never a block
    of its own prefix (the filing holds them)."""
    from kvlib.server.prompt_cache import ManualClock
    prefix = ids(95, 1)
    pc = kvlib.PromptCache(tiny, mode="explicit")
    pc.prefill(prefix[:80], cache_control=[10, 77])            # 0-10 (a part, depth 0); 4 full blocks, then 64-77
    r = pc.prefill(prefix, cache_control=[77, 90]).receipt     # hits 0-77, writes 64-80 and 80-90 below them
    assert r.blocks == ["hit", "written"] and pc.events[-1].kind == "write" and pc.events[-1].depth == 5
    assert sorted(e.depth for e in pc.index.values()) == [0, 0, 1, 2, 3, 4, 4, 5]
    pc = kvlib.PromptCache(tiny, mode="explicit", clock=ManualClock(), max_bytes=7 * 16 * memory_bytes(tiny))
    pc.prefill(prefix[:20], cache_control=10)                   # a leaf of 10 tokens, no part of what follows
    pc.clock.now += 1
    pc.prefill(prefix[:80], cache_control=77)                   # 5 blocks more: the budget is full but for 1
    pc.clock.now += 1
    r = pc.prefill(prefix, cache_control=[10, 77, 90]).receipt  # hits 77 through the second request's blocks
    assert r.blocks == ["hit", "hit", "written"] and r.written_tokens == 13  # the 10-token leaf made room
    assert [e.kind for e in pc.events[-3:]] == ["write", "evict", "write"] and pc.nbytes == 7 * 16 * memory_bytes(tiny)
    assert_no_holes(pc)


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


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_answers_cold_and_from_a_hit_are_transformers_greedy(request, name):
    """The prompt cache's requests run the step as the server's do: a first request (nothing cached) and a second
    that starts from its 2 filed blocks, and a third whose prompt shares only them, each answer as transformers does
    the prompt alone, afresh."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    pc = kvlib.PromptCache(model, block_size=16)
    prompt = ids(40, 5)  # ids below 4,096: in every model's vocabulary
    other = prompt[:32] + ids(9, 6)
    answers = [pc.answer(p, max_new_tokens=6) for p in (prompt, prompt, other)]
    assert [a.receipt.cached_tokens for a in answers] == [0, 32, 32]
    for p, a in zip((prompt, prompt, other), answers):
        assert a.ids == hf_greedy(hf, p, 6)


def test_an_answer_is_generates_and_stops_where_it_stops(tiny):
    """PromptCache.answer decodes on the pool through batching.steps and sampling.pick: the tokens and the stop
    of generate, cold or from a hit, greedy or seeded, at max_new_tokens, at end-of-text or at a full context."""
    pc = kvlib.PromptCache(tiny, block_size=8)
    long = ids(tiny.config.n_ctx - 5, 1)  # the context fills after 5 tokens
    eos = tiny.encode("The end.") + [tiny.eos_token_id] + tiny.encode("Once upon a time")
    for prompt, kwargs in ((ids(30, 2), {}), (ids(30, 2), {}), (ids(30, 2), {"temperature": 1.0, "seed": 3}),
                           (long, {}), (long, {"max_new_tokens": 40}), (eos, {"max_new_tokens": 200})):
        got = pc.answer(prompt, **kwargs)
        want = kvlib.generate(tiny, prompt, **kwargs)
        assert (got.ids, got.text, got.stop_reason) == (want.ids, want.text, want.stop_reason)
    assert "context full" in pc.answer(long, 40).stop_reason and pc.answer(ids(30, 2)).receipt.cached_tokens == 24


def test_each_mode_is_priced_by_its_own_provider_only(tiny):
    import pytest
    from kvlib.lessons import pricing
    from kvlib.server.prompt_cache import Receipt
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
    from kvlib.lessons import pricing
    pc = pricing.prompt_cache(tiny, pricing.PRICING["openai-gpt-5"])
    assert (pc.mode, pc.block_size, pc.min_tokens, pc.ttl) == ("automatic", 128, 1024, 300)
    pc = pricing.prompt_cache(tiny, pricing.PRICING["anthropic-1h"])
    assert (pc.mode, pc.min_tokens, pc.ttl) == ("explicit", 1024, 3600)
    prompt = ids(500, 1)  # tiny's context is shorter than the minimum: never cached
    assert pc.prefill(prompt, cache_control=400).receipt.written_tokens == 0


def test_stream_prices_rows_evicts_under_a_budget_and_reads_fully(tiny):
    import pytest
    from kvlib.lessons import pricing
    from kvlib.server.prompt_cache import ManualClock
    from kvlib.ui import widgets
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
    from kvlib.lessons import pricing
    from kvlib.server.prompt_cache import ManualClock
    from kvlib.ui import widgets
    pc = kvlib.PromptCache(tiny, block_size=16, mode="explicit", clock=ManualClock())
    requests = [("fine", "acme", ids(40, 1), 32), ("bad mark", "acme", ids(40, 2), 99)]  # 99: past its 40 tokens
    app = widgets.PromptCacheStream(pc, requests, pricing.PRICING["anthropic-5m"])
    app.send()
    for _ in range(40):  # clicked again and again: 40 refusals would once have moved the clock past the TTL
        app.send()
    assert "⚠" in app.status.value and "must fall inside" in app.status.value
    assert pc.clock() == 0 and len(app.results) == 1 and len(pc.index) == 2  # the marked prefix: 2 blocks of 16


def memory_bytes(model):
    from kvlib.lessons import memory
    return memory.model_kv_bytes_per_token(model.config)


def test_a_marked_prefix_ending_inside_a_block_is_copied_before_anyone_writes_past_it(tiny):
    """Explicit mode, blocks of 16, a mark at 20: the 4 tokens after the full block are filed in a block of their
    own (the writer's block went on with its question). A hit holds that block; its first token of its own goes
    into a copy (copy-on-write of a filed block), so the filed K and V never change, whoever decodes on."""
    pc = kvlib.PromptCache(tiny, mode="explicit")
    prefix = ids(20, 3)
    writer = pc.prefill(prefix + ids(9, 4), cache_control=20)
    pool = pc.cache.pool
    assert writer.receipt.written_tokens == 20 and len(pool.index) == 2
    full, part = (pool.index[k] for k, _, _ in chains(prefix + [0], "default", [(0, 20)], pc.block_size)[0])
    assert writer.table[0] == full and part not in writer.table  # the part is a copy, the full block the writer's own
    stored = stored_blocks(pc)
    reader = pc.prefill(prefix + ids(6, 5), cache_control=20)
    assert reader.receipt.blocks == ["hit"] and reader.receipt.cached_tokens == 20
    assert reader.table[0] == full and part not in reader.table  # read in place; written into a copy
    assert_logits_close(reader.logits, tiny.forward(prefix + ids(6, 5))[-1], tiny)
    answer = pc.answer(prefix + ids(6, 6), max_new_tokens=8, cache_control=20)  # and decoding on
    assert answer.receipt.cached_tokens == 20
    assert answer.ids == kvlib.generate(tiny, prefix + ids(6, 6), max_new_tokens=8).ids
    assert_blocks_unchanged(pc, stored)
    assert pc.index.keys() == stored.keys()  # nor was a block added or dropped
    assert_no_holes(pc)


def test_a_hit_reads_the_stored_blocks_in_place(tiny):
    """No copy: a hit's block table names the blocks the index holds, in the one pool, whoever wrote them; two
    requests running at once hold each of them twice; and what they hold is what an uncached pass computes."""
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(33, 3)
    first = pc.prefill(prompt[:17])   # writes blocks 0-1
    second = pc.prefill(prompt)       # hits them, writes blocks 2-3
    stored = stored_blocks(pc)
    res = pc.prefill(prompt + ids(5, 9))
    keys = pc.block_keys(prompt, "default", pc.spans(33))
    filed = [pc.cache.pool.index[k] for k in keys]
    assert res.receipt.blocks == ["hit"] * 4 and res.table[:4] == filed
    assert res.table == [0, 1, 2, 3, 4] and pc.cache.groups[0].start == 0  # blocks in a row: one slice, not gathered
    assert filed[:2] == first.table[:2] and filed[2:] == second.table[2:4]
    assert_logits_close(res.logits, tiny.forward(prompt + ids(5, 9))[-1], tiny)
    a, b = (pc.cache.add(prompt + ids(2, s)) for s in (10, 11))  # two requests at once, on the pool itself
    assert [pc.cache.pool.refs[block] for block in filed] == [2] * 4
    assert pc.cache.sequence(a).blocks == pc.cache.sequence(b).blocks == filed
    pc.cache.release(a)
    pc.cache.release(b)
    plain = tiny.new_cache()
    tiny.forward(prompt, cache=plain)
    slots = pc.cache.token_slots(pc.cache.add(prompt))[:32]  # the filed blocks' slots, through a table
    for layer, (mine, theirs) in enumerate(zip(pc.cache.layers, plain.layers)):
        assert torch.allclose(mine.k[:, slots], theirs.keys[:, :32], atol=1e-5)
        assert torch.allclose(mine.v[:, slots], theirs.values[:, :32], atol=1e-5)
    assert_blocks_unchanged(pc, stored)


def test_a_request_runs_on_a_pool_that_grows_and_files_only_what_it_may(tiny):
    """A bounded cache's pool grows for a request longer than its budget; what stays filed is the budget's worth,
    its first blocks; the rest went free, and the next request reuses those free blocks."""
    per_block = 8 * memory_bytes(tiny)
    pc = kvlib.PromptCache(tiny, block_size=8, max_bytes=3 * per_block)
    prompt = ids(60, 2)
    r = pc.prefill(prompt).receipt
    pool = pc.cache.pool
    assert pool.n_blocks >= 8 and r.blocks == ["written"] * 3 + ["computed"] * 4  # 60 tokens held, 24 filed
    assert pc.nbytes == 3 * per_block and pool.cached == 3 and pool.in_use == 0
    grown = pool.n_blocks
    assert pc.prefill(prompt).receipt.cached_tokens == 24 and pool.n_blocks == grown  # free blocks reused
    forever = kvlib.PromptCache(tiny, block_size=8)  # no budget: everything is filed
    assert forever.prefill(prompt).receipt.written_tokens == 56 and forever.nbytes == 7 * per_block


def test_eviction_under_a_byte_budget_while_a_request_runs(tiny, monkeypatch):
    """After every step of an answer, on a ManualClock that moves 10 s a step, another request
    comes and the budget makes it evict; once the clock jumps past the TTL and everything unheld expires. The
    pool checks each drop as it happens (test_blocks.Watched: an unheld leaf, least recently used first); after
    every step no live request has lost a block and no filed block has lost its parent; the answer is
    generate's, and stops as generate stops."""
    from kvlib.server import batching
    clock = kvlib.server.prompt_cache.ManualClock()
    per_block = 4 * memory_bytes(tiny)
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=6 * per_block, ttl_seconds=30, clock=clock)
    pc.cache.pool = Watched(1, ttl_seconds=30, clock=clock)  # the same pool, checking each drop
    prompt = ids(21, 1)
    pc.prefill(prompt)  # 5 blocks filed: the answer below starts from them
    steps, real, inside = [], batching.step, []

    def step(model, batch):  # one step of the answer, then another request (whose own steps run as they are)
        record = real(model, batch)
        if not inside:
            inside.append(batch)
            clock.advance(10 if len(steps) != 4 else 100)  # the fifth jumps past the TTL: all unheld expire
            steps.append(pc.prefill(ids(13, 10 + len(steps))).receipt)
            assert_no_holes(pc)
            assert pc.nbytes <= 6 * per_block
            inside.pop()
        return record

    monkeypatch.setattr(batching, "step", step)
    got = pc.answer(prompt, max_new_tokens=8)
    monkeypatch.undo()
    want = kvlib.generate(tiny, prompt, max_new_tokens=8)
    assert (got.ids, got.stop_reason) == (want.ids, want.stop_reason) and got.receipt.cached_tokens == 20
    kinds = [e.kind for e in pc.events]
    assert "evict" in kinds and "expire" in kinds and len(steps) == 8
    assert_no_holes(pc)


def test_evicting_a_prefixs_last_blocks_frees_them_and_keeps_the_rest(tiny):
    per_block = 4 * memory_bytes(tiny)
    clock = Clock()
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=6 * per_block, clock=clock)
    first = ids(21, 1)
    pc.prefill(first)  # 5 blocks
    kept = stored_blocks(pc)
    clock.now = 1
    pc.prefill(ids(13, 2))  # 3 blocks: two of the first prompt's leaves must go
    assert sorted(e.depth for e in pc.index.values()) == [0, 0, 1, 1, 2, 2]
    assert filed_bytes(pc) == pc.nbytes == 6 * per_block and pc.cache.pool.cached == 6  # the two went free
    survivors = {key: kept[key] for key in kept if key in pc.index}
    assert len(survivors) == 3
    assert_blocks_unchanged(pc, survivors)  # in place, as they were
    res = pc.prefill(first)
    assert res.receipt.cached_tokens == 12
    assert_logits_close(res.logits, tiny.forward(first)[-1], tiny)


def test_a_chat_hit_turn_by_turn_reads_every_earlier_turn_in_place(tiny):
    """A chat that grows turn by turn files one block per turn; a later turn's hit holds every earlier turn's
    block, where it lies in the pool, and still gives the uncached logits."""
    pc = kvlib.PromptCache(tiny, block_size=4)
    chat = ids(4 * 20 + 1, 8)
    tables = []
    for turn in range(1, 21):
        res = pc.prefill(chat[:4 * turn + 1])
        tables.append(res.table)
        assert res.receipt.blocks == ["hit"] * (turn - 1) + ["written"]
    assert all(t[:k + 1] == tables[-1][:k + 1] for k, t in enumerate(tables))  # each turn's block, read by all later
    assert res.receipt.cached_tokens == 4 * 19 and pc.nbytes == 4 * 20 * memory_bytes(tiny)
    assert_logits_close(res.logits, tiny.forward(chat)[-1], tiny)


def test_anthropic_prices_use_the_lowest_published_minimum():
    """The explicit-mode price lists stand for every Claude model, so their minimum is the lowest any
    model publishes; a model with a higher one would leave a prefix uncached that these prices cache."""
    from kvlib.lessons import pricing
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
    assert stored.keys() == pc.index.keys() and all(isinstance(k, bytes) and len(k) == 16 for k in stored)
    assert_blocks_unchanged(pc, stored)
    cfg = model.config
    assert {tuple(t.shape) for ts in stored.values() for t in ts} == {(cfg.n_kv_head, 8, cfg.head_dim)}
    assert all(len(ts) == 2 * cfg.n_layer for ts in stored.values())
    assert 8 * len(stored) == first.receipt.written_tokens == 24  # 3 blocks of the prompt's first 29 tokens
    assert pc.nbytes == 24 * memory_bytes(model)


def test_the_stream_of_a_cache_without_a_ttl_offers_no_fast_forward(tiny):
    from kvlib.server.prompt_cache import ManualClock
    from kvlib.ui import widgets
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
    from kvlib.server.prompt_cache import ManualClock
    from kvlib.ui import widgets
    from kvlib.ui.views import base
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
