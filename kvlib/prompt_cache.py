"""Prompt caching across requests, as providers do it: a shared prefix's K and V are kept
and reused by later requests, so only the new part of a prompt goes through the model.

Blocks, as vLLM's automatic prefix caching: a prompt is cut into blocks, and each block
is stored under a hash of its tenant and every token from the prompt's start to the
block's end. The hash names the whole prefix, however a request cut it into blocks, so
the longest cached prefix is the last of a prompt's block ends whose hash is stored (its
blocks found from there, each naming the one before it), and a partial hit reuses every
block before the first different token.

Two modes, as the two big providers cache:
- "automatic" (OpenAI): every prompt is cut into full blocks of `block_size` tokens by
  itself, so hits come in steps of a block (128 tokens there). Prompts shorter than
  `min_tokens` are not cached at all, and a hit shorter than it counts for nothing
  (OpenAI: from 1,024 tokens, then 1,152, 1,280...).
- "explicit" (Anthropic): nothing is cached unless the request marks where a cacheable
  prefix ends (its `cache_control` marker, here a token count, up to 4 per request);
  each marked prefix ends a block (from the mark before it), cached whole, if the prefix
  holds at least `min_tokens`.

Each block is stored once and shared by every request that hits it, by reference: the
request's KVCache starts from the stored tensors themselves (not copied in, as vLLM's
block tables point at shared blocks; each call gathers them beside the request's own
tokens) and puts its own tokens in a buffer of its own after them, so a request never
changes what another one sees (kv_cache.py: copy-on-write).
The blocks one request writes are cut from one tensor per layer (a run), so a later hit
on them reads one piece per layer, not one per block; when eviction takes some of a
run's blocks, the rest are copied into a smaller run, so the bytes counted are the bytes
held. (A request still reading an evicted run keeps it alive until it ends, as vLLM
frees a block only when no running request holds it.) Entries expire `ttl_seconds`
after their last use (checked at each lookup, or by expire()); under `max_bytes` the least
recently used blocks go first, and the bytes stored never exceed it. A prefix is never left with a hole: only leaves are evicted (blocks that no
stored block continues), as vLLM frees a request's tail blocks first and SGLang's radix
tree evicts leaves; and using or writing a block renews its ancestors too, so a parent
never expires before its children. Tenants never share blocks unless
`share_across_tenants=True`, which exists to show why providers should not do that
(notebook 6 and `kvlib.leak`: time to first token leaks other tenants' prompts).
"""

import threading
import time
from dataclasses import dataclass, field

import torch

from .blocks import Event, ManualClock, block_keys, full_spans  # ManualClock: PromptCache(clock=ManualClock())
from .errors import KVLibError, check_count, is_count, is_number
from .generate import check_sampling, generate

MODES = ("automatic", "explicit")
MAX_BREAKPOINTS = 4  # Anthropic accepts up to 4 cache_control markers per request


@dataclass
class Receipt:
    """Usage, as providers report it: input tokens, those read from cache, those written to it."""
    input_tokens: int
    cached_tokens: int
    written_tokens: int
    blocks: list = field(default_factory=list)  # per block: "hit", "written" or "computed"
    mode: str = None  # the cache mode that wrote it ("automatic" or "explicit"); None for one made by hand


@dataclass
class Prefill:
    """One prompt through the prompt cache: what the model computed and what the cache did."""
    logits: torch.Tensor  # [vocab] at the last position
    cache: object         # KVCache of the whole prompt, ready for decoding
    receipt: Receipt
    seconds: float        # wall time of the prefill (time to first token's logits)


@dataclass
class Answer:
    text: str
    ids: list       # the sampled tokens
    receipt: Receipt


@dataclass(eq=False)  # compared and hashed by identity: a run is one allocation, not a value
class Run:
    """The K and V of consecutive blocks written together, one tensor per layer."""
    keys: list    # per layer [n_kv_heads, tokens, head_dim]
    values: list

    @property
    def bytes_per_token(self):
        return sum(t[:, :1].numel() * t.element_size() for t in self.keys + self.values)


@dataclass
class Block:
    run: Run
    start: int    # where its tokens sit in the run
    end: int
    depth: int    # 0 for the first block of a prompt
    last_used: float
    parent: bytes = None  # the hash of the block before it (None at depth 0)

    @property
    def keys(self):  # per layer [n_kv_heads, tokens in the block, head_dim]: views of the run
        return [k[:, self.start:self.end] for k in self.run.keys]

    @property
    def values(self):
        return [v[:, self.start:self.end] for v in self.run.values]

    @property
    def nbytes(self):
        return (self.end - self.start) * self.run.bytes_per_token


def stretches(blocks):  # -> [[run, start, end]]: consecutive blocks of one run joined into one stretch
    out = []
    for b in blocks:
        if out and out[-1][0] is b.run and out[-1][2] == b.start:
            out[-1][2] = b.end
        else:
            out.append([b.run, b.start, b.end])
    return out


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
        self.blocks = {}  # hash -> Block
        self.events = []  # [Event], oldest first
        self._loose = set()  # runs that lost blocks since the last _compact()
        self._lock = threading.Lock()

    @property
    def nbytes(self):  # bytes of K and V held now (call expire() first to drop entries past their TTL)
        with self._lock:
            return sum(b.nbytes for b in self.blocks.values())

    def stores(self, tensor):
        """Is `tensor` a view of memory this cache stores (a shared block), rather than a copy of it?"""
        with self._lock:
            held = {t.untyped_storage().data_ptr() for b in self.blocks.values() for t in b.run.keys + b.run.values}
        return tensor.untyped_storage().data_ptr() in held

    def expire(self):
        """Drop the entries whose TTL has run out by the clock's time now; returns how many."""
        with self._lock:
            return self._expire(self.clock())

    def spans(self, n, cache_control=None):
        """(start, end) of each block a prompt of n tokens may hit or write, in order.

        At least the last token is always computed (its logits are the point of the request),
        so no block reaches it."""
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
        """The hash of every block's whole prefix and tenant (blocks.block_keys, the pool's keys too)."""
        return block_keys(ids, tenant, spans, shared=self.share_across_tenants)

    def prefill(self, prompt, tenant="default", cache_control=None):
        """Run a prompt through the model, reading and writing cached blocks; returns a Prefill.

        cache_control (mode="explicit" only): where cacheable prefixes end, in tokens, one int
        or a list (like Anthropic's `cache_control` marker after a system prompt)."""
        self.model.synchronize()  # time this prefill only, not work still queued on a GPU
        t0 = time.perf_counter()
        ids, keys, spans, cache, hits = self._lookup(prompt, tenant, cache_control)
        logits = self.model.forward(ids[len(cache):], cache=cache, last_only=True)[-1]
        receipt = self._store(cache, ids, keys, spans, hits, tenant)
        self.model.synchronize()  # the logits are ready only when the device says so
        return Prefill(logits, cache, receipt, time.perf_counter() - t0)

    def answer(self, prompt, max_new_tokens=20, temperature=0.0, top_k=None, top_p=None, seed=None,
               tenant="default", cache_control=None):
        """`generate` (same defaults, same stops) on a cache that starts from the prompt's cached blocks;
        the prompt's new blocks are written once the answer is done.

        The cache holds the prompt's keys and values, never an answer: every call samples anew."""
        check_sampling(max_new_tokens, temperature, top_k, top_p)
        ids, keys, spans, cache, hits = self._lookup(prompt, tenant, cache_control)
        gen = generate(self.model, ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                       seed=seed, cache=cache)
        return Answer(gen.text, gen.ids, self._store(cache, ids, keys, spans, hits, tenant))

    def _lookup(self, prompt, tenant, cache_control):
        """The prompt's ids, block keys and spans, and a new KVCache starting from its longest cached prefix."""
        ids = self.model.check_ids(prompt).tolist()
        spans = self.spans(len(ids), cache_control)
        keys = self.block_keys(ids, tenant, spans)
        cache = self.model.new_cache()
        with self._lock:
            now = self.clock()
            self._expire(now)
            # the longest of the prompt's prefixes that is stored (whoever wrote it, cut by whatever marks)
            hits = next((d + 1 for d in reversed(range(len(keys))) if keys[d] in self.blocks), 0)
            if hits and spans[hits - 1][1] < self.min_tokens:
                hits = 0  # automatic mode: a hit shorter than the minimum is no hit
            chain = self._chain(keys[hits - 1]) if hits else []
            if hits:
                self._touch(keys[hits - 1], now)
            for k, b in chain:
                self.events.append(Event(now, tenant, "hit", b.depth, k))
            joined = stretches([b for _, b in chain])
            cache.share([[(run.keys[layer][:, a:e], run.values[layer][:, a:e]) for run, a, e in joined]
                         for layer in range(len(cache.layers))])  # by reference: nothing is copied
        return ids, keys, spans, cache, hits

    def _chain(self, key):  # -> [(key, Block)]: the stored blocks of the prefix `key` names, from its start
        chain = []
        while key is not None:  # every stored block's parent is stored: only leaves are ever dropped
            chain.append((key, self.blocks[key]))
            key = self.blocks[key].parent
        return chain[::-1]

    def _store(self, cache, ids, keys, spans, hits, tenant):
        """Write the request's new blocks, oldest first, within the byte budget; returns its Receipt."""
        written = {}
        if hits < len(keys):
            written = self._write(cache, keys, spans, hits, tenant)
        return Receipt(len(ids), spans[hits - 1][1] if hits else 0, sum(e - s for s, e in written.values()),
                       ["hit" if d < hits else "written" if d in written else "computed" for d in range(len(keys))],
                       self.mode)

    def _write(self, cache, keys, spans, start, tenant):  # -> {depth: span} of the blocks written
        written = {}
        # the new blocks' K and V, cut once from what the request computed itself (after its hit): one run
        first, end, hit = spans[start][0], spans[-1][1], cache.layers[0].shared_length
        own = [layer.own() for layer in cache.layers]
        run = Run([k[:, first - hit:end - hit].clone() for k, _ in own],
                  [v[:, first - hit:end - hit].clone() for _, v in own])
        with self._lock:
            now = self.clock()
            for d in range(start, len(keys)):  # d: the block's place in this request
                if keys[d] in self.blocks:  # another request wrote it meanwhile
                    self._touch(keys[d], now)
                    continue
                parent = keys[d - 1] if d else None
                if parent is not None and parent not in self.blocks:
                    break  # its parent was evicted: the block could never be reached
                # its depth in the stored prefix: its parent may be another request's block, cut by other marks
                depth = self.blocks[parent].depth + 1 if parent is not None else 0
                a, e = spans[d]
                block = Block(run, a - first, e - first, depth, now, parent)
                if not self._make_room(block.nbytes, protect={parent}):  # the parent's ancestors are no leaves
                    break
                self.blocks[keys[d]] = block
                self._touch(keys[d], now)  # its ancestors are as fresh as it is
                self.events.append(Event(now, tenant, "write", depth, keys[d]))
                written[d] = spans[d]
            if len(written) < len(keys) - start:
                self._loose.add(run)  # keep only what was written
            self._compact()
        return written

    def _make_room(self, nbytes, protect):
        if self.max_bytes is None:
            return True
        if nbytes > self.max_bytes:
            return False
        used = sum(b.nbytes for b in self.blocks.values())
        while used + nbytes > self.max_bytes:
            # only leaves may go, so every stored block stays reachable from its prompt's start;
            # among them the least recently used, then the deepest
            parents = {b.parent for b in self.blocks.values()}
            leaves = [k for k in self.blocks if k not in parents and k not in protect]
            if not leaves:
                return False
            k = min(leaves, key=lambda k: (self.blocks[k].last_used, -self.blocks[k].depth))
            used -= self.blocks[k].nbytes
            self._drop(k, "evict", self.clock())
        return True

    def _touch(self, key, now):
        """Mark a block and all its ancestors used now: a parent is never older than its children."""
        while key is not None:
            block = self.blocks[key]
            block.last_used = now
            key = block.parent

    def _expire(self, now):
        old = [k for k, b in self.blocks.items() if now - b.last_used > self.ttl]
        for k in old:
            self._drop(k, "expire", now)
        self._compact()
        return len(old)

    def _drop(self, key, why, now):
        block = self.blocks.pop(key)
        self.events.append(Event(now, None, why, block.depth, key))
        self._loose.add(block.run)

    def _compact(self):
        """Copy the blocks left in each run that lost some into a run of their own size,
        so dropped blocks free their bytes (once per call, however many blocks went)."""
        runs = {}
        for b in self.blocks.values():
            if b.run in self._loose:
                runs.setdefault(b.run, []).append(b)
        self._loose.clear()
        for kept in runs.values():
            kept.sort(key=lambda b: b.start)
            new = Run([torch.cat(k, 1) for k in zip(*(b.keys for b in kept))],
                      [torch.cat(v, 1) for v in zip(*(b.values for b in kept))])
            at = 0
            for b in kept:
                b.run, b.start, b.end, at = new, at, at + b.end - b.start, at + b.end - b.start
