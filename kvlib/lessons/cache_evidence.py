"""What the KV cache keeps (K and V) and what it drops (queries, attention outputs, block
outputs), shown by measuring real runs rather than by argument.

- `old_rows_change`: the prompt through the model without a cache, then the prompt plus one
  more token, also without a cache (`rows_change` compares two such passes' Traces). Every old token's q, k, v, attention output and block
  output come out the same both times: causal attention means an old token never sees a
  later one. Nothing about an old token ever needs computing twice.
- `perturbation_effects` and `swap_effects`: change the cached K or V rows, in a copy of the cache
  (`KVCache.edited`) that the next step then reads, and that step's logits move: the new token's own query is
  scored against every cached key, and its weights mix every cached value. Putting another
  prompt's K and V into the cache turns the model into one that read that other prompt.
- `stand_ins`: why V and not the attention output O, and why each layer's own. A cached V row is what a
  token gives whoever reads it; its O row is what it gathered from the others. Give the new token the old
  tokens' O in place of their V, or every layer the next layer's K and V, and the next prediction moves away
  from the uncached run's, while the true K and V reproduce it. `o_for_v_in_one_layer` measures, in one
  layer, how far O stands from V and how much of what the new token reads the swap changes.
- `new_row` and `old_queries_effect`: why not Q. The new token's row of attention, computed by hand from its
  own query and the cached K and V (the cache has no queries to offer), equals the uncached pass's last row.
  And a whole pass whose old tokens are random ones, so that every layer's old queries are wrong, gives the
  new token the uncached run's logits as long as each layer reads the true old K and V (`TrueOldRows`);
  with only the true K, or only the true V, it does not.
- `cached_step` and `step_shapes`: one decode step with the cache, traced, and the shapes of
  what it computed: one query row against all the cached keys.

The decisive test that K and V are enough is cached logits == uncached logits (as in
TransformerLens's tests/integration/test_kv_cache.py, and tests/test_kv_cache.py here);
these functions show why it holds.
"""

import math
from dataclasses import dataclass

import torch

from .. import i18n
from ..model.kv_cache import KVCache, LayerCache
from ..model.models import KVLibError
from ..model.trace import Trace

PARTS = ("q", "k", "v", "out", "resid")  # what a Trace records for each token, in every layer
CACHED = ("K", "V")  # what the cache keeps of each token


def old_rows_change(model, ids, new_id):
    """Largest |difference| per layer between the old tokens' tensors in a pass over `ids` and in a
    pass over ids + [new_id], both without a cache: {part: [one float per layer]}."""
    ids = model.check_ids(ids).tolist()
    before, after = Trace(), Trace()
    model.forward(ids, trace=before)
    model.forward(ids + [int(new_id)], trace=after)
    return rows_change(before, after)


def rows_change(before, after, parts=PARTS):
    """Traces of a text and of that text and more, both without a cache -> {part: [per layer, the largest
    |difference| of the old tokens' rows]}. Rows sit on the second-to-last axis ([nh, T, hs] for q/k/v/out,
    [T, C] for resid, [nh, T, S] for scores and weights, whose old rows are cut to the old columns too: a
    later token is masked from them)."""
    def old(t, like):  # t's part that `like` covers
        return t[..., :like.shape[-2], :like.shape[-1]]

    return {part: [(old(getattr(a, part), getattr(b, part)) - getattr(b, part)).abs().max().item()
                   for a, b in zip(after.layers, before.layers)] for part in parts}


def prefill(model, ids):
    """The prompt into a new cache: (cache, the greedy next token, which the next step feeds)."""
    cache = model.new_cache()
    logits = model.forward(ids, cache=cache, last_only=True)[-1]
    return cache, int(logits.argmax())


def noisy_row(cache, part, layer, position, size, seed=0):
    """A copy of `cache` whose `part` ("K" or "V") row at (layer, position), all heads, has noise
    added whose length is `size` times the row's own."""
    if part not in CACHED:
        raise KVLibError(f"part must be 'K' or 'V', not {part!r}")
    if not 0 <= layer < len(cache.layers) or not 0 <= position < len(cache):
        raise KVLibError(f"the cache has {len(cache.layers)} layers and {len(cache)} positions: "
                         f"pick a layer in 0..{len(cache.layers) - 1} and a position in 0..{len(cache) - 1}")

    def add_noise(i, K, V):  # K, V [nkv, S, hs]: the copy's own
        if i == layer:
            row = {"K": K, "V": V}[part][:, position]  # [nkv, hs], a view into the copy
            noise = torch.randn(row.shape, generator=torch.Generator().manual_seed(seed)).to(row)
            row += size * row.norm() / noise.norm() * noise

    return cache.edited(add_noise)


@dataclass
class Effect:
    part: str       # "K" or "V"
    size: float     # the noise's length, as a multiple of the row's
    change: float   # largest |difference| of the next step's logits
    token: int      # the next step's greedy prediction


def perturbation_effects(model, ids, layer=0, position=0, sizes=(0.01, 1, 100), seed=0):
    """Prefill `ids`, feed its greedy next token as the next decode step does, and see what changing one
    cached K or V row does to that step: (token fed, unchanged prediction, [Effect per part and size])."""
    cache, fed = prefill(model, model.check_ids(ids).tolist())
    step = lambda c: model.forward([fed], cache=c)[-1]  # the next step, reading cache c
    reference = step(cache.copy())
    effects = []
    for part in CACHED:
        for size in sizes:
            logits = step(noisy_row(cache, part, layer, position, size, seed))
            effects.append(Effect(part, size, (logits - reference).abs().max().item(), int(logits.argmax())))
    return fed, int(reference.argmax()), effects


def swap_effects(model, ids, other_ids, next_ids):
    """Prefill `ids`, then run `next_ids` from copies of its cache in which the positions where `other_ids`
    differs hold other_ids' K rows, V rows, or both (in every layer). Returns the last logits for
    {"none", "K", "V", "K and V"} and "other": other_ids + next_ids run without a cache."""
    ids, other_ids = model.check_ids(ids).tolist(), model.check_ids(other_ids).tolist()
    if len(ids) != len(other_ids):
        raise KVLibError(f"the two prompts must have as many tokens ({len(ids)} and {len(other_ids)}): "
                         f"change one word for another that is also one token")
    mine, theirs = model.new_cache(), model.new_cache()
    model.forward(ids, cache=mine)
    model.forward(other_ids, cache=theirs)
    differ = [p for p, (a, b) in enumerate(zip(ids, other_ids)) if a != b]
    results = {}
    for label, parts in (("none", ()), ("K", ("K",)), ("V", ("V",)), ("K and V", ("K", "V"))):

        def swap(i, K, V):  # K, V [nkv, P, hs]: the copy's own; their rows where the prompts differ
            if "K" in parts:
                K[:, differ] = theirs.layers[i].keys[:, differ]
            if "V" in parts:
                V[:, differ] = theirs.layers[i].values[:, differ]

        results[label] = model.forward(next_ids, cache=mine.edited(swap))[-1]
    results["other"] = model.forward(other_ids + model.check_ids(next_ids).tolist())[-1]
    return results


def kl_divergence(logits_p, logits_q):  # [V], [V] -> nats
    """KL(p || q) of the two next-token distributions: 0 when they are the same, larger as q strays from p."""
    log_p, log_q = (torch.log_softmax(x.float(), -1) for x in (logits_p, logits_q))
    return max(torch.nn.functional.kl_div(log_q, log_p, log_target=True, reduction="sum").item(), 0.0)  # no -1e-9


def stand_ins(model, ids, new_id, layers):
    """Prefill `ids`, then feed `new_id` from copies of the cache: as it is ("K and V"); with the V rows of
    each layer in `layers` replaced by the old tokens' attention outputs ("K and O"); and with each layer in
    `layers` holding the next layer's K and V ("next layer's K and V"; the last layer takes the first's).
    Returns the last logits of each, and of ids + [new_id] run without a cache ("uncached")."""
    ids = model.check_ids(ids).tolist()
    L = model.config.n_layer
    if not all(0 <= layer < L for layer in layers):
        raise KVLibError(f"{model.name} has layers 0..{L - 1}, not {list(layers)}")
    cache, trace = model.new_cache(), Trace()
    model.forward(ids, cache=cache, trace=trace)
    heads = model.config.kv_head(torch.arange(model.config.n_head))  # [nh]: the K/V head each query head reads

    def o_for_v(i, K, V):  # V [nkv, P, hs]: what each old token gives whoever reads it, in the copy
        if i in layers:
            gathered = trace.layers[i].out  # [nh, P, hs]: weights · V, what each old token took from the others
            # grouped heads: several query heads read one V head, so its stand-in is the mean of what they gathered
            V[:] = torch.stack([gathered[heads == j].mean(0) for j in range(len(V))])

    def next_layers(i, K, V):  # K, V [nkv, P, hs]: the right shape, the wrong layer's numbers
        if i in layers:
            K[:], V[:] = cache.layers[(i + 1) % L].keys, cache.layers[(i + 1) % L].values

    return {"uncached": model.forward(ids + [int(new_id)])[-1],
            "K and V": model.forward([new_id], cache=cache.copy())[-1],
            "K and O": model.forward([new_id], cache=cache.edited(o_for_v))[-1],
            "next layer's K and V": model.forward([new_id], cache=cache.edited(next_layers))[-1]}


def o_for_v_in_one_layer(model, ids, new_id, layer):  # -> ([P] per old token, a float)
    """What stand_ins(..., [layer]) changes, from one uncached pass over ids + [new_id]: how far each old token's
    O (as stand_ins puts it in the cache) stands from its V, |O - V| / |V| over all heads (0 for the first token,
    which could read only itself); and how much that changes what the new token reads there: |w·(O - V)| with its
    own weights w, over the length of its true attention output. The layers below are untouched, so w is the true
    one and the change is exact."""
    ids = model.check_ids(ids).tolist() + [int(new_id)]
    trace = Trace()
    model.forward(ids, trace=trace)
    t, heads = trace.layers[layer], model.config.kv_head(torch.arange(model.config.n_head))
    O = torch.stack([t.out[heads == j].mean(0) for j in range(len(t.v))])[:, :-1]  # [nkv, P, hs]
    V = t.v[:, :-1]                                                                 # [nkv, P, hs]
    w = t.weights[:, -1, :-1]                                                       # [nh, P]: the new token's
    change = (w[:, :, None] * (O - V)[heads]).sum(1)                                # [nh, hs]
    return (O - V).norm(dim=(0, 2)) / V.norm(dim=(0, 2)), (change.norm() / t.out[:, -1].norm()).item()


def attention_row(q, K, V, config):  # q [nh, 1, hs], K and V [nkv, S, hs] -> weights [nh, 1, S], out [nh, 1, hs]
    """One new token's attention from its query and the cached keys and values, and nothing else; query
    head h reads K/V head config.kv_head(h). No mask: a new token may read every cached token, itself included."""
    heads = config.kv_head(torch.arange(q.shape[0]))  # [nh]
    K, V = K[heads], V[heads]  # [nh, S, hs]: row h is the K/V head that query head h reads
    weights = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # [nh, 1, S]
    return weights, weights @ V


@dataclass
class NewRow:
    full: torch.Tensor            # [nh, 1, S] the last row of the weights in a pass over all tokens, no cache
    from_cache: torch.Tensor      # [nh, 1, S] attention_row(the new token's q, the cached K, V)
    out_full: torch.Tensor        # [nh, 1, hs] the full pass's last output row
    out_from_cache: torch.Tensor  # [nh, 1, hs] attention_row's output from the new q and the cache


def new_row(model, ids, layer):
    """The last token of `ids`, fed as a decode step after the others were cached: its attention row at
    `layer` from the uncached pass, and by hand from its own query and the cache (which has no queries)."""
    ids = model.check_ids(ids).tolist()
    if len(ids) < 2 or not 0 <= layer < model.config.n_layer:
        raise KVLibError(f"give at least 2 tokens and a layer in 0..{model.config.n_layer - 1}")
    full, step, cache = Trace(), Trace(), model.new_cache()
    model.forward(ids, trace=full)                        # every token's query, key and value; no cache
    model.forward(ids[:-1], cache=cache)                  # the old tokens: the cache keeps their K and V only
    model.forward(ids[-1:], cache=cache, trace=step)      # the new token: its q, its k and v join the cache
    K, V = cache.layers[layer].keys, cache.layers[layer].values  # [nkv, S, hs]
    weights, out = attention_row(step.layers[layer].q, K, V, model.config)
    t = full.layers[layer]
    return NewRow(t.weights[:, -1:], weights, t.out[:, -1:], out)


class TrueOldRows(LayerCache):
    """One layer of a pass fed every token at once: the old tokens' K rows, V rows or both (None: the pass's own)
    are put back to `keys`, `values` [nkv, P, hs], a true cache's, before attention reads them."""

    def __init__(self, keys, values):
        super().__init__()
        self.true = keys, values

    def append(self, k, v):  # [nkv, T, hs] x 2, T > P: the first P rows are the old tokens'
        k, v = (mine if true is None else torch.cat([true, mine[:, true.shape[1]:]], 1)
                for mine, true in zip((k, v), self.true))
        return super().append(k, v)


def old_queries_effect(model, ids, new_id, seed=0):
    """One pass over ids + [new_id] with the old tokens swapped for random ones, so that in every layer their
    queries (and all they compute) are not the prompt's, while each layer reads the prompt's true old K rows, V
    rows, both, or neither (TrueOldRows, from the prompt's cache). Returns ({"K and V", "K", "V", "neither":
    largest |difference| of the new token's logits from the true uncached run's}, [per layer: |old q - true old q|
    / |true old q|, from the "K and V" pass]). If a new token read any old query, "K and V" would move too."""
    ids = model.check_ids(ids).tolist()
    true, cache = Trace(), model.new_cache()
    reference = model.forward(ids + [int(new_id)], trace=true)[-1]
    model.forward(ids, cache=cache)
    others = torch.randint(model.config.vocab_size, (len(ids),), generator=torch.Generator().manual_seed(seed))
    changes, moved = {}, None
    for label, parts in (("K and V", "KV"), ("K", "K"), ("V", "V"), ("neither", "")):
        run, trace = KVCache(0), Trace()
        run.layers = [TrueOldRows(c.keys if "K" in parts else None, c.values if "V" in parts else None)
                      for c in cache.layers]
        logits = model.forward(others.tolist() + [int(new_id)], cache=run, trace=trace)[-1]
        changes[label] = (logits - reference).abs().max().item()
        if moved is None:  # [nh, P, hs] per layer: the old rows of q, in this pass and in the true one
            moved = [((a.q[:, :-1] - b.q[:, :-1]).norm() / b.q[:, :-1].norm()).item()
                     for a, b in zip(trace.layers, true.layers)]
    return changes, moved


def cached_step(model, ids):
    """Prefill `ids`, then one traced decode step feeding the greedy next token:
    (the step's Trace, the cache after it, the token fed)."""
    cache, token = prefill(model, model.check_ids(ids).tolist())
    trace = Trace()
    model.forward([token], cache=cache, trace=trace)
    return trace, cache, token


# what one cached decode step computes in a layer, in order (what each is: i18n's "steppart." words)
STEP_PARTS = ("q", "k", "v", "K", "V", "scores", "weights", "out")


def step_shapes(trace, cache, layer=0):
    """The shape of each tensor in STEP_PARTS at `layer`, from a traced cached step and its cache."""
    t, c = trace.layers[layer], cache.layers[layer]
    tensors = {"q": t.q, "k": t.k, "v": t.v, "K": c.keys, "V": c.values,
               "scores": t.scores, "weights": t.weights, "out": t.out}
    return {name: tuple(tensors[name].shape) for name in STEP_PARTS}


def step_table(trace, cache, layer=0):
    """step_shapes as lines of text: name, [shape], what it is."""
    shapes = step_shapes(trace, cache, layer)
    return "\n".join(f"{name:>8}  {str(list(shapes[name])):<13} {i18n.t('steppart.' + name)}" for name in STEP_PARTS)
