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

import torch

from .errors import KVLibError
from .generate import Generation, check_sampling, sample
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
    seqs = [cache.add() for _ in gens]

    def step(live, rows):  # one forward call; each live sequence takes its next token
        model.synchronize()
        t0 = time.perf_counter()
        logits = forward_rows(model, cache, rows)  # [len(live), V]
        tokens = [sample(row, temperature, top_k, top_p, generators[i]) for i, row in zip(live, logits)]
        model.synchronize()
        seconds = time.perf_counter() - t0
        for i, token in zip(live, tokens):
            gen = gens[i]
            gen.ids.append(token)
            gen.step_seconds.append(seconds)
            if len(gen.ids) == max_new_tokens:
                gen.stop_reason = f"max_new_tokens ({max_new_tokens}) reached"
            elif stop_at_eos and token == model.eos_token_id:
                gen.stop_reason = "end-of-text token"
            elif len(gen.prompt_ids) + len(gen.ids) >= model.config.n_ctx:
                gen.stop_reason = f"context full: {model.name} holds {model.config.n_ctx} tokens"
            if gen.stop_reason:
                cache.release(seqs[i])

    for i, ids in enumerate(prompt_ids):
        step([i], [(seqs[i], ids)])
    while live := [i for i, gen in enumerate(gens) if not gen.stop_reason]:
        step(live, [(seqs[i], gens[i].ids[-1:]) for i in live])
    for gen in gens:
        gen.text = model.decode(gen.ids)
    return gens
