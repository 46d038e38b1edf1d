"""One pool of KV blocks for every sequence a server holds, and the index that makes it a prompt
cache: vLLM's automatic prefix caching, nano-vllm's block manager.

A block is room for the K and V of block_size tokens. The pool counts each block's holders (the
sequences whose block tables name it): a sequence takes a block when its last one is full, holds
another's by reference, and lets go when it ends.

A full block's tokens never change again, so its K and V can outlive the sequence that computed
them. The pool files such a block in an index under its key: a hash of its tenant and of every
token from the prompt's start to the block's end (`block_keys`). A later prompt that starts with
the same tokens finds those blocks there and holds them instead of computing them again. When
the last holder of an indexed block lets go, the block stays in the index, unheld, on an LRU
list; its memory is taken back only when an allocation finds no free block, or when its TTL runs
out (`ttl_seconds`, on an injectable clock, so a test or a lesson can tick it by hand).

One eviction rule: only an unheld block goes, the least recently used first, and only a leaf (a
block that no indexed block continues), so the index never holds a block whose prefix is gone (a
hole: no prompt could reach it). An indexed block's parent has a child, so it goes only after it,
and a held block is never a candidate: no live sequence loses a block. Every hit, write, expiry
and eviction is appended to `events`, which the views read. This is the one pool of kvlib: a
PagedKVCache's, and through it a PromptCache's.

Every block is free, held (`in_use`) or kept unheld by the index (`cached`), so the counters
keep allocated == freed + cached + in_use.
"""

import hashlib
import heapq
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..errors import KVLibError, check_count, is_count, is_number


class ManualClock:
    """A clock moved by hand, so a notebook or a test can pass a five-minute TTL without waiting.

    Pass it as PromptCache(..., clock=ManualClock()) or BlockPool(..., clock=...); it reads `now` seconds."""

    def __init__(self, now=0.0):
        self.now = float(now)

    def __call__(self):
        return self.now

    def advance(self, seconds):
        if seconds < 0:
            raise KVLibError("a clock only moves forward: advance it by 0 seconds or more")
        self.now += seconds
        return self.now


class Event(NamedTuple):
    """What happened to one block, when: a hit, a write, an expiry or an eviction."""
    time: float
    tenant: str   # None for an expiry or an eviction: the cache's doing, not a request's
    kind: str     # "hit" | "write" | "expire" | "evict"
    depth: int    # 0 for a prompt's first block
    key: bytes    # the block's key: the hash of its tenant and whole prefix


def block_keys(ids, tenant, spans, shared=False):
    """The hash of every block's whole prefix (and tenant), from the prompt's start to the block's end:
    the same prefix cut by other marks has the same key at its end (Anthropic's cache is keyed by the
    prefix). The tenant's name is hashed on its own first, to a fixed 16 bytes: were it joined to the
    tokens' bytes, a name ending in token bytes could forge another tenant's key (tested). shared=True
    puts every tenant in one namespace (PromptCache's share_across_tenants)."""
    if not isinstance(tenant, str):  # None and "None" must not share a key
        raise KVLibError(f"a tenant is named by a string, not {tenant!r}")
    name = ("*" if shared else f"tenant:{tenant}").encode()
    prefix = hashlib.blake2b(hashlib.blake2b(name, digest_size=16).digest(), digest_size=16)
    keys = []
    for start, end in spans:  # one after another from token 0: each block's tokens extend the prefix
        prefix.update(torch.tensor(ids[start:end], dtype=torch.int64).numpy().tobytes())
        keys.append(prefix.copy().digest())
    return keys


def full_spans(n_tokens, block_size):  # (start, end) of each full block n tokens fill, from token 0
    return [(end - block_size, end) for end in range(block_size, n_tokens + 1, block_size)]


def prompt_spans(n_tokens, block_size):  # the full blocks of a prompt of n tokens that a later prompt may read
    return full_spans(n_tokens - 1, block_size)  # never its last token: its logits pick the first answer token


def chains(ids, tenant, spans, block_size, shared=False):
    """Per span (a prefix the prompt may read from the index or file there), the blocks that hold it,
    [(key, start, end)]: its full blocks, then (a span ending inside a block: a PromptCache's mark) the part up
    to its end, keyed by the span's own prefix (a prefix's key does not depend on where it was cut)."""
    full = block_keys(ids, tenant, full_spans(spans[-1][1], block_size), shared) if spans else []
    return [[(key, j * block_size, (j + 1) * block_size) for j, key in enumerate(full[:end // block_size])]
            + ([(key, end // block_size * block_size, end)] if end % block_size else [])
            for (_, end), key in zip(spans, block_keys(ids, tenant, spans, shared))]


@dataclass
class Entry:  # what the index knows of a block filed in it
    key: bytes
    parent: int        # the block before it in its prefix (None for a prompt's first)
    depth: int         # 0 for a prompt's first block
    last_used: float
    children: int = 0  # indexed blocks that continue it: with none, it is a leaf


class BlockPool:
    """n_blocks blocks handed out and taken back, with a count of holders per block, and the index of
    filed blocks by key (full blocks, and a prompt cache's copied parts up to a mark). A block goes back to
    the free list when its last holder lets go, unless the index keeps it (cached: unheld, evictable).

    The free list is a heap, so the lowest free block goes first and the blocks in use stay packed at
    the start of the pool and a lone sequence's blocks often lie one after another (paged_cache reads
    them as one slice of the pool)."""

    def __init__(self, n_blocks, ttl_seconds=None, clock=None):
        check_count(n_blocks, "a pool's n_blocks")
        if ttl_seconds is not None and not (is_number(ttl_seconds) and ttl_seconds > 0):
            raise KVLibError(f"ttl_seconds must be a number of seconds above 0 (or None: no TTL), not {ttl_seconds!r}")
        self.n_blocks, self.ttl, self.clock = n_blocks, ttl_seconds, clock or time.monotonic
        self.free = list(range(n_blocks))  # sorted, so already a heap
        self.refs = [0] * n_blocks         # holders of each block
        self.index = {}                    # key -> block
        self.entries = {}                  # block -> Entry, for every indexed block
        self.lru = OrderedDict()           # indexed blocks nobody holds, least recently used first
        self.events = []                   # [Event], oldest first
        self.allocated = self.freed = 0    # blocks taken from and given back to the free list, ever

    @property
    def cached(self):  # blocks the index keeps that no sequence holds
        return len(self.lru)

    @property
    def in_use(self):  # blocks held by at least one sequence
        return self.n_blocks - len(self.free) - len(self.lru)

    @property
    def available(self):  # blocks an allocation can get: the free ones, and the cached ones it may evict
        # every cached block can go, leaves first: a holder of a filed block holds its parents too (PagedKVCache.file)
        return len(self.free) + len(self.lru)

    def check(self, block):
        if not (is_count(block) and 0 <= block < self.n_blocks):
            raise KVLibError(f"there is no block {block!r}: blocks are numbered 0 to {self.n_blocks - 1}")

    def allocate(self):  # -> a block, held once: a free one, else one whose cached K and V are evicted
        if not self.free and not self.evict():
            raise KVLibError(f"all {self.n_blocks} blocks of the pool are in use: let a request finish "
                             "(release it) before adding more, or make the pool larger")
        block = heapq.heappop(self.free)
        self.refs[block] = 1
        self.allocated += 1
        return block

    def share(self, block):  # one more holder of a block in use, or the first of a cached one
        self.check(block)
        if self.refs[block] == 0:
            if block not in self.lru:
                raise KVLibError(f"block {block} is free: only a block in use or cached can be shared")
            del self.lru[block]
        self.refs[block] += 1

    def release(self, block):  # one holder fewer; after the last, the index keeps the block or it is free
        self.check(block)
        if self.refs[block] == 0:
            raise KVLibError(f"block {block} is already free")
        self.refs[block] -= 1
        if self.refs[block] == 0:
            if block in self.entries:
                self.entries[block].last_used = self.clock()
                self.lru[block] = None  # the most recently used end
            else:
                self._free(block)

    def lookup(self, keys, tenant):
        """-> the blocks of the longest prefix of `keys` the index holds, each now held once more.
        keys: a prompt's block keys from its first; the index has no holes, so the prefix is found
        by walking from the start. (Call expire() first, so that what is past its TTL is not found.)"""
        now, blocks = self.clock(), []
        for key in keys:
            if key not in self.index:
                break
            block = self.index[key]
            self.share(block)
            self.entries[block].last_used = now
            self.events.append(Event(now, tenant, "hit", self.entries[block].depth, key))
            blocks.append(block)
        return blocks

    def register(self, block, key, parent, tenant):
        """File a held block (full, or a copied part up to a mark) under `key`, after `parent` (the indexed block before it in its
        sequence, or None for a prompt's first); -> False, filing nothing, when another block holds
        the key already (two sequences computed one prefix: the first filed stays)."""
        if self.refs[block] == 0 or block in self.entries:
            raise KVLibError(f"block {block} is free or filed already: only a held block is filed, once")
        if key in self.index:
            return False
        depth = 0 if parent is None else self.entries[parent].depth + 1
        if parent is not None:
            self.entries[parent].children += 1
        now = self.clock()
        self.index[key], self.entries[block] = block, Entry(key, parent, depth, now)
        self.events.append(Event(now, tenant, "write", depth, key))
        return True

    def expire(self):
        """Drop the unheld blocks whose TTL has run out by the clock's time now, leaves first (so no
        hole opens); -> how many. A block's children are never used more recently than it, so a
        parent past its TTL has none left once its expired children are gone."""
        if self.ttl is None:
            return 0
        now, n = self.clock(), 0
        while old := [b for b in self._leaves() if now - self.entries[b].last_used > self.ttl]:
            for block in old:
                self._drop(block, "expire", now)
            n += len(old)
        return n

    def grow(self, n):  # n more blocks, free (their memory is the caller's: PagedKVCache.grow)
        check_count(n, "blocks to grow a pool by")
        self.free.extend(range(self.n_blocks, self.n_blocks + n))  # above every block in the heap: still a heap
        self.refs.extend([0] * n)
        self.n_blocks += n

    def _leaves(self):  # unheld indexed blocks that no indexed block continues, least recently used first
        return (b for b in self.lru if self.entries[b].children == 0)

    def evict(self):  # -> whether a block went: the least recently used unheld leaf, out of the index, freed
        block = next(self._leaves(), None)
        if block is not None:
            self._drop(block, "evict", self.clock())
        return block is not None

    def _drop(self, block, why, now):  # out of the index, onto the free list
        entry = self.entries.pop(block)
        del self.index[entry.key], self.lru[block]
        if entry.parent is not None:
            self.entries[entry.parent].children -= 1
        self.events.append(Event(now, None, why, entry.depth, entry.key))
        self._free(block)

    def _free(self, block):
        heapq.heappush(self.free, block)
        self.freed += 1

    def __repr__(self):
        return (f"BlockPool({self.in_use} of {self.n_blocks} blocks in use, {self.cached} cached, "
                f"{len(self.free)} free, {len(self.index)} in the index)")
