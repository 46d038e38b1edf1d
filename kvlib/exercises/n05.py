"""Notebook 5's exercises: answers computed live from the models the notebook passes."""

from . import exercise
from .. import cache_evidence, memory
from ..generate import generate

EXAMPLE = "The king is dead"  # notebook 5's running example (notebook 4's too): whole words on every tokenizer here


@exercise("05.k_rows", hint="Each forward pass appends one K row per token it is fed, in every layer; "
          "nothing is ever removed.",
          explain="The prompt's 4 tokens give 4 rows, and each of the 3 one-token steps appends one more: "
                  "{answer} rows in every layer (and as many V rows).")
def k_rows(model):
    """Feed a 4-token prompt into a new cache, then 3 more tokens one at a time: how many K rows does each
    layer's cache hold?"""
    cache = model.new_cache()
    model.forward([1, 2, 3, 4], cache=cache)
    for token in (5, 6, 7):
        model.forward([token], cache=cache)
    rows = {layer.keys.shape[1] for layer in cache.layers}
    assert len(rows) == 1  # every layer holds the same tokens
    return rows.pop()


@exercise("05.swap_changes", uses=("smollm2",),
          hint="Keys decide where the new token looks; values are what it brings back from there.",
          explain="With France's keys but Germany's values, the answer changes; with Germany's keys and France's "
                  "values it does not: the right letter is {answer}. What a cached token contributes is carried by "
                  "its value; its key only decides how much weight it gets.")
def swap_changes(smollm2):
    """In SmolLM2's cache for "The capital of France", replace the rows of " France" by those of " Germany"
    (every layer), then feed " is". Which swap changes the predicted next token? a) the K rows only,
    b) the V rows only, c) either one alone, d) neither."""
    runs = cache_evidence.swap_effects(smollm2, "The capital of France", "The capital of Germany", " is")
    before = int(runs["none"].argmax())
    k, v = (int(runs[part].argmax()) != before for part in ("K", "V"))
    return {(True, False): "a", (False, True): "b", (True, True): "c", (False, False): "d"}[(k, v)]


@exercise("05.uncached_factor_300", uses=("random-gpt2",), tolerance=0.03,
          hint="In the table, the cached step hardly grows with the tokens; the uncached one grows about in "
               "proportion to them. Scale the 256-token column to 300 tokens, then divide.",
          explain="At 300 tokens the uncached step costs about {answer:.0f} times the cached one. Not 300 times: "
                  "both compute the logits of the last position only, the same work in both.")
def uncached_factor_300(big):
    """For GPT-2 small's shape: the step that follows 300 tokens, by what factor do its multiply-adds without
    the cache exceed those with it (within 3 %)?"""
    c = big.config
    return round(memory.decode_step_macs(c, 300, cached=False) / memory.decode_step_macs(c, 300, cached=True), 1)


@exercise("05.smollm2_bytes", uses=("smollm2",),
          hint="2 (K and V) × layers × KV heads (not query heads) × head size × 4 bytes.",
          explain="2 × 30 layers × 3 KV heads × 64 × 4 bytes = {answer:,} bytes per token, measured on the real "
                  "cache's tensors.")
def smollm2_bytes(smollm2):
    """How many bytes per token does SmolLM2's KV cache take in fp32 (4 bytes per number)?"""
    cache = smollm2.new_cache()
    smollm2.forward(smollm2.encode("The capital of France is"), cache=cache)
    return cache.nbytes // len(cache)


@exercise("05.cached_loop",
          hint="Feed the prompt once into a new cache; after that, feed only the token you just picked (the cache "
               "already holds the rest), and pick each token as the argmax of the last row of logits.",
          explain="kvlib.generate's greedy ids: {answer}. Your loop is right when it matches them token for token.")
def cached_loop(model):
    """Write greedy generation with a KV cache, using model.forward(ids, cache=cache): the 20 token ids that
    follow the running example, "The king is dead"."""
    return generate(model, EXAMPLE, 20, stop_at_eos=False).ids
