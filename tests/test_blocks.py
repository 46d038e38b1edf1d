"""The block pool: holders counted, full blocks filed in an index by the hash of their tenant and prefix, kept
unheld until their memory is needed, and evicted by one rule (unheld, least recently used, leaves first) that
never leaves a hole. Every check here is a count or an identity the pool keeps, under a clock moved by hand."""

import random

import pytest

import kvlib
from kvlib import KVLibError
from kvlib.blocks import BlockPool, ManualClock, block_keys, full_spans


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
