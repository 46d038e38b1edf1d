"""The step: every sequence kvlib decodes, on a paged cache or alone on its KVCache, moves one forward call
at a time through `step`, as nano-vllm's engine does (schedule -> run -> postprocess), and `steps` is the one
loop that calls it: generate (one sequence, on a contiguous KVCache: generate.Solo), generate_batch,
serving's policies, sharing.serve_shared_prefix and PromptCache's requests iterate it, observing each step's
Record (timing it, streaming it, drawing it) from outside.

A decode step of one sequence multiplies one row by every weight matrix: the time goes into reading
the matrices, and the arithmetic units mostly wait. B sequences decoded together give each matrix B
rows for the same read, so up to the point where arithmetic, not reading, is the limit, B answers
cost about what one did. Each sequence keeps its own tokens and length in a shared paged cache
(paged_cache.py), which keeps users apart inside attention, so prefills and decodes share a call.

- schedule: the running sequences first, oldest first (a decode is one token, a prefill its next
  chunk), then waiting ones join while there are slots, tokens left in the step's budget and blocks
  for their first chunk (vLLM's and nano-vllm's admission: nothing is reserved for the answer). A
  running sequence whose next tokens find no free block preempts the most recently admitted one.
- forward: one `forward_rows` call over every scheduled row, packed.
- postprocess: each sequence's written prompt blocks go into the pool's index (`PagedKVCache.file`);
  one that has read all it was given picks its next token (`sampling.pick`, with its stops); one
  that stopped gives its blocks back.
"""

from collections import deque
from dataclasses import dataclass, field

import torch

from ..errors import KVLibError
from .paged_cache import Sequence
from .sampling import Generation, Rules, pick


@torch.no_grad()
def forward_rows(model, cache, rows):  # rows [(sequence id, [ids])] -> logits [len(rows), V]
    """One forward call over several sequences' new tokens, packed one after another; returns the logits
    of each sequence's last new token (the one that picks its next token)."""
    if not rows:
        raise KVLibError("forward_rows needs at least one row: [(sequence id, [ids]), ...]")
    # every row checked (ids in the vocabulary, a text encoded; within the context) before any sequence takes a slot
    rows = [(seq_id, model.check_ids(seq_ids)) for seq_id, seq_ids in rows]
    for seq_id, seq_ids in rows:
        if not model.fits(cache.sequence(seq_id).length + len(seq_ids)):
            raise KVLibError(f"sequence {seq_id} would hold {cache.sequence(seq_id).length + len(seq_ids)} tokens, "
                             f"past {model.name}'s context of {model.config.n_ctx}: release it and start anew")
    into = cache.schedule([(seq_id, len(seq_ids)) for seq_id, seq_ids in rows])  # what the forward pass appends to
    ids = torch.cat([seq_ids for _, seq_ids in rows])  # [T]
    if len(rows) == 1:  # one sequence (a prefill, or a batch of one): only its last row needs the output head
        return model.family.forward(ids, model.params, model.config, into, last_only=True)
    last = torch.tensor([len(seq_ids) for _, seq_ids in rows], device=model.device).cumsum(0) - 1  # [len(rows)]
    return model.family.forward(ids, model.params, model.config, into)[last]


@dataclass(eq=False)  # one is itself only: two with the same prompt and answer so far are two requests
class Decoding:  # one sequence the step serves: what it reads, how it picks and stops, how its prompt meets the index
    gen: Generation       # its prompt, the tokens it picked so far, why it stopped ("" while it runs)
    rules: Rules
    tenant: str = "default"
    spans: list = None    # prefixes of its prompt read from or filed in the index (None: its full blocks; []: none)
    shared: bool = False  # keys in every tenant's namespace (PromptCache's share_across_tenants)
    min_hit: int = 0      # a cached prefix shorter than this is not read (PromptCache's min_tokens)
    seq: Sequence = None  # its sequence in the cache from its admission (after it ends, what it held and filed)


@dataclass
class Batch:  # what the scheduler keeps between steps: one cache, who waits, who runs
    cache: object  # a PagedKVCache, or generate's Solo (one sequence on a KVCache): what the step asks, each answers
    waiting: deque = field(default_factory=deque)  # [Decoding], first come first served; the preempted go in front
    running: list = field(default_factory=list)    # [Decoding], admitted, oldest first
    max_batch: int = None    # sequences a step runs at most (None: no limit)
    step_tokens: int = None  # tokens a step feeds at most (vLLM's max_num_batched_tokens): a longer prefill goes in
    static: bool = False     # chunks (None: no limit). static: admit only into an empty batch (static batching)


@dataclass
class Record:  # what one step did, for whoever observes it
    rows: list            # [(Decoding, tokens fed)], in the forward call's order
    logits: torch.Tensor  # [len(rows), V]: at each row's last token
    preempted: list       # [Decoding] sent back to wait, their blocks freed, to be recomputed
    finished: list        # [Decoding] that stopped this step, their blocks given back


def unread(d):  # -> the ids of d's prompt and answer that its sequence has not read yet (all, while it waits)
    return (d.gen.prompt_ids + d.gen.ids)[d.seq.length if d.seq else 0:]


def step(model, batch):  # -> Record: one forward call's worth of work for the batch
    rows, preempted = schedule(batch)
    logits = forward_rows(model, batch.cache, [(d.seq.id, unread(d)[:n]) for d, n in rows])  # [len(rows), V]
    return Record(rows, logits, preempted, postprocess(model, batch, rows, logits))


def schedule(batch):  # -> rows [(Decoding, tokens)] of this step, the sequences preempted for them
    cache, rows, preempted = batch.cache, [], []
    left = batch.step_tokens or float("inf")  # tokens this step may still feed
    join = not (batch.static and batch.running)
    queue = list(batch.running)
    while queue:
        d = queue.pop(0)
        n = min(len(unread(d)), left)  # a decode: 1; a prefill: what is left of it, or what the budget allows
        while n and not cache.fits([(q.seq.id, k) for q, k in rows] + [(d.seq.id, n)]):
            # no free block for its next tokens: preempt the most recently admitted (vLLM's recompute preemption,
            # nano-vllm's too): it has made the least progress, so recomputing it costs least, and the oldest
            # requests, first come, are never the ones held back
            victim = queue.pop() if queue else d
            preempt(batch, victim)
            preempted.append(victim)
            if victim is d:
                break
        else:
            if n:
                rows.append((d, n))
                left -= n
    # no one joins in a step that preempted: the blocks just freed are for those it sent back (as vLLM)
    while join and not preempted and batch.waiting and left and len(batch.running) < (batch.max_batch or float("inf")):
        d = batch.waiting[0]
        d.seq = cache.sequence(cache.add(d.gen.prompt_ids, d.tenant, d.spans, d.shared, d.min_hit))
        n = min(len(unread(d)), left)
        # it waits, and everyone behind it: when its first chunk finds no free blocks, or when its next block is
        # one a prompt in this step will file (in this chunk or a later one), so that it reads it then instead of
        # computing it again (as SGLang's in-batch prefix check does; vLLM and nano-vllm compute it twice)
        if not cache.fits([(q.seq.id, k) for q, k in rows] + [(d.seq.id, n)]) or d.seq.plan and any(
                d.seq.plan[0][0] == key for q, _ in rows for key, *_ in q.seq.plan):
            cache.withdraw(d.seq.id)  # admission tried and undone
            d.seq = None
            break
        batch.running.append(batch.waiting.popleft())
        rows.append((d, n))
        left -= n
    return rows, preempted


def preempt(batch, d):  # its blocks freed (those it shares stay with their other holders); it waits in front
    batch.cache.release(d.seq.id)
    d.seq = None  # readmitted, it reads its prompt and answer so far again (from the index, as far as it can)
    batch.running.remove(d)
    batch.waiting.appendleft(d)


def postprocess(model, batch, rows, logits):  # -> the sequences that stopped
    finished = []
    for (d, _), row in zip(rows, logits):
        more = unread(d)  # a prefill chunk with more to come: its logits pick nothing
        batch.cache.file(d.seq.id)  # its prompt's blocks this call wrote go into the pool's index
        if more:
            continue
        pick(model, d.gen, row, d.rules)
        if d.gen.stop:
            batch.cache.release(d.seq.id)
            batch.running.remove(d)
            finished.append(d)
    return finished


def steps(model, batch):  # the one loop: every path on a paged cache runs its steps here, a Record at a time
    try:
        while batch.waiting or batch.running:
            yield step(model, batch)
    finally:  # a run that ends early (an error, a Stop pressed, a caller that leaves) gives every block back
        for d in batch.running:
            batch.cache.release(d.seq.id)
        batch.running.clear()


def prompt_list(prompts, who, what="prompts"):  # -> the prompts as a list: texts or id lists, not one prompt
    one = isinstance(prompts, (str, torch.Tensor))  # a text, or one prompt's ids as a tensor
    prompts = [] if one else list(prompts)
    if one or not all(isinstance(p, str) or hasattr(p, "__len__") for p in prompts):
        raise KVLibError(f"{who} takes a list of {what} (texts or id lists), not one prompt: for one prompt's ids, [ids]")
    if not prompts:
        raise KVLibError(f"{who} takes a list of {what} (texts or id lists), at least one")
    return prompts
