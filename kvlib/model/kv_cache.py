"""The KV cache: per layer, the keys and values of every token seen so far.

Only K and V are kept: a new token's query is compared with old keys and mixes old
values, while old queries and old outputs are never read again. As in
TransformerLens's `HookedTransformerKeyValueCache`, the cache is an explicit object
passed into the forward pass, which appends to it.

The forward pass asks the cache two things: where the new tokens sit and what each may
look at (`admit`, once per call), and, per layer, all the keys and values to attend over
(`append`). Everything else a cache can do happens in here, out of the teaching code:
- Storage grows by doubling (as a Python list does), so appending one token does not
  re-copy the whole cache every step.
- A sliding window (`window`, `sinks`): each new call first drops the tokens no new token
  may see, so from the second call on the cache holds the first `sinks` tokens and the last
  `window`; within a call (a prompt fed at once is held whole until the next) the mask hides
  the same tokens, so eviction and masking agree. Sinks as in StreamingLLM, but positions stay
  those of the text: a window saves memory, it does not stretch the context.
- Reading and changing: each layer's `keys` and `values` are for reading; a lesson that changes
  what the cache holds (noise on a row, another prompt's rows) gets a changed copy from `edited`,
  so the cache it started from stays as it was.

One sequence's cache stays one contiguous buffer per layer: blocks shared between sequences
(a prompt cache, a server's prefix caching) live in blocks.py's pool, read through paged_cache.py.
"""

import torch

from ..errors import KVLibError, check_count, is_count


def causal_mask(q_pos, k_pos, window=None, sinks=0):  # positions [T], [S] -> [T, S]
    """0 where a query may look at a key, -inf where it may not: the future, and with a sliding
    `window` any key `window` or more behind it except the first `sinks` (attention sinks).

    -inf, not 0: softmax takes exp, exp(0) = 1 would still give the future weight,
    exp(-inf) = 0 gives it none."""
    i, j = q_pos[:, None], k_pos[None]
    seen = j <= i
    if window is not None:
        seen &= (i - j < window) | (j < sinks)
    return torch.zeros(seen.shape, device=q_pos.device).masked_fill(~seen, float("-inf"))


def only_causal(mask):  # [T, S] -> bool
    """Is this the plain causal mask of a text fed whole (T == S, each token sees itself and those before it,
    nothing more hidden)? Then torch's fused kernel can be told so (is_causal) instead of handed the mask, and it
    skips the scores above the diagonal rather than computing them to add -inf: half a prompt's attention work.
    A paged cache's Groups (paged_cache.py) are no mask tensor: each group says so itself."""
    if not isinstance(mask, torch.Tensor):
        return False
    T, S = mask.shape
    if T != S or T == 1:
        return False
    pos = torch.arange(T, device=mask.device)
    return torch.equal(mask, causal_mask(pos, pos))


class LayerCache:
    """One layer's K and V [nkv, length, hs], in a buffer of its own that grows by doubling."""

    def __init__(self):
        self._k = self._v = None  # [nkv, capacity, hs] buffers, allocated on first append
        self.length = 0           # tokens held

    def append(self, k, v):  # [nkv, T_new, hs] x 2 -> every K and V held, [nkv, length, hs] x 2
        need = self.length + k.shape[1]
        if self._k is None or need > self._k.shape[1]:
            self._grow(k, max(need, 2 * self.length))
        self._k[:, self.length:need] = k
        self._v[:, self.length:need] = v
        self.length = need
        return self.keys, self.values

    @property
    def keys(self):  # [nkv, length, hs], to read: a view of the buffer (None while empty)
        """What attention reads. Read it; never write into it: a lesson that changes K or V asks
        KVCache.edited for a changed copy, so no cache changes under whoever else reads it."""
        return self._k[:, :self.length] if self.length else None

    @property
    def values(self):  # [nkv, length, hs]
        return self._v[:, :self.length] if self.length else None

    def drop(self, start, end):
        """Forget held tokens start..end-1; later ones move up (a sliding window's eviction, or a crop)."""
        if start == end:
            return
        for buf in (self._k, self._v):
            buf[:, start:self.length - (end - start)] = buf[:, end:self.length].clone()  # clone: the ranges overlap
        self.length -= end - start

    def _grow(self, like, capacity):
        nh, _, hs = like.shape
        new_k, new_v = like.new_empty(nh, capacity, hs), like.new_empty(nh, capacity, hs)
        if self.length:
            new_k[:, :self.length], new_v[:, :self.length] = self.keys, self.values
        self._k, self._v = new_k, new_v

    @property
    def nbytes(self):  # bytes of the K and V held (not spare capacity)
        return 2 * self.keys.numel() * self.keys.element_size() if self.length else 0

    def copy(self):  # an independent cache: the tokens held, cloned
        new = LayerCache()
        if self.length:
            new._k, new._v, new.length = self.keys.clone(), self.values.clone(), self.length
        return new


class KVCache:
    """keys and values of every layer, [n_kv_heads, T, head_dim] each (n_kv_heads = n_head in GPT-2).

    window, sinks: from the second call on, hold only the first `sinks` tokens and the last `window`;
    None keeps every token."""

    def __init__(self, n_layer, window=None, sinks=0):
        if window is not None:
            check_count(window, "window (tokens)")
            check_count(sinks, "sinks (tokens)", least=0)
        self.layers = [LayerCache() for _ in range(n_layer)]
        self.window, self.sinks = window, sinks
        self.seen = 0  # tokens that went through the model: the next one's position

    def __len__(self):  # tokens held (fewer than seen once a window has dropped some)
        return self.layers[0].length if self.layers else 0

    def positions(self, device=None):  # [len]: where each held token sat in the text
        held = len(self)
        if held == self.seen:
            return torch.arange(held, device=device)
        head = min(self.sinks, held)
        return torch.cat([torch.arange(head, device=device), torch.arange(self.seen - (held - head), self.seen,
                                                                           device=device)])

    def admit(self, t_new, device=None):  # -> positions of the new tokens [T], mask [T, S] (S = held + T)
        """Before a forward pass: drop from every layer the tokens that no new token may see (outside
        the window, not a sink), count the new tokens as seen, and say what each of them may look at."""
        new = torch.arange(self.seen, self.seen + t_new, device=device)
        if self.window is not None:
            first = self.seen - self.window + 1  # the oldest position the first new token still sees
            pos = self.positions(device)
            gone = int(((pos < first) & (pos >= self.sinks)).sum())
            if gone:
                start = min(self.sinks, len(self))
                for layer in self.layers:
                    layer.drop(start, start + gone)
        held = torch.cat([self.positions(device), new])
        self.seen += t_new
        return new, causal_mask(new, held, self.window, self.sinks)

    def crop(self, n):
        """Keep the first n tokens held and forget the rest, as if they had never been fed. A window that has
        dropped tokens keeps at least its sinks and window - 1 tokens: what the next query reads (fewer, and
        the tokens it would need again are gone)."""
        if not is_count(n) or not 0 <= n <= len(self):
            raise KVLibError(f"crop keeps 0 to {len(self)} tokens, not {n!r}")
        least = self.sinks + self.window - 1 if len(self) < self.seen else 0
        if n < least:
            raise KVLibError(f"this window has dropped {self.seen - len(self)} tokens: crop keeps at least {least} "
                             f"(its {self.sinks} sinks and the {self.window - 1} the next token reads), or the older "
                             f"ones it would need again are gone; start a new cache instead")
        self.seen -= len(self) - n
        for layer in self.layers:
            layer.drop(n, layer.length)

    @property
    def nbytes(self):  # bytes of the K and V held, spare capacity not
        return sum(layer.nbytes for layer in self.layers)

    def copy(self):
        new = KVCache(0, self.window, self.sinks)
        new.layers, new.seen = [layer.copy() for layer in self.layers], self.seen
        return new

    def edited(self, edit):
        """A copy of this cache with its K and V changed by edit(layer, K, V), which writes into K and V
        [nkv, length, hs]: the copy's own tensors, one layer at a time. This cache stays as it was. The one way
        to change what a cache holds (a lesson's noise, swapped rows, rounding), as `keys` and `values` are
        for reading."""
        if not len(self):
            raise KVLibError("an empty cache has no K or V to edit: feed it tokens first")
        new = self.copy()
        for i, layer in enumerate(new.layers):
            edit(i, layer.keys, layer.values)
        return new

    def __repr__(self):
        window = f", window {self.window} + {self.sinks} sinks" if self.window is not None else ""
        return f"KVCache({len(self.layers)} layers, {len(self)} tokens{window}, {self.nbytes:,} bytes)"


def one_sequence(cache):  # -> cache, once it is a KVCache: Model.forward and generate read its `seen`
    if not isinstance(cache, KVCache):
        raise KVLibError(f"Model.forward and generate continue one sequence's KVCache, not a {type(cache).__name__}: "
                         "a paged cache serves many sequences through kvlib.generate_batch (batching.forward_rows)")
    return cache
