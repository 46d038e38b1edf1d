"""Prompt caching across requests, as providers do it: a shared prefix's K and V are kept
and reused by later requests, so only the new part of a prompt goes through the model.

Blocks, as vLLM's automatic prefix caching: a prompt is cut into full blocks of
`block_size` tokens, and each block is stored under a hash of its tenant, its own
tokens and its parent block's hash. The hash therefore names the whole prefix up to
that block, so the longest cached prefix is found by walking a prompt's blocks from
the start until one is missing, and a partial hit reuses every full block before the
first different token. Blocks (rather than a radix tree of single tokens) also match
how providers bill: cache hits come in fixed steps (128 tokens for one of them).

Each block is stored once and shared by every request that hits it; a request copies
its hit blocks into a KVCache of its own, which it then extends, so a request never
changes what another one sees. Entries expire `ttl_seconds` after their last use;
under `max_bytes` the least recently used blocks go first (deepest first, so a
prefix is never left with a hole), and the budget is never exceeded. Tenants never
share blocks unless `share_across_tenants=True`, which exists to show why providers
do not do that (notebook 6: time to first token leaks other tenants' prompts).
"""

import hashlib
import threading
import time
from dataclasses import dataclass, field

import torch


@dataclass
class Receipt:
    """Usage, as providers report it: input tokens, those read from cache, those written to it."""
    input_tokens: int
    cached_tokens: int
    written_tokens: int
    blocks: list = field(default_factory=list)  # per full block: "hit", "written" or "computed"


@dataclass
class Result:
    logits: torch.Tensor  # [vocab] at the last position
    cache: object         # KVCache of the whole prompt, ready for decoding
    receipt: Receipt
    seconds: float        # wall time of the prefill (time to first token's logits)


@dataclass
class Block:
    keys: list    # per layer [n_kv_heads, block_size, head_dim]
    values: list
    depth: int    # 0 for the first block of a prompt
    last_used: float
    nbytes: int


class PromptCache:
    def __init__(self, model, block_size=16, max_bytes=None, ttl_seconds=300, clock=None,
                 share_across_tenants=False):
        if block_size < 1:
            raise ValueError("block_size must be at least 1 token")
        self.model, self.block_size, self.max_bytes, self.ttl = model, block_size, max_bytes, ttl_seconds
        self.clock = clock or time.monotonic
        self.share_across_tenants = share_across_tenants
        self.blocks = {}  # hash -> Block
        self.events = []  # (time, tenant, "hit" | "write" | "expire" | "evict", depth)
        self._lock = threading.Lock()

    @property
    def nbytes(self):  # bytes of K and V held now (entries past their TTL are dropped first)
        self.expire()
        with self._lock:
            return sum(b.nbytes for b in self.blocks.values())

    def expire(self):
        """Drop the entries whose TTL has run out by the clock's time now; returns how many."""
        with self._lock:
            return self._expire(self.clock())

    def block_keys(self, ids, tenant):
        """The chained hash of every full block of ids: each names its whole prefix."""
        key = ("*" if self.share_across_tenants else f"tenant:{tenant}").encode()
        keys = []
        for start in range(0, len(ids) - self.block_size + 1, self.block_size):
            block = torch.tensor(ids[start:start + self.block_size], dtype=torch.int64).numpy().tobytes()
            key = hashlib.blake2b(key + block, digest_size=16).digest()
            keys.append(key)
        return keys

    def prefill(self, prompt, tenant="default"):
        t0 = time.perf_counter()
        ids = self.model.check_ids(prompt).tolist()
        # at least the last token is computed: its logits are the point of the request
        keys = self.block_keys(ids[:-1], tenant)
        cache = self.model.new_cache()
        with self._lock:
            now = self.clock()
            self._expire(now)
            hits = []
            for k in keys:
                if k not in self.blocks:
                    break
                hits.append(self.blocks[k])
            for b in hits:
                b.last_used = now
                self.events.append((now, tenant, "hit", b.depth))
            for layer, cached in enumerate(cache.layers):  # copy while the blocks cannot be evicted
                if hits:  # room for the whole prompt, so the hit is copied in once and never regrown
                    cached.reserve(len(ids), hits[0].keys[layer])
                    cached.append(torch.cat([b.keys[layer] for b in hits], 1),
                                  torch.cat([b.values[layer] for b in hits], 1))
        logits = self.model.forward(ids[len(cache):], cache=cache, last_only=True)[-1]
        written = self._store(cache, keys, len(hits), tenant)
        receipt = Receipt(len(ids), len(hits) * self.block_size, written * self.block_size,
                          ["hit"] * len(hits) + ["written"] * written + ["computed"] * (len(keys) - len(hits) - written))
        return Result(logits, cache, receipt, time.perf_counter() - t0)

    def _store(self, cache, keys, start, tenant):
        """Write the request's new full blocks, oldest first, within the byte budget."""
        B, written = self.block_size, 0
        with self._lock:
            now = self.clock()
            for depth in range(start, len(keys)):
                if keys[depth] in self.blocks:  # another request wrote it meanwhile
                    self.blocks[keys[depth]].last_used = now
                    continue
                if depth and keys[depth - 1] not in self.blocks:
                    break  # its parent was evicted: the block could never be reached
                span = slice(depth * B, (depth + 1) * B)
                k = [layer.keys[:, span].clone() for layer in cache.layers]
                v = [layer.values[:, span].clone() for layer in cache.layers]
                nbytes = sum(t.numel() * t.element_size() for t in k + v)
                if not self._make_room(nbytes, protect=set(keys[:depth])):
                    break
                self.blocks[keys[depth]] = Block(k, v, depth, now, nbytes)
                self.events.append((now, tenant, "write", depth))
                written += 1
        return written

    def _make_room(self, nbytes, protect):
        if self.max_bytes is None:
            return True
        if nbytes > self.max_bytes:
            return False
        used = sum(b.nbytes for b in self.blocks.values())
        # least recently used first; among equals the deepest, so prefixes stay whole
        victims = sorted((k for k in self.blocks if k not in protect),
                         key=lambda k: (self.blocks[k].last_used, -self.blocks[k].depth))
        while used + nbytes > self.max_bytes and victims:
            k = victims.pop(0)
            used -= self.blocks[k].nbytes
            self.events.append((self.clock(), None, "evict", self.blocks.pop(k).depth))
        return used + nbytes <= self.max_bytes

    def _expire(self, now):
        old = [k for k, b in self.blocks.items() if now - b.last_used > self.ttl]
        for k in old:
            self.events.append((now, None, "expire", self.blocks.pop(k).depth))
        return len(old)
