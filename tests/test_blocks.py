"""The block pool: holders counted, full blocks filed in an index by the hash of their tenant and prefix, kept
unheld until their memory is needed, and evicted by one rule (unheld, least recently used, leaves first) that
never leaves a hole. Every check here is a count or an identity the pool keeps, under a clock moved by hand."""

import random

import pytest
import torch

import kvlib
from kvlib import KVLibError
from kvlib.lessons.compression import heldout_ids
from kvlib.model.measure import random_ids
from kvlib.server.batching import forward_rows
from kvlib.server.blocks import BlockPool, ManualClock, block_keys, full_spans
from kvlib.server.sampling import sample
from kvlib.server.paged_cache import PagedKVCache, blocks_for

from bounds import assert_logits_close, hf_logits
from conftest import hf_greedy, hf_model


def check_pool(pool, held):
    """What must hold after anything the pool does. held: {sequence: [blocks]} of the live sequences."""
    assert pool.allocated == pool.freed + pool.cached + pool.in_use  # every block taken is back, kept or held
    holders = [0] * pool.n_blocks
    for blocks in held.values():
        for b in blocks:
            holders[b] += 1
    assert pool.refs == holders  # no live sequence lost a block, nor holds one the pool counts as free
    assert set(pool.lru) == {b for b in pool.entries if holders[b] == 0}  # cached: exactly the unheld indexed ones
    assert not set(pool.free) & set(pool.entries) and len(pool.free) + pool.in_use + pool.cached == pool.n_blocks
    for block, entry in pool.entries.items():  # no hole: every indexed block's prefix is indexed
        assert pool.index[entry.key] == block
        assert entry.parent is None or pool.entries[entry.parent].depth == entry.depth - 1
        assert entry.children == sum(e.parent == block for e in pool.entries.values())


def start(pool, prompt, tenant="default"):  # a sequence of blocks of 1 token: its cached prefix, then its own
    keys = block_keys(prompt, tenant, full_spans(len(prompt), 1))
    pool.expire()  # what is past its TTL goes first, so it is not found
    blocks = pool.lookup(keys, tenant)
    filing = True
    for key in keys[len(blocks):]:
        blocks.append(pool.allocate())
        filing = filing and pool.register(blocks[-1], key, blocks[-2] if len(blocks) > 1 else None, tenant)
    return blocks


def test_holders_are_counted_and_the_lowest_free_block_goes_first():
    pool = BlockPool(4)
    a, b = pool.allocate(), pool.allocate()
    pool.share(a)
    assert (a, b, pool.refs, pool.in_use) == (0, 1, [2, 1, 0, 0], 2)
    pool.release(a)
    pool.release(b)  # not indexed: straight back to the free list
    assert pool.free[0] == 1 and pool.refs == [1, 0, 0, 0]
    pool.release(a)
    assert (pool.allocated, pool.freed, pool.in_use, pool.cached) == (2, 2, 0, 0)


def test_a_filed_block_outlives_its_holder_until_its_memory_is_needed():
    """A prompt's blocks are filed; the sequence ends and they stay, unheld; the same prompt then reads them
    instead of new ones. A pool with no free block takes back the memory of the least recently used leaf."""
    clock = ManualClock()
    pool = BlockPool(3, clock=clock)
    first = start(pool, [5, 6, 7])
    assert [e.kind for e in pool.events] == ["write"] * 3
    for b in first:
        pool.release(b)
    assert (pool.cached, pool.in_use, pool.freed) == (3, 0, 0)
    clock.advance(1)
    again = start(pool, [5, 6, 7])
    assert again == first and pool.cached == 0 and [e.kind for e in pool.events[3:]] == ["hit"] * 3
    check_pool(pool, {0: again})
    for b in again:
        pool.release(b)
    other = start(pool, [5, 9])  # shares the first block, needs one more: the deepest of 5 6 7 goes
    assert other[0] == first[0] and pool.events[-2][2:4] == ("evict", 2) and pool.events[-1][2] == "write"
    check_pool(pool, {0: other})
    assert pool.allocated == 4 and pool.freed == 1


class Watched(BlockPool):
    """A pool that checks each block it drops, as it drops it: an unheld leaf; an evicted one used no later
    than any other unheld leaf (least recently used first); an expired one past its TTL."""

    def _drop(self, block, why, now):
        leaves = [b for b in self.lru if self.entries[b].children == 0]
        assert block in leaves and self.refs[block] == 0
        last_used = self.entries[block].last_used
        if why == "evict":
            assert last_used == min(self.entries[b].last_used for b in leaves)
        else:
            assert now - last_used > self.ttl
        super()._drop(block, why, now)


def test_eviction_takes_unheld_leaves_least_recently_used_first_and_never_leaves_a_hole():
    """Sequences come and go on a pool too small to keep everything, their prompts sharing prefixes, the clock
    ticking past the TTL now and then: every drop follows the rule (Watched), and after each step no live
    sequence has lost a block and the index has no hole (check_pool)."""
    kinds = set()
    for seed in range(4):
        rng, clock = random.Random(seed), ManualClock()
        pool, held = Watched(8, ttl_seconds=30, clock=clock), {}
        prompts = [[rng.choice([1, 2]) for _ in range(rng.randint(1, 5))] for _ in range(12)]  # many common prefixes
        for n in range(200):
            clock.advance(rng.choice([1, 2, 3]))
            if held and (rng.random() < 0.45 or len(held) > 3):
                for b in held.pop(rng.choice(list(held))):
                    pool.release(b)
            else:
                prompt = rng.choice(prompts)
                if len(prompt) <= pool.available:  # admission: room for the whole prompt, cached blocks counted
                    held[n] = start(pool, prompt, rng.choice(["alice", "bob"]))
            check_pool(pool, held)
        kinds |= {e.kind for e in pool.events}
    assert kinds == {"hit", "write", "evict", "expire"}


@pytest.mark.parametrize("name", ["tiny", "small_llama"])  # GPT-2's position table, and RoPE with grouped heads
def test_rows_after_a_prefix_hit_equal_an_uncached_pass(name, request):
    """A prompt of 13 tokens files its 3 full blocks of 4; after it ends, a prompt that starts with the same
    12 tokens holds those blocks and is fed only the rest. Every row it computes, and each decode step after,
    gives the logits transformers gives the whole text in one pass, with no cache at all. A third prompt hits
    the first two blocks while the second still holds them; one that is nothing but the cached prefix still
    feeds its last block, whose last token's logits pick its first answer token."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    cache = PagedKVCache(model.config.n_layer, n_blocks=16, block_size=4)
    shared = random_ids(model, 12, seed=3)
    first = cache.add(shared + [7])
    forward_rows(model, cache, [(first, shared + [7])])
    cache.file(first)  # what the call wrote goes into the index, as the step's postprocess files it
    cached = cache.sequence(first).blocks[:3]
    cache.release(first)
    assert (cache.pool.cached, cache.pool.in_use) == (3, 0)

    text = shared + [5, 6, 2]
    second = cache.add(text)
    assert cache.sequence(second).reused == 12 and cache.sequence(second).blocks == cached  # by reference
    cache.schedule([(second, 3)])
    logits = model.family.forward(torch.tensor(text[12:]), model.params, model.config, cache)  # [3, V]
    assert_logits_close(logits, hf_logits(hf, text)[12:], model)
    for t in (9, 4):
        text.append(t)
        assert_logits_close(forward_rows(model, cache, [(second, [t])])[-1], hf_logits(hf, text)[-1], model)

    other = shared[:9] + [1, 1, 1]  # its third block differs: two blocks hit, held by both
    third = cache.add(other)
    assert cache.sequence(third).reused == 8 and cache.pool.refs[cached[0]] == cache.pool.refs[cached[1]] == 2
    whole = cache.add(shared)  # 12 tokens, 3 full blocks: the last is fed, not read
    assert cache.sequence(whole).reused == 8
    assert cache.sequence(cache.add(shared, tenant="mallory")).reused == 0  # tenants never share a block
    rows = forward_rows(model, cache, [(third, other[8:]), (whole, shared[8:])])  # [2, V]
    assert_logits_close(rows[0], hf_logits(hf, other)[-1], model)
    assert_logits_close(rows[1], hf_logits(hf, shared)[-1], model)


def test_eviction_while_requests_run_never_takes_a_live_block(tiny, hf_tiny):
    """Requests that share an 8-token system prompt (two blocks of 4), some asked again, run two at a time on a
    pool of 7 blocks, each admitted when the blocks all live ones will hold at their ends fit (as serve admits),
    under a clock that ticks 4 s a decode step and a 30 s TTL passed once, before request 7. The pool keeps
    what ended while it has room, evicts least recently used leaves when it needs room, and expires what waited
    too long, never a held block (Watched checks each drop as it happens); after every forward call no live
    sequence has lost a block and the index has no hole (check_pool), and every answer is transformers'
    greedy answer to its prompt alone."""
    clock = ManualClock()
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=7, block_size=4)
    cache.pool = Watched(7, ttl_seconds=30, clock=clock)  # the same pool, checking each drop as it happens
    play = heldout_ids(tiny, 600)  # text: tiny answers random ids alike, whatever they are
    system = play[:8]
    p = [system + play[a:a + n] for a, n in ((100, 1), (200, 6), (300, 2), (400, 9), (500, 3))]
    prompts = [p[0], p[1], p[2], p[1], p[3], p[4], p[2], play[50:65], p[0], p[3]]
    need = [blocks_for(len(prompt) + 2, 4) for prompt in prompts]  # held at the end: 3 answer tokens, the last unfed
    answers, reused, live = [[] for _ in prompts], [], {}  # live: request -> sequence

    def decode():  # one step: every live request takes a token; those with 3 leave
        clock.advance(4)
        logits = forward_rows(tiny, cache, [(s, answers[j][-1:]) for j, s in live.items()])
        check_pool(cache.pool, {s: q.blocks for s, q in cache.sequences.items()})
        for (j, s), row in zip(list(live.items()), logits):
            answers[j].append(sample(row))
            if len(answers[j]) == 3:
                cache.release(live.pop(j))

    for i, prompt in enumerate(prompts):
        while live and (len(live) == 2 or sum(need[j] for j in live) + need[i] > 7):
            decode()
        clock.advance(31 if i == 7 else 0)
        live[i] = cache.add(prompt)
        reused.append(cache.sequence(live[i]).reused)
        answers[i].append(sample(forward_rows(tiny, cache, [(live[i], prompt[reused[-1]:])])[-1]))
        cache.file(live[i])  # its prompt's blocks, as the step's postprocess files them
        check_pool(cache.pool, {s: q.blocks for s, q in cache.sequences.items()})
    while live:
        decode()
    assert {e.kind for e in cache.pool.events} == {"hit", "write", "evict", "expire"}
    # every request after the first reads the system prompt's 8 tokens, and p[1] asked again its own third
    # block too; the pause before request 7 expired every unheld block, the system prompt's too (nobody held
    # it), so request 8 computes it again, and request 9 reads it from there
    assert reused == [0, 8, 8, 12, 8, 8, 8, 0, 0, 8]
    for prompt, answer in zip(prompts, answers):
        assert answer == hf_greedy(hf_tiny[0], prompt, 3, stop_at_eos=False)


def test_tenants_never_share_a_key_and_prompt_cache_keys_its_blocks_the_same_way(tiny):
    ids, spans = list(range(10, 42)), full_spans(32, 16)
    assert block_keys(ids, "alice", spans) != block_keys(ids, "bob", spans)
    assert block_keys(ids, "alice", spans)[0] == block_keys(ids[:16] + [7] * 16, "alice", spans)[0]
    assert block_keys(ids, "alice", spans, shared=True) == block_keys(ids, "bob", spans, shared=True)
    pc = kvlib.PromptCache(tiny, block_size=16)
    assert pc.block_keys(ids, "alice", spans) == block_keys(ids, "alice", spans)
    assert pc.spans(33) == full_spans(32, 16) == [(0, 16), (16, 32)]  # the last token is never in a block


def test_clear_errors():
    pool = BlockPool(2)
    with pytest.raises(KVLibError, match="already free"):
        pool.release(0)
    with pytest.raises(KVLibError, match="only a block in use or cached"):
        pool.share(1)
    for block in (-1, 2, 1.0):
        with pytest.raises(KVLibError, match="blocks are numbered 0 to 1"):
            pool.release(block)
    assert pool.free == [0, 1]
    with pytest.raises(KVLibError, match="free or filed already"):
        pool.register(0, b"k", None, "default")
    held = [pool.allocate(), pool.allocate()]
    with pytest.raises(KVLibError, match="all 2 blocks of the pool are in use"):
        pool.allocate()
    assert held == [0, 1] and pool.in_use == 2
    for ttl in (0, -5, "300"):
        with pytest.raises(KVLibError, match="ttl_seconds must be a number of seconds above 0"):
            BlockPool(2, ttl_seconds=ttl)
    with pytest.raises(KVLibError, match="n_blocks must be a whole number"):
        BlockPool(0)
    with pytest.raises(KVLibError, match="a tenant is named by a string"):
        block_keys([1, 2], None, [(0, 2)])
    cache = PagedKVCache(1, n_blocks=2, block_size=4)
    with pytest.raises(KVLibError, match="prompt_ids .* or prefix_of .*, not both"):
        cache.add([1, 2], prefix_of=cache.add())
    for not_ids in ("To be", [1, 2.0]):
        with pytest.raises(KVLibError, match="prompt's token ids .*model.encode"):
            cache.add(not_ids)
    with pytest.raises(KVLibError, match="a tenant is named by a string"):
        cache.add([1, 2], tenant=None)


def test_a_pool_without_a_clock_reads_the_time_at_each_call(monkeypatch):
    """Without a clock given, the pool reads time.monotonic each time it needs the time: a block filed at
    t = 100 and let go expires once the time passes 100 + TTL (a pool that read the clock once, when it was
    built, would expire nothing)."""
    now = [100.0]
    monkeypatch.setattr(kvlib.server.blocks.time, "monotonic", lambda: now[0])
    pool = BlockPool(4, ttl_seconds=300)
    blocks = start(pool, [5, 6])
    for b in blocks:
        pool.release(b)
    now[0] = 399.0
    assert pool.expire() == 0 and pool.cached == 2
    now[0] = 401.0
    assert pool.expire() == 2 and pool.cached == 0
    check_pool(pool, {})


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError])
def test_a_request_that_fails_mid_answer_gives_every_block_back(tiny, monkeypatch, failure):
    """A Stop pressed (KeyboardInterrupt) or an error (RuntimeError) in the third forward call of an answer: the
    request's blocks all go back; what was filed stays filed, the blocks of its prompt that its prefill wrote (and
    the step filed) too, whole: the same prompt sent again reads them and answers as generate does, and the next
    request runs as if nothing had happened."""
    pc = kvlib.PromptCache(tiny, block_size=4)
    system = tiny.encode("The king is dead, long live the king. ") * 2
    first = pc.answer(system + [11], max_new_tokens=3)
    filed, pool = dict(pc.cache.pool.index), pc.cache.pool
    calls, real = [0], kvlib.server.batching.forward_rows

    def failing(*args):  # every forward call of an answer goes through batching.forward_rows
        calls[0] += 1
        if calls[0] == 3:
            raise failure("planted")
        return real(*args)

    monkeypatch.setattr(kvlib.server.batching, "forward_rows", failing)
    with pytest.raises(failure):
        pc.answer(system + [12] * 9, max_new_tokens=5)
    assert calls[0] == 3  # it failed where planted, mid-answer
    assert pool.in_use == 0 and filed.items() < dict(pool.index).items()  # every block back; its prompt's filed
    check_pool(pool, {})
    monkeypatch.undo()
    again = pc.answer(system + [11], max_new_tokens=3)
    assert again.ids == first.ids and again.receipt.cached_tokens > 0
    resent = pc.answer(system + [12] * 9, max_new_tokens=5)
    assert resent.receipt.cached_tokens > again.receipt.cached_tokens  # it reads what the failed request filed
    assert resent.ids == kvlib.generate(tiny, system + [12] * 9, max_new_tokens=5).ids
