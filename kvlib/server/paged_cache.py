"""A paged KV cache that many sequences share: how a server holds a batch, as vLLM does.

The KV memory is one pool of fixed-size blocks per layer (`block_size` tokens each), handed out
by a `BlockPool` (blocks.py). Every sequence has a block table, the list of blocks that hold its
tokens in order, wherever they lie: a sequence takes a block only when its last one is full, and
gives its blocks back when it ends. Sequences that begin alike hold the same blocks, counted by
reference; the first to write into a shared block that is not full copies it first (copy-on-write).
Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention" (2023).

Prefix caching (vLLM's automatic prefix caching): a sequence added with its prompt starts from the
deepest of the prompt's spans (by default its full blocks, `blocks.prompt_spans`) whose blocks the
pool's index holds, by reference, and only the rest is fed. `file` is the one filing path: after each
forward call (the step's postprocess) the blocks of its other spans now written go into the index
under the hash of their tenant and whole prefix, within `max_bytes`. A span that ends inside a block
(a PromptCache's mark) is filed as a copy of its part, copied again by whoever writes past it. A
PromptCache (prompt_cache.py) says which spans a prompt has, and lets the pool grow (`grow=True`).

The forward pass does not know it serves a batch. A call's new tokens are the rows of every sequence
the caller `schedule`s, packed; the matmuls treat rows alike. Only attention keeps users apart: `admit`
sorts the scheduled sequences into `Group`s (as many new tokens and tokens in all attend alike) and
hands the forward pass, in place of a mask, the `Groups`: per group its rows, its sequences' pool slots
and one mask over a sequence's own tokens. Each layer's `append` returns per group the K and V
gathered through the block tables, [b, nkv, length, hs] (a lone sequence whose blocks lie in a row is
one slice of the pool): no other sequence's slot is read, as vLLM's kernel reads each row's blocks.
`gpt2.fused_attention`, which both families call, attends group by group (`gpt2.attend_groups`).
"""

from dataclasses import dataclass, field, replace

import torch

from .blocks import BlockPool, chains, prompt_spans
from ..errors import KVLibError, check_count, is_count
from ..model.kv_cache import causal_mask, only_causal


def blocks_for(n_tokens, block_size):  # whole blocks that hold n tokens: only the last may be partly empty
    return -(-n_tokens // block_size)


@dataclass
class Sequence:
    id: int
    tenant: str
    blocks: list = field(default_factory=list)  # its block table: block ids, in token order
    length: int = 0                             # tokens held; token t sits in blocks[t // block_size]
    reused: int = 0                             # tokens it started with, its blocks shared: a cached prefix or prefix_of's
    hits: int = 0                               # of its spans, those read from the index (the first `hits`)
    plan: list = field(default_factory=list)    # [(key, start, end, parent key)] of the blocks still to file, by end
    filed: set = field(default_factory=set)     # keys it filed itself (a receipt's "written")
    pins: list = field(default_factory=list)    # other sequences' filed blocks that blocks it filed continue
    logged: int = 0                             # the pool's events before its lookup (withdraw takes its hits back)


@dataclass
class Group:
    """Scheduled sequences that attend alike: b of them, each with n new rows and length tokens in all."""
    rows: torch.Tensor   # [b * n]: their rows in the call, sequence after sequence
    slots: torch.Tensor  # [b, length]: the pool slot of each of their tokens, in order (through the block tables)
    n: int
    mask: torch.Tensor   # [n, length] over a sequence's own tokens; None: nothing hidden (one row) or plain causal
    causal: bool         # the n rows are the whole sequence, fed at once: the kernel applies the causal mask itself
    start: int = None    # a lone sequence whose blocks lie one after another: its first slot (read in place)


class Groups(list):
    """What a paged cache's `admit` returns in place of a mask [T, S]: its Group per kind of scheduled sequence."""

    def to(self, dtype):  # as a mask tensor's .to: the forward pass casts the mask to its activations' dtype
        return Groups(replace(g, mask=None if g.mask is None else g.mask.to(dtype)) for g in self)


class PagedLayer:
    """One layer's pool, K and V [nkv, n_blocks * block_size, hs], made on the first append."""

    def __init__(self, cache):
        self.cache, self.k, self.v = cache, None, None

    def append(self, k, v):  # [nkv, T, hs] x 2 -> per Group of admit's, its sequences' K and V [b, nkv, length, hs] x 2
        if self.k is None:
            nkv, _, hs = k.shape
            self.k, self.v = (k.new_zeros(nkv, self.cache.n_blocks * self.cache.block_size, hs) for _ in range(2))
        slots = self.cache.slots  # [T]: where the scheduled rows' tokens go
        self.k[:, slots], self.v[:, slots] = k, v
        # each group's own tokens, gathered through the block tables ([nkv, b, length, hs], then batch first); a lone
        # sequence in consecutive blocks (a prompt-cache hit and its own blocks, often) is one slice, read in place
        return ([pool[:, g.slots].transpose(0, 1) if g.start is None else
                 pool[None, :, g.start:g.start + g.slots.shape[1]] for g in self.cache.groups] for pool in (self.k, self.v))

    def copy_block(self, src, dst):  # a shared block's tokens into a block of one's own (copy-on-write)
        if self.k is not None:
            bs = self.cache.block_size
            for pool in (self.k, self.v):
                pool[:, dst * bs:(dst + 1) * bs] = pool[:, src * bs:(src + 1) * bs]

    def grow(self, n):  # room for n more blocks: the pool copied into a larger tensor (block ids stay valid)
        if self.k is not None:
            self.k, self.v = (torch.cat([t, t.new_zeros(t.shape[0], n * self.cache.block_size, t.shape[2])], 1)
                              for t in (self.k, self.v))


class PagedKVCache:
    """Many sequences' K and V in one pool of blocks per layer. The caller adds sequences, says which
    get how many new tokens in the next forward call (`schedule`), and releases them when done."""

    def __init__(self, n_layer, n_blocks, block_size=16, ttl_seconds=None, clock=None, grow=False, max_bytes=None):
        """grow=True: a call that needs more blocks than are free grows the pool (at least doubling it) rather
        than evict cached blocks or refuse (a PromptCache's pool). max_bytes: the index files blocks up to these
        bytes of K and V, evicting by the pool's rule to make room (None: no limit but the pool's size)."""
        check_count(block_size, "block_size (tokens per block)")
        self.block_size, self.n_blocks, self.growable, self.max_bytes = block_size, n_blocks, grow, max_bytes
        self.pool = BlockPool(n_blocks, ttl_seconds, clock)
        self.layers = [PagedLayer(self) for _ in range(n_layer)]
        self.sequences = {}  # id -> Sequence
        self._next_id = 0
        self.rows = []       # [(sequence id, new tokens)] of the next forward call, in row order
        self.slots = None    # [T] pool slot of each new row, set by admit
        self.groups = None   # Groups of the call's sequences, set by admit: what each row attends over

    def add(self, prompt_ids=None, tenant="default", spans=None, shared=False, min_hit=0, prefix_of=None):
        """-> a new sequence's id: empty; or holding every token the live sequence `prefix_of` holds; or, given
        the prompt it will be fed (token ids), holding the blocks of the deepest of its `spans` (default: its full
        blocks; [] for none) that the index holds and that is at least min_hit tokens long, and planning to file
        the rest (shared: keys in every tenant's namespace). `sequence(id).reused` says how many tokens it holds."""
        if prompt_ids is not None and prefix_of is not None:
            raise KVLibError("give add() prompt_ids (to read cached blocks) or prefix_of (to share a live "
                             "sequence's blocks), not both")
        seq = self.sequences[self._next_id] = Sequence(self._next_id, tenant)
        self._next_id += 1
        if prefix_of is not None:
            parent = self.sequence(prefix_of)
            for block in parent.blocks:
                self.pool.share(block)
            seq.blocks, seq.length = list(parent.blocks), parent.length
        elif prompt_ids is not None:
            if isinstance(prompt_ids, str) or not all(map(is_count, prompt_ids)):
                del self.sequences[seq.id]
                raise KVLibError(f"prompt_ids are the prompt's token ids (model.encode(text) gives them), "
                                 f"not {prompt_ids!r:.40}")
            spans = prompt_spans(len(prompt_ids), self.block_size) if spans is None else spans
            blocks = chains(list(prompt_ids), tenant, spans, self.block_size, shared)
            self.pool.expire()  # what is past its TTL is not found
            seq.logged = len(self.pool.events)  # after the expiries, which happened whatever comes of this sequence
            # a span's last block filed means its whole chain is: the index never has a hole
            seq.hits = next((d + 1 for d in reversed(range(len(spans)))
                             if spans[d][1] >= min_hit and blocks[d][-1][0] in self.pool.index), 0)
            if seq.hits:
                seq.blocks = self.pool.lookup([key for key, _, _ in blocks[seq.hits - 1]], tenant)
                seq.length = spans[seq.hits - 1][1]
            plan = {}  # the blocks of the spans not read that the index lacks, each after its parent
            for chain in blocks[seq.hits:]:
                for i, (key, start, end) in enumerate(chain):
                    if key not in self.pool.index:
                        plan.setdefault(key, (key, start, end, chain[i - 1][0] if i else None))
            seq.plan = sorted(plan.values(), key=lambda p: p[2])
        seq.reused = seq.length
        return seq.id

    def release(self, seq_id):  # a finished sequence gives its blocks back (shared ones stay for their other holders)
        # last block first, so in the index's LRU a prefix's first blocks are the most recently used: a parent
        # is never older than its children (as vLLM frees a request's blocks in reverse)
        seq = self.sequence(seq_id)
        for block in seq.blocks[::-1] + seq.pins[::-1]:  # the pins are parents: let go of after their children
            self.pool.release(block)
        del self.sequences[seq_id]

    def withdraw(self, seq_id):  # an admission undone (the step found no room for it): as if it was never added
        logged = self.sequence(seq_id).logged
        self.release(seq_id)
        del self.pool.events[logged:]  # its lookup's hits were no reads

    def sequence(self, seq_id):
        if seq_id not in self.sequences:
            raise KVLibError(f"no sequence {seq_id!r} in this cache (released already?): add() one first")
        return self.sequences[seq_id]

    def schedule(self, rows):  # [(sequence id, new tokens)]: the next forward call's rows -> this cache, to pass it
        for seq_id, n in rows:
            self.sequence(seq_id)
            if n < 1:
                raise KVLibError(f"schedule at least 1 new token for each sequence, not {seq_id}: {n}")
        if len({seq_id for seq_id, _ in rows}) != len(rows):
            raise KVLibError("schedule each sequence at most once per forward call")
        self.rows = list(rows)
        return self

    def admit(self, t_new, device=None):  # -> positions [T], Groups (in place of a mask [T, S])
        """Give each scheduled row a slot (a new block when its sequence's last one is full, a copy of
        it when it is shared), then group the sequences that attend alike, each over its own tokens."""
        if sum(n for _, n in self.rows) != t_new:
            raise KVLibError(f"the forward call has {t_new} tokens but {sum(n for _, n in self.rows)} were "
                             "scheduled: call schedule([(sequence, n), ...]) before each call")
        # all or nothing: a full pool refuses the call before any sequence has taken a slot
        need = self.blocks_needed(self.rows)
        if self.growable and need > len(self.pool.free):
            self.grow(max(need - len(self.pool.free), self.n_blocks))
        if need > self.pool.available:
            self.rows = []
            raise KVLibError(f"this call needs {need} more blocks but {self.pool.available} of the pool's "
                             f"{self.n_blocks} are free: release a finished sequence, or make the pool larger "
                             f"(nothing was changed)")
        positions, slots, alike = [], [], {}  # alike: (new rows, length) -> [(first row, sequence id)]
        for seq_id, n in self.rows:
            seq = self.sequences[seq_id]
            alike.setdefault((n, seq.length + n), []).append((len(slots), seq_id))
            for _ in range(n):
                slots.append(self._slot_for_next(seq))
                positions.append(seq.length)
                seq.length += 1
        self.groups = Groups()
        for (n, length), members in alike.items():
            rows = torch.tensor([first + i for first, _ in members for i in range(n)], device=device)
            table = torch.stack([self.token_slots(seq_id, device) for _, seq_id in members])  # [b, length]
            k_pos = torch.arange(length, device=device)
            mask = causal_mask(k_pos[-n:], k_pos)  # [n, length]: row i sees its sequence's tokens up to its own
            causal = only_causal(mask)
            blocks = self.sequences[members[0][1]].blocks
            start = blocks[0] * self.block_size if len(members) == 1 and blocks == list(
                range(blocks[0], blocks[0] + len(blocks))) else None
            self.groups.append(Group(rows, table, n, None if n == 1 or causal else mask, causal, start))
        self.slots = torch.tensor(slots, device=device)
        self.rows = []  # each schedule serves one call
        return torch.tensor(positions, device=device), self.groups

    def fits(self, rows):  # can a call of these rows [(sequence id, new tokens)] have its blocks now?
        # cached blocks nobody holds count: the pool evicts them for room; a growing pool always has room
        return self.growable or self.blocks_needed(rows) <= self.pool.available

    def blocks_needed(self, rows):  # blocks these rows will take: _slot_for_next's choices, counted only
        need, holders = 0, {}  # holders of each shared, part-full last block as the rows before copied it
        for seq_id, n in rows:
            seq = self.sequences[seq_id]
            need += blocks_for(seq.length + n, self.block_size) - len(seq.blocks)
            if seq.length % self.block_size:
                tail = seq.blocks[-1]
                holders[tail] = holders.get(tail, self.pool.refs[tail])
                if holders[tail] > 1 or tail in self.pool.entries:  # copied: one holder fewer (an indexed one is
                # always copied: its tokens are a filed prefix), and the last holder of a plain one writes in place
                    need, holders[tail] = need + 1, holders[tail] - 1
        return need

    def file(self, seq_id):
        """Put the blocks of the sequence's spans that are now written into the pool's index, parents first: the
        one filing path (the step's postprocess calls it after each forward call). A block whose key another
        sequence filed first is left to go free; a span ending inside a block is filed as a copy of its part."""
        seq, pool, bs = self.sequence(seq_id), self.pool, self.block_size
        while seq.plan and seq.plan[0][2] <= seq.length:
            key, start, end, parent = seq.plan.pop(0)
            if key in pool.index:
                continue
            up = pool.index.get(parent)  # its parent's block: this sequence's, or one another filed first
            if parent is not None and up is None or not self._room():
                break  # no room, or its parent was not filed or is gone: filing it would open a hole
            if up is not None and up not in seq.blocks + seq.pins:  # another's copy of its prefix: held while this sequence
                pool.share(up)                           # is, so a held block never continues an unheld one
                seq.pins.append(up)                      # (eviction takes unheld leaves: all cached blocks can go)
            part = end - start < bs  # a span ending inside the block: its part is copied, the index's alone
            block = self.copy_of(seq.blocks[start // bs]) if part else seq.blocks[start // bs]
            pool.register(block, key, up, seq.tenant)
            if part:
                pool.release(block)
            seq.filed.add(key)
        else:
            return
        seq.plan = []  # nothing more of its prompt is filed

    def _room(self):  # -> whether one more block may be filed, after evicting (the pool's rule) down to max_bytes
        while self.max_bytes is not None and (len(self.pool.index) + 1) * self.bytes_per_block > self.max_bytes:
            if not self.pool.evict():
                return False
        return True

    def _slot_for_next(self, seq):  # the pool slot where the sequence's next token goes
        offset = seq.length % self.block_size
        if offset == 0:  # its last block is full (or it has none): take a new one
            seq.blocks.append(self.pool.allocate())
        elif self.pool.refs[seq.blocks[-1]] > 1 or seq.blocks[-1] in self.pool.entries:
            # not full, and shared or filed in the index (a marked prefix ending inside it): copy it, write the copy
            own = self.copy_of(seq.blocks[-1])
            self.pool.release(seq.blocks[-1])
            seq.blocks[-1] = own
        return seq.blocks[-1] * self.block_size + offset

    def copy_of(self, block):  # -> a new block, held once, holding what `block` holds
        if self.growable and not self.pool.free:
            self.grow(self.n_blocks)
        own = self.pool.allocate()
        for layer in self.layers:
            layer.copy_block(block, own)
        return own

    def grow(self, n):  # n more blocks in the pool, free
        self.pool.grow(n)
        for layer in self.layers:
            layer.grow(n)
        self.n_blocks += n

    @property
    def bytes_per_block(self):  # K and V of one block in every layer, as the pool's tensors hold them (0 before any)
        return sum(t[:, :self.block_size].nbytes for layer in self.layers if layer.k is not None
                   for t in (layer.k, layer.v))

    def token_slots(self, seq_id, device=None):  # [length]: the pool slot of each token of a sequence, in order
        seq, bs = self.sequence(seq_id), self.block_size
        blocks = torch.tensor(seq.blocks, device=device, dtype=torch.long)
        return (blocks[:, None] * bs + torch.arange(bs, device=device)).flatten()[:seq.length]  # [blocks * bs] cut

    def keys(self, layer, seq_id):  # [nkv, length, hs]: one sequence's keys at one layer, gathered through its table
        if self.layers[layer].k is None:
            raise KVLibError("the pool holds nothing yet: run a forward call (batching.forward_rows) first")
        return self.layers[layer].k[:, self.token_slots(seq_id, self.layers[layer].k.device)]

    def __repr__(self):
        return (f"PagedKVCache({len(self.sequences)} sequences, {self.pool.in_use} of {self.n_blocks} blocks "
                f"of {self.block_size} tokens in use, {self.pool.cached} cached)")
