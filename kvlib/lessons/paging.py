"""Paging the KV cache, as vLLM does, simulated: how much reserved memory holds no token.

A server that gives each sequence one contiguous buffer must size it before it knows how
long the answer will be, so it reserves the maximum length; the slots past the tokens a
sequence holds are wasted for as long as it lives. vLLM's PagedAttention instead cuts the
cache into fixed blocks (16 tokens by default) and gives each sequence a block table, a list
of the blocks that hold its tokens in order, wherever they lie; a sequence takes a new block
only when its last one is full, so at most one block per sequence is partly empty.

Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention" (SOSP 2023) measured that in earlier systems only 20.4-38.2 % of the KV
cache memory held token states, and under 4 % is wasted with paging.

Memory is counted in token slots times decoding steps (multiply by the bytes per token of
a model, `memory.model_kv_bytes_per_token`, for bytes): a request with a prompt of p tokens
and an answer of n tokens lives n + 1 steps, holding p, p + 1, ..., p + n tokens.
"""

from ..errors import KVLibError
from ..server.paged_cache import blocks_for


def simulate(lengths, block_size=16, reserve=None):
    """Slots allocated and used over the life of every request, contiguous vs paged.

    lengths: (prompt, output) pairs (a bare int n is a finished sequence of n tokens, one step);
    reserve: the slots a contiguous buffer is given per sequence (None: the longest request here,
    the least any server that cannot see the future must reserve).
    Returns {"contiguous": {...}, "paged": {...}}, each {"allocated", "used", "waste"}, waste the
    fraction of allocated slots holding no token."""
    pairs = [(n, 0) if isinstance(n, int) else tuple(n) for n in lengths]
    if not pairs or any(p < 1 or o < 0 for p, o in pairs):
        raise KVLibError("give at least one request, each with a prompt of 1 token or more and an output of 0 or more")
    if block_size < 1:
        raise KVLibError("block_size must be at least 1 token")
    longest = max(p + o for p, o in pairs)
    reserve = longest if reserve is None else reserve
    if reserve < longest:
        raise KVLibError(f"a contiguous buffer of {reserve} slots cannot hold a {longest}-token request: "
                         f"reserve at least {longest}")
    used = contiguous = paged = 0
    for p, o in pairs:
        for held in range(p, p + o + 1):  # one decoding step after another
            used += held
            contiguous += reserve
            paged += blocks_for(held, block_size) * block_size  # whole blocks: only the last is partly empty
    return {name: {"allocated": allocated, "used": used, "waste": 1 - used / allocated}
            for name, allocated in (("contiguous", contiguous), ("paged", paged))}


def block_table(n_tokens, free, block_size=16):
    """The block table of a sequence of n_tokens: which physical blocks it takes, in order,
    popped from the `free` list (any blocks, anywhere: they need not be contiguous)."""
    need = blocks_for(n_tokens, block_size)
    if need > len(free):
        raise KVLibError(f"{n_tokens} tokens need {need} blocks of {block_size}, but only {len(free)} are free")
    return [free.pop(0) for _ in range(need)]
