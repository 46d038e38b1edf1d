"""The KV cache: per layer, the keys and values of every token seen so far.

Only K and V are kept: a new token's query is compared with old keys and mixes old
values, while old queries and old outputs are never read again. As in
TransformerLens's `HookedTransformerKeyValueCache`, the cache is an explicit object
passed into the forward pass, which appends to it.

Storage grows by doubling (as a Python list does), so appending one token does not
re-copy the whole cache every step; `keys` and `values` are views of what is held.
"""


class LayerCache:
    def __init__(self):
        self._k = self._v = None  # [nkv, capacity, hs] buffers, allocated on first append
        self.length = 0
        self.frozen = False

    @property
    def keys(self):  # [nkv, T, hs]
        return self._k[:, :self.length] if self._k is not None else None

    @property
    def values(self):  # [nkv, T, hs]
        return self._v[:, :self.length] if self._v is not None else None

    def append(self, k, v):  # [nkv, T_new, hs] x 2 -> all keys and values [nkv, T, hs] x 2
        if self.frozen:
            raise ValueError("this cache is frozen (shared); call .copy() and append to the copy")
        need = self.length + k.shape[1]
        if self._k is None or need > self._k.shape[1]:
            self._grow(k, max(need, 2 * self.length))
        self._k[:, self.length:need] = k
        self._v[:, self.length:need] = v
        self.length = need
        return self.keys, self.values

    def reserve(self, capacity, like):
        """Make room for `capacity` tokens at once (a prefill that knows its length copies once)."""
        if self._k is None or capacity > self._k.shape[1]:
            self._grow(like, capacity)

    def _grow(self, like, capacity):
        nh, _, hs = like.shape
        new_k = like.new_empty(nh, capacity, hs)
        new_v = like.new_empty(nh, capacity, hs)
        if self._k is not None:
            new_k[:, :self.length] = self.keys
            new_v[:, :self.length] = self.values
        self._k, self._v = new_k, new_v

    @property
    def nbytes(self):  # bytes of the K and V held (not of spare capacity)
        if self._k is None:
            return 0
        return self.keys.numel() * self.keys.element_size() * 2

    def copy(self):
        new = LayerCache()
        if self._k is not None:
            new._k, new._v = self.keys.clone(), self.values.clone()
            new.length = self.length
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
