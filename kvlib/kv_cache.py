"""The KV cache: per layer, the keys and values of every token seen so far.

Only K and V are kept: a new token's query is compared with old keys and mixes old
values, while old queries and old outputs are never read again. As in
TransformerLens's `HookedTransformerKeyValueCache`, the cache is an explicit object
passed into the forward pass, which appends to it.

Storage grows by doubling (as a Python list does), so appending one token does not
re-copy the whole cache every step.

A cache may start from shared pieces: a prompt-cache hit hands a request the stored
blocks themselves, by reference, as vLLM's block tables do. The request's own tokens go
into its own buffer after them, so the shared pieces are never written: attention reads
K and V as a list of pieces. Reading `keys` or `values` (to look at them, or to write
into them) first copies the shared pieces into the request's own buffer: copy-on-write.
"""

import torch

# Attention reads each piece with its own matmuls: measured on GPT-2 small's shape on a CPU,
# a decode step over 900 cached tokens in 16 pieces is no slower than in one, in 64 it is 30 %
# slower. A hit in more pieces than this is copied in once instead (a long chat, turn by turn).
MAX_PIECES = 16


class LayerCache:
    def __init__(self):
        self._k = self._v = None  # own [nkv, capacity, hs] buffers, allocated on first append
        self._shared = []         # [(k, v)] read-only pieces [nkv, n, hs] held before our own tokens
        self._shared_len = 0
        self.length = 0           # tokens: shared ones, then our own
        self.frozen = False

    def share(self, pieces):  # [(k, v)]: start an empty cache from stored blocks, without copying them
        if self.length:
            raise ValueError("share() starts an empty cache; this one already holds tokens")
        self._shared = list(pieces)
        self._shared_len = self.length = sum(k.shape[1] for k, _ in self._shared)
        if len(self._shared) > MAX_PIECES:
            self.unshare()

    @property
    def shared_length(self):  # tokens read from shared pieces rather than from our own buffer
        return self._shared_len

    def pieces(self):  # -> K pieces, V pieces: lists of [nkv, n_i, hs] that together hold all T tokens, in order
        both = self._shared + ([self.own()] if self.length > self._shared_len else [])
        return [k for k, _ in both], [v for _, v in both]

    def own(self):  # -> K, V [nkv, T - shared_length, hs]: views of the tokens this cache appended itself
        own = self.length - self._shared_len
        return (self._k[:, :own], self._v[:, :own]) if own else (None, None)

    @property
    def keys(self):  # [nkv, T, hs], a view of our own buffer: writing into it changes this cache only
        self.unshare()
        return self._k[:, :self.length] if self._k is not None else None

    @property
    def values(self):  # [nkv, T, hs]
        self.unshare()
        return self._v[:, :self.length] if self._v is not None else None

    def unshare(self):
        """Copy the shared pieces into our own buffer (once), so nothing of ours aliases them."""
        if not self._shared:
            return
        ks, vs = self.pieces()
        self._k, self._v = torch.cat(ks, 1), torch.cat(vs, 1)
        self._shared, self._shared_len = [], 0

    def append(self, k, v):  # [nkv, T_new, hs] x 2 -> all keys and values as pieces (see pieces())
        if self.frozen:
            raise ValueError("this cache is frozen (shared); call .copy() and append to the copy")
        own = self.length - self._shared_len
        need = own + k.shape[1]
        if self._k is None or need > self._k.shape[1]:
            self._grow(k, max(need, 2 * own))
        self._k[:, own:need] = k
        self._v[:, own:need] = v
        self.length += k.shape[1]
        return self.pieces()

    def _grow(self, like, capacity):
        nh, _, hs = like.shape
        new_k = like.new_empty(nh, capacity, hs)
        new_v = like.new_empty(nh, capacity, hs)
        own = self.length - self._shared_len
        if own:
            new_k[:, :own] = self._k[:, :own]
            new_v[:, :own] = self._v[:, :own]
        self._k, self._v = new_k, new_v

    @property
    def nbytes(self):  # bytes of the K and V this cache reads, shared or own (not spare capacity)
        ks, vs = self.pieces()
        return sum(t.numel() * t.element_size() for t in ks + vs)

    @property
    def shared_nbytes(self):  # bytes of the K and V read in place from shared pieces
        return sum(t.numel() * t.element_size() for piece in self._shared for t in piece)

    def copy(self):
        """An independent cache: shared pieces stay shared (nobody writes them), our own tokens are cloned."""
        new = LayerCache()
        new.share(self._shared)
        own = self.length - self._shared_len
        if own:
            new._k, new._v = self._k[:, :own].clone(), self._v[:, :own].clone()
            new.length += own
        return new


class KVCache:
    """keys and values of every layer, [n_kv_heads, T, head_dim] each (n_kv_heads = n_head in GPT-2)."""

    def __init__(self, n_layer):
        self.layers = [LayerCache() for _ in range(n_layer)]

    def __len__(self):  # tokens held
        return self.layers[0].length

    @property
    def nbytes(self):  # exact bytes of all K and V tensors
        return sum(layer.nbytes for layer in self.layers)

    @property
    def shared_nbytes(self):  # of which read in place from a prompt cache's stored blocks, never copied
        return sum(layer.shared_nbytes for layer in self.layers)

    def copy(self):
        new = KVCache(0)
        new.layers = [layer.copy() for layer in self.layers]
        return new

    def freeze(self):
        """Forbid appends, so a prefix shared between requests cannot be changed."""
        for layer in self.layers:
            layer.frozen = True
        return self

    def __repr__(self):
        return f"KVCache({len(self.layers)} layers, {len(self)} tokens, {self.nbytes:,} bytes)"
