"""Prompt caching across requests, as providers do it: a shared prefix's K and V are kept
and reused by later requests, so only the new part of a prompt goes through the model.

A policy over one pool of blocks, as vLLM's automatic prefix caching is its block manager: what a
PromptCache stores are the blocks of one PagedKVCache (paged_cache.py, blocks.py), each filed in the
pool's index under a hash of its tenant and every token from the prompt's start to the block's end. A
request is a sequence that batching.step serves on that cache through its one loop, as a server's
are: it starts from the blocks of its longest cached prefix, held by reference (never a copy), its
prompt's other blocks are filed as the step writes them (`PagedKVCache.file`), and `answer` picks and
stops as `generate` does. When it ends it lets go: filed blocks stay in the index, unheld, until the
pool's one eviction rule or their TTL takes them; the others go free.

What the policy decides, and nothing else:
- Which prefixes a prompt may hit or write (`spans`), in the two big providers' modes.
  "automatic" (OpenAI): every prompt is cut into full blocks of `block_size` tokens, so hits come in
  steps of a block (128 tokens there). Prompts shorter than `min_tokens` are not cached, and a hit
  shorter than it counts for nothing (OpenAI: from 1,024 tokens, then 1,152...).
  "explicit" (Anthropic): nothing is cached unless the request marks where a cacheable prefix ends
  (its `cache_control` marker, here a token count, up to 4 per request) with at least `min_tokens`
  before it. A mark may end inside a block: the full blocks before it are filed as in automatic mode,
  and its part of the last block is copied into a block of its own, filed under the key of the exact
  prefix; a request that hits it copies it before writing past the mark. A hit counts only at one of
  the request's own marks whose blocks are all filed; a receipt counts the marked tokens exactly.
- The budget. `max_bytes` counts blocks of the pool: before a block is filed, the cache makes room by
  the pool's one eviction rule (an unheld leaf, least recently used first), or the filing stops. A
  running request is not bound by it: the pool grows for what it holds. max_bytes=None files everything.
- Time. Entries expire `ttl_seconds` after their last use (checked at each lookup, or by expire()).
  A request lets go of its blocks last block first, so a parent never expires before its children.
- Tenants never share blocks unless `share_across_tenants=True`, which exists to show why providers
  should not do that (notebook 6 and `kvlib.lessons.leak`: time to first token leaks other tenants' prompts).
"""

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from .batching import Batch, Decoding, steps
from .blocks import ManualClock, block_keys, prompt_spans  # noqa: F401 (ManualClock: PromptCache(clock=...))
from ..errors import KVLibError, check_count, is_count, is_number
from .sampling import Generation, Rules, check_sampling, stop_words
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
    stop: str         # as generate's: a code of sampling.STOPS (max_new_tokens, end-of-text or a full context)
    stop_args: dict

    @property
    def stop_reason(self):  # the stop in words, in the language set when they are read
        return stop_words(self.stop, self.stop_args)


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
        self.cache = PagedKVCache(model.config.n_layer, 1, block_size, ttl_seconds, self.clock, grow=True,
                                  max_bytes=max_bytes)
        # one request at a time touches the cache (a step: its lookup, its forward call, its filing); re-entrant, so
        # what runs between two steps of an answer on its own thread may send another request (as a test does)
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
        write, in order. No span reaches the last token: its logits are the point of the request."""
        if self.mode == "automatic":
            if cache_control is not None:
                raise KVLibError("cache_control marks prefixes in mode='explicit'; "
                                 "mode='automatic' cuts every prompt into blocks by itself")
            return prompt_spans(n, self.block_size) if n >= self.min_tokens else []
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

    def prefill(self, prompt, tenant="default", cache_control=None):
        """Run a prompt through the model, reading and writing cached blocks; returns a Prefill.

        cache_control (mode="explicit" only): where cacheable prefixes end, in tokens, one int
        or a list (like Anthropic's `cache_control` marker after a system prompt)."""
        self.model.synchronize()  # time this prefill only, not work still queued on a GPU
        t0 = time.perf_counter()
        d, logits = self._run(prompt, Rules(1), tenant, cache_control)  # its first token, picked and dropped
        self.model.synchronize()  # the logits are ready only when the device says so
        return Prefill(logits, list(d.seq.blocks), self._receipt(d), time.perf_counter() - t0)

    def answer(self, prompt, max_new_tokens=20, temperature=0.0, top_k=None, top_p=None, seed=None,
               tenant="default", cache_control=None):
        """`generate`'s answer (same defaults, same stops) decoded on the pool from the prompt's cached blocks;
        the prompt's new blocks are filed as the step writes them.

        The cache holds the prompt's keys and values, never an answer: every call samples anew."""
        check_sampling(max_new_tokens, temperature, top_k, top_p)
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        d, _ = self._run(prompt, Rules(max_new_tokens, temperature, top_k, top_p, generator), tenant, cache_control)
        return Answer(self.model.decode(d.gen.ids), d.gen.ids, self._receipt(d), d.gen.stop, d.gen.stop_args)

    def _run(self, prompt, rules, tenant, cache_control):  # -> the request, done, and the logits of its first token
        ids = self.model.check_ids(prompt).tolist()
        d = Decoding(Generation(ids), rules, tenant, self.spans(len(ids), cache_control), self.share_across_tenants,
                     self.min_tokens)
        loop, first = steps(self.model, Batch(self.cache, deque([d]))), None
        while True:
            with self._lock:  # a step at a time: other requests run between, never taking this one's blocks
                record = next(loop, None)
            if record is None:
                return d, first
            if first is None and d.gen.ids:
                first = record.logits[0]

    def _receipt(self, d):  # what the request read from the cache and wrote to it
        spans, seq = d.spans, d.seq
        written = {j for j, key in enumerate(self.block_keys(d.gen.prompt_ids, d.tenant, spans)) if key in seq.filed}
        states = ["hit" if j < seq.hits else "written" if j in written else "computed" for j in range(len(spans))]
        return Receipt(len(d.gen.prompt_ids), spans[seq.hits - 1][1] if seq.hits else 0,
                       sum(e - s for j, (s, e) in enumerate(spans) if j in written), states, self.mode)
