"""Batched generation: many prompts decoded together, the weights read once per step for all.

A decode step of one sequence multiplies one row by every weight matrix: the time goes into
reading the matrices, and the arithmetic units mostly wait. B sequences decoded together give
each matrix B rows for the same read, so up to the point where arithmetic, not reading, is the
limit, B answers cost about what one did. Each sequence keeps its own tokens and length in a
shared paged cache (paged_cache.py), which keeps users apart inside attention.

Prompts are prefilled one at a time: a prompt already gives the matmuls many rows, so batching
pays at decode, where each sequence brings one.
"""

import time
from dataclasses import dataclass

import torch

from ..errors import KVLibError
from .generate import Generation, Rules, check_sampling, pick
from .paged_cache import PagedKVCache, blocks_for


@torch.no_grad()
def forward_rows(model, cache, rows):  # rows [(sequence id, [ids])] -> logits [len(rows), V]
    """One forward call over several sequences' new tokens, packed one after another; returns the logits
    of each sequence's last new token (the one that picks its next token)."""
    if not rows:
        raise KVLibError("forward_rows needs at least one row: [(sequence id, [ids]), ...]")
    # every row checked (ids in the vocabulary, a text encoded; within the context) before any sequence takes a slot
    rows = [(seq_id, model.check_ids(seq_ids)) for seq_id, seq_ids in rows]
    for seq_id, seq_ids in rows:
        if cache.sequence(seq_id).length + len(seq_ids) > model.config.n_ctx:
            raise KVLibError(f"sequence {seq_id} would hold {cache.sequence(seq_id).length + len(seq_ids)} tokens, "
                             f"past {model.name}'s context of {model.config.n_ctx}: release it and start anew")
    cache.schedule([(seq_id, len(seq_ids)) for seq_id, seq_ids in rows])
    ids = torch.cat([seq_ids for _, seq_ids in rows])  # [T]
    if len(rows) == 1:  # one sequence (a prefill, or a batch of one): only its last row needs the output head
        return model.family.forward(ids, model.params, model.config, cache, last_only=True)
    last = torch.tensor([len(seq_ids) for _, seq_ids in rows], device=model.device).cumsum(0) - 1  # [len(rows)]
    return model.family.forward(ids, model.params, model.config, cache)[last]


@dataclass
class Decoding:  # one sequence on a paged cache: what advance feeds it and how it picks and stops
    seq: int         # its id in the cache
    gen: Generation  # its prompt, the tokens it picked so far, why it stopped ("" while it runs)
    rules: Rules


def unread(cache, d):  # -> the ids of d's prompt and answer that its sequence in the cache has not read yet
    return (d.gen.prompt_ids + d.gen.ids)[cache.sequence(d.seq).length:]


def advance(model, cache, batch, keep=False):  # batch [Decoding], none stopped -> one forward call, a token each
    """Each sequence one token further: the loop every decoder on a paged cache runs (generate_batch, serving's
    policies, serve_shared_prefix). One packed forward call over what each sequence has not read yet (a prefill:
    its prompt past any cached prefix; a decode: its last token), then each picks its next token and meets the
    stop rules (generate.pick), and one that stopped gives its blocks back (keep=True: they stay held, for a
    caller that counts the blocks in use at the end, then releases them)."""
    logits = forward_rows(model, cache, [(d.seq, unread(cache, d)) for d in batch])  # [len(batch), V]
    for d, row in zip(batch, logits):
        pick(model, d.gen, row, d.rules)
        if d.gen.stop and not keep:
            cache.release(d.seq)


def pool_blocks(lengths, block_size):  # the blocks that hold sequences of these lengths, none shared
    return sum(blocks_for(n, block_size) for n in lengths)


def prompt_list(prompts, who, what="prompts"):  # -> the prompts as a list: texts or id lists, not one prompt
    one = isinstance(prompts, (str, torch.Tensor))  # a text, or one prompt's ids as a tensor
    prompts = [] if one else list(prompts)
    if one or not all(isinstance(p, str) or hasattr(p, "__len__") for p in prompts):
        raise KVLibError(f"{who} takes a list of {what} (texts or id lists), not one prompt: for one prompt's ids, [ids]")
    if not prompts:
        raise KVLibError(f"{who} takes a list of {what} (texts or id lists), at least one")
    return prompts


def generate_batch(model, prompts, max_new_tokens=20, temperature=0.0, top_k=None, top_p=None, seed=None,
                   stop_at_eos=True, block_size=16):
    """Continue every prompt (texts or id lists) together; one Generation each, in order.

    Greedy by default, so each answer is the one `generate` gives its prompt alone. With a
    temperature, sequence i samples with its own generator (seed + i). A sequence that stops
    (max_new_tokens, end-of-text, context full) leaves the batch and gives its blocks back;
    the others go on. gen.step_seconds holds the time of every step the sequence took part in,
    its prefill first."""
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    prompt_ids = [model.check_ids(p).tolist() for p in prompt_list(prompts, "generate_batch")]
    gens = [Generation(prompt_ids=ids) for ids in prompt_ids]
    generators = [torch.Generator().manual_seed(seed + i) if seed is not None else None for i in range(len(gens))]
    lengths = [min(len(ids) + max_new_tokens, model.config.n_ctx) for ids in prompt_ids]
    cache = PagedKVCache(model.config.n_layer, pool_blocks(lengths, block_size), block_size)
    batch = [Decoding(cache.add(), gen, Rules(max_new_tokens, temperature, top_k, top_p, generator, stop_at_eos))
             for gen, generator in zip(gens, generators)]

    def timed(live):  # one call of advance; each live sequence records its time
        model.synchronize()
        t0 = time.perf_counter()
        advance(model, cache, live)
        model.synchronize()
        seconds = time.perf_counter() - t0
        for d in live:
            d.gen.step_seconds.append(seconds)

    for d in batch:  # prompts prefilled one by one
        timed([d])
    while live := [d for d in batch if not d.gen.stop]:
        timed(live)
    for gen in gens:
        gen.text = model.decode(gen.ids)
    return gens
