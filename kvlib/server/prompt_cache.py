"""Prompt caching across requests, as providers do it: a shared prefix's K and V are kept
and reused by later requests, so only the new part of a prompt goes through the model.

A policy over one pool of blocks. What a PromptCache stores are the blocks of one PagedKVCache
(paged_cache.py, blocks.py), as vLLM's automatic prefix caching is its block manager: each block is
filed in the pool's index under a hash of its tenant and every token from the prompt's start to the
block's end. A request is a sequence on that cache. It starts from the blocks of its longest cached
prefix, held by reference from the index (the pool's own memory, never a copy); the rest of its prompt
goes through the paged forward pass (batching.forward_rows; `answer` decodes on through batching.advance,
the one paged decode loop, which picks and stops as `generate` does). When it ends, the policy files
the blocks it computed, and the sequence lets go: filed blocks stay in the index, unheld, until the
pool's one eviction rule or their TTL takes them; the others go free.

What the policy decides:
- Which prefixes a prompt may hit or write (`spans`), in the two big providers' modes.
  "automatic" (OpenAI): every prompt is cut into full blocks of `block_size` tokens by itself, so
  hits come in steps of a block (128 tokens there). Prompts shorter than `min_tokens` are not cached
  at all, and a hit shorter than it counts for nothing (OpenAI: from 1,024 tokens, then 1,152...).
  "explicit" (Anthropic): nothing is cached unless the request marks where a cacheable prefix ends
  (its `cache_control` marker, here a token count, up to 4 per request), if the prefix holds at least
  `min_tokens`. A mark may end inside a block: the full blocks before it are filed as in automatic
  mode, and the tokens from the last block boundary to the mark are copied into a block of their own
  (the request's block goes on with tokens of another prefix), filed under the key of the exact
  prefix to the mark. A request that hits it holds it, and copies it before writing its own next
  token (copy-on-write of a filed block, paged_cache.py). A hit counts only at one of the request's
  own marks whose blocks are all filed, however another request cut the prefix; a receipt counts
  the marked tokens exactly.
- The budget. `max_bytes` counts blocks of the pool (a block's K and V in every layer, as the pool's
  tensors hold them): before a block is filed, room is made by the pool's one eviction rule (an unheld
  leaf, least recently used first, so no live request loses a block and no prefix has a hole), or
  the filing stops; so the bytes filed never exceed the budget. A running request is not bound by it:
  the pool grows for what it holds (a server's working memory), and what it computed beyond what is
  filed goes free when it ends. max_bytes=None files everything.
- Time. Entries expire `ttl_seconds` after their last use (checked at each lookup, or by expire()).
  A request lets go of its blocks last block first, so a prefix's first blocks are used most recently
  and a parent never expires before its children.
- Tenants never share blocks unless `share_across_tenants=True`, which exists to show why providers
  should not do that (notebook 6 and `kvlib.lessons.leak`: time to first token leaks other tenants' prompts).
"""

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from .batching import Decoding, advance, forward_rows
from .blocks import ManualClock, block_keys, full_spans  # noqa: F401 (ManualClock: PromptCache(clock=ManualClock()))
from ..errors import KVLibError, check_count, is_count, is_number
from .generate import Generation, Rules, check_sampling, stop_words
from .paged_cache import PagedKVCache

MODES = ("automatic", "explicit")
MAX_BREAKPOINTS = 4  # Anthropic accepts up to 4 cache_control markers per request


@dataclass
class Receipt:
    """Usage, as providers report it: input tokens, those read from cache, those written to it."""
    input_tokens: int
    cached_tokens: int
    written_tokens: int
    blocks: list = field(default_factory=list)  # per span (a block, or a marked prefix): "hit", "written" or "computed"
    mode: str = None  # the cache mode that wrote it ("automatic" or "explicit"); None for one made by hand


@dataclass
class Prefill:
    """One prompt through the prompt cache: what the model computed and what the cache did."""
    logits: torch.Tensor  # [vocab] at the last position
    table: list           # the request's block table as it ran: the pool blocks of its tokens, in order, the first
                          # ones (its hit) the very blocks the index holds
    receipt: Receipt
    seconds: float        # wall time of the prefill (time to first token's logits)


@dataclass
class Answer:
    text: str
    ids: list         # the sampled tokens
    receipt: Receipt
    stop: str         # as generate's: a code of generate.STOPS (max_new_tokens, end-of-text or a full context)
    stop_args: dict

    @property
    def stop_reason(self):  # the stop in words, in the language set when they are read
        return stop_words(self.stop, self.stop_args)


@dataclass
class Request:  # one request on the cache, from its lookup to its filing
    ids: list
    spans: list   # (start, end) of each prefix it may hit or write
    chains: list  # per span, the pool blocks of its prefix: [(key, start, end)]
    hits: int     # spans hit
    seq: int      # its sequence in the cache
    tenant: str


def collection(x):  # -> x's items, or [x] when it is not a collection (so a lone 3.0 is checked as one mark)
    try:
        return list(x)
    except TypeError:
        return [x]


class PromptCache:
    def __init__(self, model, block_size=16, max_bytes=None, ttl_seconds=300, clock=None,
                 share_across_tenants=False, mode="automatic", min_tokens=0):
        check_count(block_size, "block_size (tokens per block)")
        if max_bytes is not None and not (is_number(max_bytes) and max_bytes >= 0):
            raise KVLibError(f"max_bytes must be a number of bytes, 0 or more (or None: no limit), not {max_bytes!r}")
        if not (is_number(ttl_seconds) and ttl_seconds > 0):
            raise KVLibError(f"ttl_seconds must be a number of seconds above 0, not {ttl_seconds!r}")
        if mode not in MODES:
            raise KVLibError(f"mode must be one of {MODES}, not {mode!r}")
        if min_tokens < 0:
            raise KVLibError("min_tokens must be 0 or more")
        self.model, self.block_size, self.max_bytes, self.ttl = model, block_size, max_bytes, ttl_seconds
        self.mode, self.min_tokens = mode, min_tokens
        self.clock = clock or time.monotonic
        self.share_across_tenants = share_across_tenants
        # the one pool: it grows for running requests; the budget bounds what stays filed
        self.cache = PagedKVCache(model.config.n_layer, 1, block_size, ttl_seconds, self.clock, grow=True)
        # one request at a time touches the cache (a lookup, a forward call, a filing); re-entrant, so what runs
        # between two steps of an answer on its own thread may send another request (as a test does)
        self._lock = threading.RLock()

    @property
    def events(self):  # [Event] of the pool, oldest first: every hit, write, expiry and eviction
        return self.cache.pool.events

    @property
    def index(self):  # key -> the pool's Entry (depth, parent block, last use) of every block filed now
        return {entry.key: entry for entry in self.cache.pool.entries.values()}

    def kv(self, key):  # -> per layer, (K, V) [n_kv_heads, block_size, head_dim] of the block filed under key
        """Views of the pool's tensors: what every request that hits the block reads, in place."""
        bs, block = self.block_size, self.cache.pool.index[key]
        return [(layer.k[:, block * bs:(block + 1) * bs], layer.v[:, block * bs:(block + 1) * bs])
                for layer in self.cache.layers]

    @property
    def nbytes(self):  # bytes of K and V filed now (call expire() first to drop entries past their TTL)
        with self._lock:
            return len(self.cache.pool.index) * self.cache.bytes_per_block

    def expire(self):
        """Drop the entries whose TTL has run out by the clock's time now; returns how many."""
        with self._lock:
            return self.cache.pool.expire()

    def spans(self, n, cache_control=None):
        """(start, end) of each block (automatic) or marked prefix (explicit) a prompt of n tokens may hit or
        write, in order.

        At least the last token is always computed (its logits are the point of the request),
        so no span reaches it."""
        if self.mode == "automatic":
            if cache_control is not None:
                raise KVLibError("cache_control marks prefixes in mode='explicit'; "
                                 "mode='automatic' cuts every prompt into blocks by itself")
            return full_spans(n - 1, self.block_size) if n >= self.min_tokens else []  # none reaches the last token
        marks = [] if cache_control is None else [cache_control] if is_count(cache_control) else \
            collection(cache_control)
        if isinstance(cache_control, str) or not all(map(is_count, marks)):
            raise KVLibError(f"cache_control is a token count or a list of them, not {cache_control!r}")
        marks = sorted({int(m) for m in marks})  # numpy ints become plain ones
        if len(marks) > MAX_BREAKPOINTS:
            raise KVLibError(f"at most {MAX_BREAKPOINTS} cache_control breakpoints per request, not {len(marks)}")
        if marks and not 0 < marks[0] <= marks[-1] < n:
            raise KVLibError(f"cache_control {marks} must fall inside the {n}-token prompt (1 to {n - 1}), "
                             "leaving at least its last token to compute")
        ends = [m for m in marks if m >= self.min_tokens]  # shorter prefixes are never cached
        return list(zip([0] + ends[:-1], ends))

    def block_keys(self, ids, tenant, spans):
        """The hash of every span's whole prefix and tenant (blocks.block_keys, the pool's keys too)."""
        return block_keys(ids, tenant, spans, shared=self.share_across_tenants)

    def chains(self, ids, tenant, spans):
        """Per span, the pool blocks that hold its whole prefix, [(key, start, end)]: its full blocks, then
        (a mark inside a block) the part up to its end, keyed by the span's own prefix key."""
        bs = self.block_size
        full = self.block_keys(ids, tenant, full_spans(spans[-1][1], bs)) if spans else []
        return [[(key, j * bs, (j + 1) * bs) for j, key in enumerate(full[:end // bs])]
                + ([(key, end // bs * bs, end)] if end % bs else [])
                for (_, end), key in zip(spans, self.block_keys(ids, tenant, spans))]

    def prefill(self, prompt, tenant="default", cache_control=None):
        """Run a prompt through the model, reading and writing cached blocks; returns a Prefill.

        cache_control (mode="explicit" only): where cacheable prefixes end, in tokens, one int
        or a list (like Anthropic's `cache_control` marker after a system prompt)."""
        self.model.synchronize()  # time this prefill only, not work still queued on a GPU
        t0 = time.perf_counter()
        r = self._start(prompt, tenant, cache_control)
        with self._running(r), self._lock:
            logits = forward_rows(self.model, self.cache, [(r.seq, r.ids[self.cache.sequence(r.seq).reused:])])[0]
            table = list(self.cache.sequence(r.seq).blocks)
        receipt = self._finish(r)
        self.model.synchronize()  # the logits are ready only when the device says so
        return Prefill(logits, table, receipt, time.perf_counter() - t0)

    def answer(self, prompt, max_new_tokens=20, temperature=0.0, top_k=None, top_p=None, seed=None,
               tenant="default", cache_control=None):
        """`generate`'s answer (same defaults, same stops) decoded on the pool from the prompt's cached blocks;
        the prompt's new blocks are filed once the answer is done.

        The cache holds the prompt's keys and values, never an answer: every call samples anew."""
        check_sampling(max_new_tokens, temperature, top_k, top_p)
        r = self._start(prompt, tenant, cache_control)
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        d = Decoding(r.seq, Generation(prompt_ids=r.ids), Rules(max_new_tokens, temperature, top_k, top_p, generator))
        with self._running(r):
            while not d.gen.stop:
                with self._lock:  # a step at a time: other requests run between, never taking this one's blocks
                    advance(self.model, self.cache, [d], keep=True)
        return Answer(self.model.decode(d.gen.ids), d.gen.ids, self._finish(r), d.gen.stop, d.gen.stop_args)

    def _start(self, prompt, tenant, cache_control):
        """A sequence for the prompt, holding the blocks of its longest cached prefix (explicit mode: the deepest
        of its marks whose blocks are all filed)."""
        ids = self.model.check_ids(prompt).tolist()
        spans = self.spans(len(ids), cache_control)
        chains = self.chains(ids, tenant, spans)
        pool = self.cache.pool
        with self._lock:
            pool.expire()
            # a chain's last block filed means its whole chain is: the index never has a hole
            hits = next((d + 1 for d in reversed(range(len(spans))) if chains[d][-1][0] in pool.index), 0)
            if hits and spans[hits - 1][1] < self.min_tokens:
                hits = 0  # automatic mode: a hit shorter than the minimum is no hit
            chain = [key for key, _, _ in chains[hits - 1]] if hits else []
            seq = self.cache.add(tenant=tenant, hit=(pool.lookup(chain, tenant), spans[hits - 1][1] if hits else 0))
        return Request(ids, spans, chains, hits, seq, tenant)

    @contextmanager
    def _running(self, r):  # a request that fails gives its blocks back, filing nothing
        try:
            yield
        except BaseException:
            with self._lock:
                self.cache.release(r.seq)
            raise

    def _finish(self, r):
        """File the request's new blocks, its prefixes in order, within the budget; release its sequence;
        returns its Receipt."""
        pool, bs = self.cache.pool, self.block_size
        plan = {}  # key -> (start, end, its parent's key) of each block of the prefixes not hit, parents first
        for chain in r.chains[r.hits:]:
            for i, (key, start, end) in enumerate(chain):
                plan.setdefault(key, (start, end, chain[i - 1][0] if i else None))
        with self._lock:
            own = self.cache.sequence(r.seq).blocks
            placed, filed = {}, set()  # placed: key -> its block in the index; filed: keys this request filed
            for key, (start, end, parent) in plan.items():
                if key in pool.index:  # hit, or filed meanwhile by another request (this one's copy goes free)
                    placed[key] = pool.index[key]
                    pool.share(placed[key])
                elif not self._room():
                    break  # no room: what follows would hang off a block not filed
                elif end - start == self.block_size:  # a full block is filed as it is
                    placed[key] = own[start // bs]
                    pool.share(placed[key])
                else:  # the part before a mark, copied out of the block that goes on past it
                    placed[key] = self.cache.copy_of(own[start // bs])
                if key not in pool.index:
                    pool.register(placed[key], key, placed.get(parent), r.tenant)
                    filed.add(key)
            # each block placed is held once by the filing, so making room never took one; let go, deepest first,
            # so a parent is fresher than its children
            self.cache.release(r.seq)
            for block in reversed(placed.values()):
                pool.release(block)
        written = {d for d, chain in enumerate(r.chains) if chain[-1][0] in filed}  # spans whose prefix it filed
        states = ["hit" if d < r.hits else "written" if d in written else "computed" for d in range(len(r.spans))]
        return Receipt(len(r.ids), r.spans[r.hits - 1][1] if r.hits else 0,
                       sum(e - s for d, (s, e) in enumerate(r.spans) if d in written), states, self.mode)

    def _room(self):  # -> whether one more block may be filed, after evicting (the pool's rule) down to the budget
        pool = self.cache.pool
        while self.max_bytes is not None and (len(pool.index) + 1) * self.cache.bytes_per_block > self.max_bytes:
            if not pool.evict():
                return False
        return True
