"""A shared system prompt held once: N users whose prompts start alike, served together on one paged cache,
the blocks in use measured against a formula (notebook 8).

A shared system prompt of s tokens, prefilled once and held by N users (`add(prefix_of=...)`), user i
holding h_i tokens in all, in blocks of b: sum_i ceil(h_i / b) blocks without sharing; with it
ceil(s / b) + sum_i (ceil(h_i / b) - floor(s / b)): the system prompt keeps its blocks, its full ones are
read by every user, and a partly filled last one is copied by each user before writing (copy-on-write).
"""

from dataclasses import dataclass, field

from ..errors import KVLibError, check_count
from ..server.batching import Batch, Decoding, forward_rows, prompt_list, steps
from ..server.sampling import Generation, Rules
from ..server.paged_cache import PagedKVCache, blocks_for
from ..server.serving import check_fits


def shared_blocks(system_tokens, held, block_size, share=True):
    """Blocks in use when users hold `held` tokens each, all starting with the same system prompt of
    system_tokens: the module's formula (with sharing, the system prompt's own sequence is kept)."""
    check_count(block_size, "block_size (tokens per block)")
    own = sum(blocks_for(h, block_size) for h in held)
    if not share:
        return own
    return blocks_for(system_tokens, block_size) + own - len(held) * (system_tokens // block_size)


@dataclass
class SharedPrefix:
    share: bool
    block_size: int
    bytes_per_block: int        # K and V of block_size tokens in every layer
    system_tokens: int
    user_tokens: list           # each user's own tokens after the system prompt
    answers: list               # each user's answer ids
    blocks: dict = field(default_factory=dict)  # blocks in use, measured: "prompts" once every prompt is in,
                                                # "end" once every answer is made (before anyone leaves)
    blocks_allocated: int = 0
    blocks_freed: int = 0       # after everyone, the system prompt too, left

    def held(self, stage):  # tokens each user holds then (the last answer token is never fed)
        extra = 0 if stage == "prompts" else len(self.answers[0]) - 1
        return [self.system_tokens + u + extra for u in self.user_tokens]

    def formula(self, stage):  # blocks in use then, by the module's formula
        return shared_blocks(self.system_tokens, self.held(stage), self.block_size, self.share)

    def nbytes(self, stage):  # bytes of K and V the blocks in use then hold room for
        return self.blocks[stage] * self.bytes_per_block


def serve_shared_prefix(model, system, users, max_new_tokens=8, block_size=16, share=True):
    """N users, each prompt `system` + their own text (texts or id lists), answered greedily together on one
    paged cache; -> SharedPrefix with the blocks in use measured. share=True prefills the system prompt once
    and starts every user from its blocks; share=False prefills each whole prompt on its own."""
    check_count(block_size, "block_size (tokens per block)")
    system_ids = model.check_ids(system).tolist()
    user_ids = [model.check_ids(u).tolist() for u in prompt_list(users, "serve_shared_prefix", "users")]
    if max_new_tokens < 1:
        raise KVLibError("give at least one user (each with at least one token of their own) and max_new_tokens >= 1")
    for u in user_ids:  # each answers exactly max_new_tokens, as serve's requests do
        check_fits(model, len(system_ids) + len(u), max_new_tokens, "", ": shorten the prompts or the answers")
    out = SharedPrefix(share, block_size, 0,  # bytes_per_block: read off the pool once it holds K and V, below
                       len(system_ids), [len(u) for u in user_ids], [[] for _ in user_ids])
    n_blocks = shared_blocks(len(system_ids), [len(system_ids) + len(u) + max_new_tokens for u in user_ids],
                             block_size, share=False) + 1  # room for everyone unshared, and the system prompt
    batch = Batch(PagedKVCache(model.config.n_layer, n_blocks, block_size))
    if share:
        root = batch.cache.add()
        forward_rows(model, batch.cache, [(root, system_ids)])  # the system prompt, once; its logits are not needed
    # every user admitted at once, holding the system prompt's blocks (share) or nothing: the step feeds the rest
    for u, answer in zip(user_ids, out.answers):
        seq = batch.cache.sequence(batch.cache.add(prefix_of=root) if share else batch.cache.add())
        # one token more than is answered: the blocks are counted once every answer is max_new_tokens long, before
        # anyone leaves; leaving the loop then gives them back
        batch.running.append(Decoding(Generation(system_ids + u, answer), Rules(max_new_tokens + 1, stop_at_eos=False),
                                      seq=seq))
    loop = steps(model, batch)
    for _ in loop:  # every user runs every step: all answers are as long
        out.blocks.setdefault("prompts", batch.cache.pool.in_use)  # after the first, the prefills: every prompt in
        if len(out.answers[0]) == max_new_tokens:
            out.blocks["end"] = batch.cache.pool.in_use
            loop.close()
    if share:
        batch.cache.release(root)
    out.blocks_allocated, out.blocks_freed = batch.cache.pool.allocated, batch.cache.pool.freed
    out.bytes_per_block = batch.cache.bytes_per_block
    return out
