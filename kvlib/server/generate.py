"""Generation, the two calls a user makes: `generate` continues one prompt, `generate_batch` a list of them.
Both run the step (batching.step) through its one loop (batching.steps), as serving and the prompt cache do;
they observe each step from outside, timing it and, for one prompt, streaming its token.

With the cache (use_cache=True) the prompt goes through the model once, and each step feeds only the newest
token, whose K and V join the cache. Without it, every step feeds the whole sequence again, as a model
without memory must (the loop in rasbt/LLMs-from-scratch ch04 before its KV-cache diff). Both give the same
tokens.
"""

import time

import torch

from ..errors import KVLibError
from ..model.kv_cache import KVCache, one_sequence
from .batching import Batch, Decoding, prompt_list, steps
from .paged_cache import PagedKVCache, Sequence
from .sampling import Generation, Rules, check_sampling, next_piece


class Solo:
    """The step's cache for `generate`: one sequence on a contiguous KVCache (kv_cache.py), the one the views
    watch grow. It answers the step as a PagedKVCache answers for a batch, for a sequence that always has room
    (the KVCache grows; a window drops what no token sees). forget=True (use_cache=False): what a call wrote is
    not kept, so the next step feeds the whole text again, into a new cache, as a model without one must."""

    def __init__(self, kv, forget=False):
        self.kv, self.forget, self.seq = kv, forget, None

    def add(self, prompt_ids, *_):  # -> the sequence's id; it holds what its KVCache has read (generate's cache=)
        self.seq = Sequence(0, "default", length=self.kv.seen)
        return self.seq.id

    def sequence(self, _):
        return self.seq

    def fits(self, _):
        return True

    def schedule(self, rows):  # -> what the forward pass appends to: its KVCache (a new one each call, forgetting)
        if self.forget:
            self.kv = KVCache(len(self.kv.layers))
        self.seq.length += rows[0][1]
        return self.kv

    def file(self, _):  # after the call: a paged cache files the blocks written; this one keeps or forgets
        if self.forget:
            self.seq.length = 0

    def release(self, _):  # the KVCache is the caller's (gen.cache): nothing to give back
        pass

    withdraw = release


def generate(model, prompt, max_new_tokens=20, use_cache=True, temperature=0.0, top_k=None, top_p=None,
             seed=None, on_token=None, stop_at_eos=True, cache=None):
    """Continue `prompt` (text or ids). on_token(id, text_piece) is called as each token arrives
    and may return False to stop (a Stop button); text_piece is "" while a character several tokens
    long is still arriving, so the pieces join up to gen.text (but for a character the last token cut).
    cache: a KVCache to fill instead of a new one, empty (so a caller can watch it grow from on_token)
    or having already read the prompt's first tokens (only the rest is fed);
    gen.cache is it either way.

    Stops after max_new_tokens, at the end-of-text token, or when the context is full (gen.stop says which, as
    a code; gen.stop_reason in words). gen.step_seconds holds each step's time, the prefill first, from the
    step's start to its token picked (on_token's time is not in it)."""
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    prompt_ids = model.check_ids(prompt).tolist()
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    if cache is not None and not use_cache:
        raise KVLibError("a cache was given with use_cache=False: pass one or the other")
    # tokens fed so far, not tokens held: a sliding window holds fewer than it has seen
    if cache is not None and one_sequence(cache).seen >= len(prompt_ids):
        raise KVLibError(f"the cache has already read {cache.seen} tokens, the prompt is {len(prompt_ids)}: it may "
                         "hold the prompt's first tokens, but at least the last one must be fed. Pass a new cache "
                         "(model.new_cache()), or the prompt with the answer so far")
    gen = Generation(prompt_ids=prompt_ids, cache=(model.new_cache() if cache is None else cache) if use_cache else None)
    batch = Batch(Solo(gen.cache if use_cache else KVCache(model.config.n_layer), forget=not use_cache))
    batch.waiting.append(Decoding(gen, Rules(max_new_tokens, temperature, top_k, top_p, generator, stop_at_eos)))
    shown = ""  # the text the pieces handed to on_token add up to
    model.synchronize()  # a GPU runs ahead of Python: wait for it before each clock read
    start = time.perf_counter()
    for _ in steps(model, batch):
        model.synchronize()
        gen.step_seconds.append(time.perf_counter() - start)
        gen.text = model.decode(gen.ids)
        piece = next_piece(gen.text, shown)
        shown += piece
        if on_token is not None and on_token(gen.ids[-1], piece) is False:
            gen.stop, gen.stop_args = "on_token", {}  # a Stop button outranks the rule this token met, if any
        if gen.stop:
            break
        model.synchronize()
        start = time.perf_counter()  # the next step's clock starts once this one's token is handed on
    return gen


def generate_batch(model, prompts, max_new_tokens=20, temperature=0.0, top_k=None, top_p=None, seed=None,
                   stop_at_eos=True, block_size=16):
    """Continue every prompt (texts or id lists) together; one Generation each, in order.

    Greedy by default, so each answer is the one `generate` gives its prompt alone. With a
    temperature, sequence i samples with its own generator (seed + i). A sequence that stops
    (max_new_tokens, end-of-text, context full) leaves the batch and gives its blocks back;
    the others go on. gen.step_seconds holds the time of every step the sequence took part in,
    its prefill first."""
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    gens = [Generation(model.check_ids(p).tolist()) for p in prompt_list(prompts, "generate_batch")]
    batch = Batch(PagedKVCache(model.config.n_layer, len(gens), block_size, grow=True))  # it grows as they hold more
    batch.waiting.extend(Decoding(gen, Rules(max_new_tokens, temperature, top_k, top_p, stop_at_eos=stop_at_eos,
                                             generator=None if seed is None else torch.Generator().manual_seed(seed + i)),
                                  spans=[]) for i, gen in enumerate(gens))
    model.synchronize()  # timing observes the loop: each step from its start to its last token picked
    mark = time.perf_counter()
    for record in steps(model, batch):
        model.synchronize()
        seconds, mark = time.perf_counter() - mark, time.perf_counter()
        for d, _ in record.rows:
            d.gen.step_seconds.append(seconds)
    for gen in gens:
        gen.text = model.decode(gen.ids)
    return gens
