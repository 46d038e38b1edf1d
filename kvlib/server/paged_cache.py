"""A paged KV cache that many sequences share: how a server holds a batch, as vLLM does.

The KV memory is one pool of fixed-size blocks per layer (`block_size` tokens each), handed out
by a `BlockPool` (blocks.py). Every sequence has a block table, the list of blocks that hold its
tokens in order, wherever they lie: a sequence takes a block only when its last one is full, and
gives its blocks back when it ends. Sequences that begin alike (one system prompt, many users)
hold the same blocks, counted by reference; the first to write into a shared block that is not
full copies it first (copy-on-write), so nobody's tokens change under another's feet. Kwon et
al., "Efficient Memory Management for Large Language Model Serving with PagedAttention" (SOSP 2023).

Prefix caching (vLLM's automatic prefix caching): a sequence added with the prompt it will be fed
files each of that prompt's blocks in the pool's index as it fills, under the hash of its tenant
and whole prefix. A later prompt with the same start holds those blocks from the index, by
reference, whether their first sequence is still running or has ended (the index keeps unheld
blocks until their memory is needed), and only the rest of it is fed. A full block is never
written again, so it is shared without a copy; a filed block that is not full (a PromptCache's
prefix marked inside a block) is copied before anyone writes into it, as a shared one is. This is
the one pool of kvlib: a PromptCache (prompt_cache.py) is a policy over one such cache, which it
adds its requests to with their hit (`add(hit=...)`), files their blocks itself, and lets grow
(`grow=True`) for what its running requests hold rather than evict or refuse.

The forward pass does not know it serves a batch. A call's new tokens are the rows of every
sequence the caller `schedule`s, one after another (packed, no padding); the matmuls treat rows
alike, so each weight matrix is read once for all of them. Only attention must keep users
apart, and here each sequence attends to its own tokens only, as vLLM's kernel reads each row's
blocks through its table: `admit` sorts the scheduled sequences into `Group`s (those with as many
new tokens and as many tokens in all attend alike) and hands the forward pass, in place of one mask,
the `Groups`: per group its rows, its sequences' pool slots and one mask over a sequence's own
tokens. Each layer's `append` then returns, per group, the K and V gathered through the block
tables, [b, nkv, length, hs] (a lone sequence whose blocks lie one after another, as a prompt-cache
hit's often do, is read as one slice of the pool, not copied): no other sequence's slot is read,
so a step's attention costs what the scheduled sequences hold, whatever else the pool keeps.
`gpt2.fused_attention`, which both families call, attends group by group (`gpt2.attend_groups`).
"""

from dataclasses import dataclass, field, replace

import torch

from .blocks import BlockPool, block_keys, full_spans
from ..errors import KVLibError, check_count, is_count
from ..model.kv_cache import causal_mask, only_causal


def blocks_for(n_tokens, block_size):  # whole blocks that hold n tokens: only the last may be partly empty
    return -(-n_tokens // block_size)


@dataclass
class Sequence:
    blocks: list = field(default_factory=list)  # its block table: block ids, in token order
    length: int = 0                             # tokens held; token t sits in blocks[t // block_size]
    reused: int = 0                             # tokens it started with, its blocks shared: a cached prefix or prefix_of's
    tenant: str = None
    keys: list = field(default_factory=list)    # keys of its prompt's full blocks (add's prompt_ids), in order
    filed: int = 0                              # of its blocks, those in the index (its first `filed`)


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

    def __init__(self, n_layer, n_blocks, block_size=16, ttl_seconds=None, clock=None, grow=False):
        """grow=True: a call that needs more blocks than are free grows the pool (at least doubling it) rather
        than evict cached blocks or refuse (a PromptCache's pool: its budget decides what stays cached)."""
        check_count(block_size, "block_size (tokens per block)")
        self.block_size, self.n_blocks, self.growable = block_size, n_blocks, grow
        self.pool = BlockPool(n_blocks, ttl_seconds, clock)
        self.layers = [PagedLayer(self) for _ in range(n_layer)]
        self.sequences = {}  # id -> Sequence
        self._next_id = 0
        self.rows = []       # [(sequence id, new tokens)] of the next forward call, in row order
        self.slots = None    # [T] pool slot of each new row, set by admit
        self.groups = None   # Groups of the call's sequences, set by admit: what each row attends over

    def add(self, prompt_ids=None, tenant="default", prefix_of=None, hit=None):  # -> a new sequence's id
        """A new sequence: empty; or, given the prompt it will be fed (token ids), starting with the longest
        prefix of it whose full blocks the index holds for its tenant; or starting with every token the live
        sequence `prefix_of` holds; or with hit=(blocks, tokens), starting with blocks its caller took from the
        index (BlockPool.lookup holds them once for it), which hold its first `tokens` tokens (a PromptCache's
        hit, which may end inside its last block). Either way it shares those blocks by reference, and
        `sequence(id).reused` says how many tokens they hold: feed it prompt_ids[reused:]. A cached prefix
        stops before the prompt's last token, whose logits pick the first answer token."""
        if sum(x is not None for x in (prompt_ids, prefix_of, hit)) > 1:
            raise KVLibError("give add() one of prompt_ids (to reuse cached blocks), prefix_of (to share a live "
                             "sequence's blocks) or hit (blocks already looked up), not several")
        seq = Sequence(tenant=tenant)
        if hit is not None:
            seq.blocks, seq.length = list(hit[0]), hit[1]
            if blocks_for(seq.length, self.block_size) != len(seq.blocks):
                raise KVLibError(f"{seq.length} tokens fill {blocks_for(seq.length, self.block_size)} blocks of "
                                 f"{self.block_size}, not the {len(seq.blocks)} given")
        elif prefix_of is not None:
            parent = self.sequence(prefix_of)
            for block in parent.blocks:
                self.pool.share(block)
            seq.blocks, seq.length = list(parent.blocks), parent.length
        elif prompt_ids is not None:
            if isinstance(prompt_ids, str) or not all(map(is_count, prompt_ids)):
                raise KVLibError(f"prompt_ids are the prompt's token ids (model.encode(text) gives them), "
                                 f"not {prompt_ids!r:.40}")
            n, bs = len(prompt_ids), self.block_size
            seq.keys = block_keys(list(prompt_ids), tenant, full_spans(n, bs))
            self.pool.expire()
            seq.blocks = self.pool.lookup(seq.keys[:(n - 1) // bs], tenant)  # blocks ending before the last token
            seq.filed, seq.length = len(seq.blocks), len(seq.blocks) * bs
        seq.reused = seq.length
        self.sequences[self._next_id] = seq
        self._next_id += 1
        return self._next_id - 1

    def release(self, seq_id):  # a finished sequence gives its blocks back (shared ones stay for their other holders)
        # last block first, so in the index's LRU a prefix's first blocks are the most recently used: a parent
        # is never older than its children (as vLLM frees a request's blocks in reverse)
        for block in reversed(self.sequence(seq_id).blocks):
            self.pool.release(block)
        del self.sequences[seq_id]

    def sequence(self, seq_id):
        if seq_id not in self.sequences:
            raise KVLibError(f"no sequence {seq_id!r} in this cache (released already?): add() one first")
        return self.sequences[seq_id]

    def schedule(self, rows):  # [(sequence id, new tokens)]: what the next forward call's rows are
        for seq_id, n in rows:
            self.sequence(seq_id)
            if n < 1:
                raise KVLibError(f"schedule at least 1 new token for each sequence, not {seq_id}: {n}")
        if len({seq_id for seq_id, _ in rows}) != len(rows):
            raise KVLibError("schedule each sequence at most once per forward call")
        self.rows = list(rows)

    def admit(self, t_new, device=None):  # -> positions [T], Groups (in place of a mask [T, S])
        """Give each scheduled row a slot (a new block when its sequence's last one is full, a copy of
        it when it is shared), then group the sequences that attend alike, each over its own tokens."""
        if sum(n for _, n in self.rows) != t_new:
            raise KVLibError(f"the forward call has {t_new} tokens but {sum(n for _, n in self.rows)} were "
                             "scheduled: call schedule([(sequence, n), ...]) before each call")
        # all or nothing: a full pool refuses the call before any sequence has taken a slot
        need = self._blocks_needed()
        if self.growable and need > len(self.pool.free):
            self.grow(max(need - len(self.pool.free), self.n_blocks))
        if need > self.pool.available:  # cached blocks nobody holds count: the pool evicts them for room
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
            self._file(seq)  # its blocks this call fills: written by the call, before any add() can look them up
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

    def _blocks_needed(self):  # blocks the scheduled rows will take: _slot_for_next's choices, counted only
        need, holders = 0, {}  # holders of each shared, part-full last block as the rows before copied it
        for seq_id, n in self.rows:
            seq = self.sequences[seq_id]
            need += blocks_for(seq.length + n, self.block_size) - len(seq.blocks)
            if seq.length % self.block_size:
                tail = seq.blocks[-1]
                holders[tail] = holders.get(tail, self.pool.refs[tail])
                if holders[tail] > 1 or tail in self.pool.entries:  # copied: one holder fewer (an indexed one is
                # always copied: its tokens are a filed prefix), and the last holder of a plain one writes in place
                    need, holders[tail] = need + 1, holders[tail] - 1
        return need

    def _file(self, seq):  # put the sequence's full prompt blocks in the index, in order
        for j in range(seq.filed, min(seq.length // self.block_size, len(seq.keys))):
            if not self.pool.register(seq.blocks[j], seq.keys[j], seq.blocks[j - 1] if j else None, seq.tenant):
                seq.keys = seq.keys[:j]  # another sequence filed this prefix first: the rest would hang off a block
                return                   # the index does not hold, a hole
            seq.filed = j + 1

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
