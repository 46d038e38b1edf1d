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
- Shared blocks: a prompt-cache hit hands a request the stored blocks themselves, by
  reference, as vLLM's block tables do (`share`). The request's own tokens go into its
  own buffer after them, so the shared blocks are never written (copy-on-write); each
  call gathers them beside the request's own tokens into the K and V it hands out,
  where vLLM's kernels read the blocks in place through the table.
- Reading and changing: each layer's `keys` and `values` are for reading; a lesson that changes
  what the cache holds (noise on a row, another prompt's rows) gets a changed copy from `edited`,
  so the cache it started from, and any block it shares, stays as it was.
"""

import torch

from .errors import KVLibError, check_count, is_count


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
    """One layer's K and V [nkv, length, hs]: shared pieces first (read-only), then a buffer of its own."""

    def __init__(self):
        self._shared = []         # [(k, v)] read-only pieces [nkv, n, hs] held before our own tokens
        self._k = self._v = None  # own [nkv, capacity, hs] buffers, allocated on first append
        self.shared_length = 0    # tokens read from shared pieces
        self.length = 0           # tokens held: shared ones, then our own

    def append(self, k, v):  # [nkv, T_new, hs] x 2 -> every K and V held, [nkv, length, hs] x 2
        own = self.length - self.shared_length
        need = own + k.shape[1]
        if self._k is None or need > self._k.shape[1]:
            self._grow(k, max(need, 2 * own))
        self._k[:, own:need] = k
        self._v[:, own:need] = v
        self.length += k.shape[1]
        return self.keys, self.values

    @property
    def keys(self):  # [nkv, length, hs], to read: a view of our own buffer, or, with shared pieces, a gathered copy
        """What attention reads. Read it; never write into it: a write would change this cache in place, or,
        with shared pieces, vanish into a copy. A lesson that changes K or V asks KVCache.edited for a copy."""
        return self._held(0)

    @property
    def values(self):  # [nkv, length, hs]
        return self._held(1)

    def _held(self, kv):
        own = self.own()[kv]
        if not self._shared:
            return own
        return torch.cat([piece[kv] for piece in self._shared] + ([own] if own is not None else []), 1)

    def pieces(self):  # -> [(k, v)]: the shared pieces, then our own tokens, in order
        return self._shared + ([self.own()] if self.length > self.shared_length else [])

    def own(self):  # -> K, V [nkv, length - shared_length, hs]: views of the tokens this cache appended itself
        own = self.length - self.shared_length
        return (self._k[:, :own], self._v[:, :own]) if own else (None, None)

    def share(self, pieces):  # [(k, v)]: start an empty cache from stored blocks, without copying them
        if self.length:
            raise KVLibError("share() starts an empty cache; this one already holds tokens")
        self._shared = list(pieces)
        self.shared_length = self.length = sum(k.shape[1] for k, _ in self._shared)

    def unshare(self):
        """Copy the shared pieces into our own buffer (once), so that writes into `keys` reach this cache
        (and never the blocks a prompt cache stores)."""
        if self._shared:
            self._k, self._v = self.keys, self.values
            self._shared, self.shared_length = [], 0

    def drop(self, start, end):
        """Forget held tokens start..end-1; later ones move up (a sliding window's eviction, or a crop)."""
        if start == end:
            return
        if start < self.shared_length:  # only a crop reaches into shared pieces: keep them whole or copy
            self.unshare()
        own_start, own_end, own = start - self.shared_length, end - self.shared_length, self.length - self.shared_length
        for buf in (self._k, self._v):
            buf[:, own_start:own - (end - start)] = buf[:, own_end:own].clone()  # clone: the two ranges overlap
        self.length -= end - start

    def _grow(self, like, capacity):
        nh, _, hs = like.shape
        new_k, new_v = like.new_empty(nh, capacity, hs), like.new_empty(nh, capacity, hs)
        own = self.length - self.shared_length
        if own:
            new_k[:, :own], new_v[:, :own] = self._k[:, :own], self._v[:, :own]
        self._k, self._v = new_k, new_v

    @property
    def nbytes(self):  # bytes of the K and V this cache reads, shared or own (not spare capacity)
        return sum(t.numel() * t.element_size() for piece in self.pieces() for t in piece)

    @property
    def shared_nbytes(self):  # bytes of the K and V read from shared pieces
        return sum(t.numel() * t.element_size() for piece in self._shared for t in piece)

    def copy(self):
        """An independent cache: shared pieces stay shared (nobody writes them), our own tokens are cloned."""
        new = LayerCache()
        new.share(self._shared)
        k, v = self.own()
        if k is not None:
            new._k, new._v = k.clone(), v.clone()
            new.length += k.shape[1]
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

    def share(self, pieces):  # per layer [(k, v)]: start an empty cache from a prompt cache's stored blocks
        if self.window is not None:
            raise KVLibError("a windowed cache cannot start from shared blocks: they hold every token")
        for layer, layer_pieces in zip(self.layers, pieces):
            layer.share(layer_pieces)
        self.seen = len(self)

    @property
    def nbytes(self):  # bytes of the K and V held, shared blocks included, spare capacity not
        return sum(layer.nbytes for layer in self.layers)

    @property
    def shared_nbytes(self):  # of which held by reference to a prompt cache's stored blocks, not copied in
        return sum(layer.shared_nbytes for layer in self.layers)

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
            layer.unshare()  # every token in the copy's own buffer, so the edit's writes reach it
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
