"""Batched generation and the paged cache it runs on: every answer is the one transformers gives its prompt
alone, every cached logit equals transformers' uncached pass, shared blocks are copied before anyone writes
into them, and every block taken is given back. The expectations come from transformers on the same weights,
never from kvlib's own generate or forward: those run the same cached calls of the forward pass, so a bug
there (a RoPE position offset) would be on both sides and pass."""

import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest
import torch

from kvlib import KVLibError, PromptCache, generate, generate_batch, set_language
from kvlib.server.batching import Batch, Decoding, forward_rows, steps
from kvlib.server.sampling import Generation, Rules
from kvlib.server.sampling import sample
from kvlib.server.paged_cache import PagedKVCache

from bounds import assert_logits_close, hf_logits
from conftest import hf_greedy, hf_model

PROMPTS = ["Once upon a time", "The", "A very long prompt about a king who went to the sea and saw that the water",
           "Hi", "In the beginning there was nothing but", "x y z", "Tom and Sue went", "The sun is hot and the"]


def test_greedy_batch_answers_what_transformers_answers_each_prompt_alone_tiny(tiny, hf_tiny):
    hf, tok = hf_tiny
    assert len({len(tiny.encode(p)) for p in PROMPTS}) >= 6  # prompts of different lengths
    batch = generate_batch(tiny, PROMPTS, max_new_tokens=16)  # each stops at the end-of-text token, as HF's does
    for prompt, gen in zip(PROMPTS, batch):
        assert gen.ids == hf_greedy(hf, tok(prompt).input_ids, 16), prompt
        assert gen.text == tok.decode(gen.ids)
        ended = gen.ids[-1] == hf.generation_config.eos_token_id
        assert gen.stop == ("eos" if ended else "max_new_tokens")
    assert len({gen.text for gen in batch}) == len(PROMPTS)  # eight different answers, not one repeated


@pytest.mark.parametrize("name", ["small_llama", "smollm2"])  # grouped K/V heads and RoPE
def test_greedy_batch_answers_what_transformers_answers_each_prompt_alone_llama(name, request):
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    prompts = [model.encode(p) for p in PROMPTS]
    # no stop at the end-of-text token: the small Llama's config and tokenizer name different ones
    for prompt, gen in zip(prompts, generate_batch(model, prompts, max_new_tokens=12, stop_at_eos=False)):
        assert gen.ids == hf_greedy(hf, prompt, 12, stop_at_eos=False), model.decode(prompt)
        assert gen.stop == "max_new_tokens"


@torch.no_grad()
def hf_sampled(hf, ids, n, temperature, seed):
    """n tokens drawn from transformers' logits (an uncached pass each) by kvlib's sampler with a generator
    seeded as generate seeds it: the forward pass is transformers', the draw is the one being tested."""
    generator, ids = torch.Generator().manual_seed(seed), list(ids)
    for _ in range(n):
        ids.append(sample(hf_logits(hf, ids)[-1], temperature, generator=generator))
    return ids[-n:]


def test_sampled_batch_draws_with_seed_plus_i_from_transformers_logits(tiny, hf_tiny):  # sequence i: seed + i
    prompts = [tiny.encode(p) for p in PROMPTS[:4]]
    batch = generate_batch(tiny, prompts, max_new_tokens=10, temperature=1.0, seed=7, stop_at_eos=False)
    for i, (prompt, gen) in enumerate(zip(prompts, batch)):
        assert gen.ids == hf_sampled(hf_tiny[0], prompt, 10, 1.0, seed=7 + i), PROMPTS[i]
    greedy = generate_batch(tiny, prompts, max_new_tokens=10, stop_at_eos=False)
    assert [g.ids for g in batch] != [g.ids for g in greedy]  # the sampling really sampled


def test_a_sequence_that_stops_early_leaves_and_the_others_go_on(tiny):
    eos = tiny.eos_token_id
    gens = generate_batch(tiny, ["The king", "A"], max_new_tokens=6)
    assert all(len(g.ids) == 6 or g.ids[-1] == eos for g in gens)
    short = generate_batch(tiny, ["The king", "A"], max_new_tokens=2)
    assert [len(g.ids) for g in short] == [2, 2] and short[0].stop == "max_new_tokens"
    assert len(gens[0].step_seconds) == len(gens[0].ids)  # its prefill, then one step per token


def test_a_batch_stops_each_sequence_where_and_why_generate_stops_it_alone(tiny, monkeypatch):
    """The stop rules are sampling.pick's on every path: max_new_tokens; the end-of-text token (tiny's answers here
    never reach its own, so the third token of one answer stands in for it); a context that is full."""
    prompts = [tiny.encode("Once upon a time"), tiny.encode("Hi"), [1] * (tiny.config.n_ctx - 3)]
    monkeypatch.setattr(tiny, "eos_token_id", generate(tiny, prompts[1], 3).ids[-1])
    alone = [generate(tiny, p, 8) for p in prompts]
    assert [g.stop for g in alone] == ["max_new_tokens", "eos", "context"]
    assert [(g.ids, g.stop, g.stop_reason) for g in generate_batch(tiny, prompts, 8)] == [
        (g.ids, g.stop, g.stop_reason) for g in alone]


@pytest.mark.parametrize("name", ["tiny", "small_llama", "smollm2"])
def test_cached_logits_equal_transformers_uncached_pass(name, request):
    """Eight sequences in one pool: each decode row, and a prefill packed beside decode rows, gives the
    logits transformers gives in one pass over that sequence's whole text, with no cache at all."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    prompts = [model.encode(p) for p in PROMPTS]
    cache = PagedKVCache(model.config.n_layer, n_blocks=64, block_size=4)
    seqs = [cache.add() for _ in prompts]
    texts = [list(p) for p in prompts]
    for seq, ids in zip(seqs[:7], texts):
        forward_rows(model, cache, [(seq, ids)])
    for step in range(4):  # decode rows of seven sequences; at step 1 the eighth prompt is prefilled with them
        rows = [(seq, [100 + 7 * step + i]) for i, seq in enumerate(seqs[:7])]
        if step == 1:
            rows.insert(3, (seqs[7], texts[7]))
        for seq, ids in rows:
            if not (step == 1 and seq == seqs[7]):
                texts[seq].extend(ids)
        logits = forward_rows(model, cache, rows)  # [len(rows), V]
        for (seq, _), row in zip(rows, logits):
            assert_logits_close(row, hf_logits(hf, texts[seq])[-1], model)
    assert [cache.sequences[s].length for s in seqs] == [len(t) for t in texts]


def test_a_shared_prefix_is_copied_before_it_is_written(tiny, hf_tiny):
    """Two users share a 6-token system prompt (blocks of 4: one full block, one half full). Each writes
    its own tokens after it: the half-full block is copied first, so the owner's keys never change."""
    system = tiny.encode("The king of the sea said")[:6]
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=16, block_size=4)
    owner = cache.add()
    forward_rows(tiny, cache, [(owner, system)])
    before = cache.keys(0, owner).clone()
    a, b = cache.add(prefix_of=owner), cache.add(prefix_of=owner)
    assert cache.pool.in_use == 2 and cache.pool.refs[:2] == [3, 3]  # two blocks, three holders each
    rows = [(a, tiny.encode(" hello")), (b, tiny.encode(" to the moon and back"))]
    logits = forward_rows(tiny, cache, rows)
    for (seq, ids), row in zip(rows, logits):
        assert_logits_close(row, hf_logits(hf_tiny[0], system + ids)[-1], tiny)
    assert torch.equal(cache.keys(0, owner), before)
    assert cache.sequences[a].blocks[0] == cache.sequences[b].blocks[0] == cache.sequences[owner].blocks[0]  # full: shared
    assert len({cache.sequences[s].blocks[1] for s in (owner, a, b)}) == 3  # half full: each has its own copy
    for seq in (owner, a, b):
        cache.release(seq)
    assert cache.pool.in_use == 0 and cache.pool.allocated == cache.pool.freed


def test_blocks_are_given_back(tiny):
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=8, block_size=4)
    seqs = [cache.add() for _ in range(3)]
    forward_rows(tiny, cache, [(seqs[0], list(range(1, 10)))])  # 9 tokens: 3 blocks
    forward_rows(tiny, cache, [(seqs[1], [5, 6])])
    assert cache.pool.in_use == 4
    cache.release(seqs[0])
    assert cache.pool.free[0] == 0  # its blocks are free again, lowest first
    forward_rows(tiny, cache, [(seqs[2], [7] * 12)])  # takes them back
    assert sorted(cache.sequences[seqs[2]].blocks) == [0, 1, 2]
    for seq in seqs[1:]:
        cache.release(seq)
    assert cache.pool.allocated == cache.pool.freed == 7 and cache.pool.in_use == 0


def test_clear_errors(tiny):
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=1, block_size=4)
    seq = cache.add()
    with pytest.raises(KVLibError, match="scheduled"):
        tiny.family.forward(torch.tensor([1, 2]), tiny.params, tiny.config, cache)
    with pytest.raises(KVLibError, match="at most once"):
        cache.schedule([(seq, 1), (seq, 1)])
    with pytest.raises(KVLibError, match="holds nothing yet"):
        cache.keys(0, seq)
    for one_sequence in (lambda: tiny.forward([1], cache=cache), lambda: generate(tiny, "To be", 2, cache=cache)):
        with pytest.raises(KVLibError, match="not a PagedKVCache"):
            one_sequence()
    with pytest.raises(KVLibError, match="needs 2 more blocks but 1 of the pool's 1 are free"):
        forward_rows(tiny, cache, [(seq, [1, 2, 3, 4, 5])])
    with pytest.raises(KVLibError, match="at least one row"):
        forward_rows(tiny, cache, [])
    for unknown in (lambda: cache.add(prefix_of=99), lambda: cache.release(99)):
        with pytest.raises(KVLibError, match="no sequence 99"):
            unknown()
    with pytest.raises(KVLibError, match="context"):
        big = PagedKVCache(tiny.config.n_layer, 99, 16)
        forward_rows(tiny, big, [(big.add(), [1] * (tiny.config.n_ctx + 1))])
    for not_a_list in ("one prompt, not a list", [5, 6, 7], torch.tensor([5, 6, 7])):  # one prompt's ids, not three
        with pytest.raises(KVLibError, match="list of prompts"):
            generate_batch(tiny, not_a_list)
    with pytest.raises(KVLibError, match="empty"):
        generate_batch(tiny, ["fine", ""])


def test_a_refused_call_changes_nothing(tiny, hf_tiny):
    """A full pool or a bad id refuses the whole call before any sequence takes a slot: afterwards the
    sequences decode on as if it had never been made."""
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=3, block_size=4)
    a, b = cache.add(), cache.add()
    forward_rows(tiny, cache, [(a, [1, 2, 3, 4])])  # one full block
    forward_rows(tiny, cache, [(b, [5, 6, 7])])     # one block, a slot left
    held = lambda: ({s: (q.length, list(q.blocks)) for s, q in cache.sequences.items()}, list(cache.pool.refs))
    before = held()
    with pytest.raises(KVLibError, match="needs 2 more blocks but 1 of the pool's 3 are free"):
        forward_rows(tiny, cache, [(a, [8]), (b, [9, 10])])  # a new block each; one is free
    for bad in (tiny.config.vocab_size, -1):
        with pytest.raises(KVLibError, match="token ids must be in"):
            forward_rows(tiny, cache, [(a, [8]), (b, [bad])])
    assert held() == before
    logits = forward_rows(tiny, cache, [(a, [8]), (b, [9])])
    for row, ids in enumerate(([1, 2, 3, 4, 8], [5, 6, 7, 9])):
        assert_logits_close(logits[row], hf_logits(hf_tiny[0], ids)[-1], tiny)
    with pytest.raises(KVLibError, match="block_size .* must be a whole number"):
        PagedKVCache(tiny.config.n_layer, 3, block_size=2.5)
    with pytest.raises(KVLibError, match="n_blocks must be a whole number, at least 1, not 2.5"):
        PagedKVCache(tiny.config.n_layer, 2.5)
    cache = PagedKVCache(tiny.config.n_layer, 4)  # a text row is encoded, and counted in tokens, not characters
    text = "To be, or not to be, that is the question"
    forward_rows(tiny, cache, [(cache.add(), text)])
    assert cache.sequences[0].length == len(tiny.encode(text)) < len(text)


def test_two_holders_of_a_shared_part_full_block_in_one_call_take_one_copy(tiny, hf_tiny):
    """The first copies the block it shares and writes into the copy; the second is then its only holder and
    writes in place. So the call needs one free block, not two."""
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=3, block_size=4)
    a = cache.add()
    forward_rows(tiny, cache, [(a, [1, 2, 3, 4, 5, 6])])  # a full block and a half-full one
    b = cache.add(prefix_of=a)
    assert cache.pool.refs == [2, 2, 0]
    logits = forward_rows(tiny, cache, [(a, [7]), (b, [8])])
    assert cache.pool.refs == [2, 1, 1] and cache.pool.in_use == 3
    for row, ids in enumerate(([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 8])):
        assert_logits_close(logits[row], hf_logits(hf_tiny[0], ids)[-1], tiny)


@pytest.mark.parametrize("name", ["tiny", "small_llama"])
def test_each_row_attends_to_its_own_sequence_only(name, request, monkeypatch):
    """Beside an idle 40-token sequence, three sequences of 9 tokens (one batch for the kernel), one of 5 and one
    fed 3 more tokens at once: the keys handed to attention are each scheduled sequence's own, no slot of another
    (the idle one's included), and every row's logits are transformers' uncached ones."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    cache = PagedKVCache(model.config.n_layer, n_blocks=32, block_size=4)
    forward_rows(model, cache, [(cache.add(), list(range(50, 90)))])  # idle from now on
    texts = {cache.add(): list(range(10 + i, 19 + i)) for i in range(3)}
    texts[cache.add()] = [7, 8, 9, 10, 11]
    texts[cache.add()] = [20, 21, 22, 23, 24, 25]
    for seq, ids in texts.items():
        forward_rows(model, cache, [(seq, ids)])
    rows = [(seq, [100 + seq] if seq != 5 else [30, 31, 32]) for seq in texts]
    for seq, ids in rows:
        texts[seq] += ids
    handed, kernel = [], torch.nn.functional.scaled_dot_product_attention

    def counting(q, k, v, **kw):  # q [b, nh, n, hs], k [b, nkv, L, hs]: b sequences, n rows each, L keys each
        handed.append((q.shape[0], q.shape[2], k.shape[2]))
        return kernel(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    logits = forward_rows(model, cache, rows)
    monkeypatch.undo()
    per_layer = sorted(handed[:len(handed) // model.config.n_layer])
    assert per_layer == [(1, 1, 6), (1, 3, 9), (3, 1, 10)]  # (sequences, rows each, keys each): their own lengths
    assert sorted(handed) == sorted(per_layer * model.config.n_layer)
    for (seq, _), row in zip(rows, logits):
        assert_logits_close(row, hf_logits(hf, texts[seq])[-1], model)


@pytest.mark.slow
def test_the_batching_and_serving_tests_pass_unchanged_in_chinese():
    """Stops are codes and words are only for people: this file's tests and test_serving.py's, run again with kvlib
    speaking Chinese (conftest's --kvlib-language), pass as they are. Were a stop compared as its words anywhere in
    the step, serving or these tests, a request would never stop, or an assertion would read Chinese."""
    root = Path(__file__).parent
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--kvlib-language", "zh",
                          "-k", "not pass_unchanged_in_chinese", str(root / "test_batching.py"),
                          str(root / "test_serving.py")], cwd=root.parent, capture_output=True, text=True)
    assert out.returncode == 0 and " passed" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]


def test_in_chinese_a_finished_request_gives_its_blocks_back(tiny):
    """Under set_language("zh"), checked at every step: a request that stopped has left the cache, the pool holds
    exactly the running requests' blocks, and at the end every block taken is free again. Its stop is the code
    "max_new_tokens"; only stop_reason, its words, are Chinese."""
    set_language("zh")
    try:
        cache = PagedKVCache(tiny.config.n_layer, n_blocks=12, block_size=4)
        batch = Batch(cache)
        batch.waiting.extend(Decoding(Generation(tiny.encode(p)), Rules(n, stop_at_eos=False), spans=[])
                             for p, n in zip(PROMPTS[:4], (2, 6, 3, 9)))
        finished = []
        for record in steps(tiny, batch):
            finished += record.finished
            for d in record.finished:
                assert d.seq.id not in cache.sequences and d.gen.stop == "max_new_tokens"
            held = {b for d in batch.running for b in cache.sequence(d.seq.id).blocks}
            assert cache.pool.in_use == len(held)
        assert len(finished) == 4 and cache.pool.in_use == 0 and cache.pool.allocated == cache.pool.freed
        assert finished[0].gen.stop_reason == "已写满 max_new_tokens（2 个）"
    finally:
        set_language("en")


def test_an_admission_tried_and_undone_logs_no_hit(tiny):
    """A waiting request whose first chunk finds no free blocks is added, found not to fit and sent back, step after
    step, while another runs. Only its real admission reads its cached prefix: the pool's log holds as many hits of
    its tenant as blocks it started with, not one more per step it waited."""
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=6, block_size=4)
    prompt = tiny.encode(PROMPTS[2])[:13]
    first = Batch(cache, deque([Decoding(Generation(prompt), Rules(1), "w")]))
    list(steps(tiny, first))  # its 3 full blocks before the last token are filed, then kept unheld
    assert cache.pool.cached == 3
    running = Decoding(Generation(tiny.encode(PROMPTS[0])[:8]), Rules(10, stop_at_eos=False), "r")
    waiting = Decoding(Generation(prompt + [5, 6, 7, 8]), Rules(2, stop_at_eos=False), "w")
    batch, tried = Batch(cache, deque([running, waiting])), 0
    for record in steps(tiny, batch):
        tried += waiting.seq is None  # still waiting after this step: it was tried and did not fit
    hits = [e for e in cache.pool.events if e.kind == "hit"]
    assert tried >= 2 and len(hits) == waiting.seq.reused // 4 < 3  # R's growth evicted some of the prefix


def test_a_block_filed_under_another_sequences_copy_of_its_prefix_holds_that_copy(tiny):
    """X and Y compute the same first block in one call; X files it, and Y files its own second block under X's
    copy, which Y then holds as long as it lives: a held block never continues an unheld one, so every cached block
    can be evicted (leaves first) and counts as room. When X ends, a call needing every free and cached block runs,
    all or nothing, and one needing one more is refused, unchanged; when Y ends, X's copy is let go after Y's own."""
    cache = PagedKVCache(tiny.config.n_layer, n_blocks=8, block_size=4)
    p, q = list(range(10, 19)), list(range(10, 14)) + list(range(40, 45))  # 9 tokens each, the first 4 alike
    x, y = cache.add(p), cache.add(q)
    forward_rows(tiny, cache, [(x, p), (y, q)])  # 3 blocks each: 2 free
    cache.file(x)
    cache.file(y)
    first = cache.sequence(x).blocks[0]
    assert cache.pool.entries[cache.sequence(y).blocks[1]].parent == first and cache.sequence(y).pins == [first]
    cache.release(x)
    assert cache.pool.refs[first] == 1 and cache.pool.cached == 1 and cache.pool.available == 3 + 1
    z = cache.add()
    with pytest.raises(KVLibError, match="needs 5 more blocks but 4"):
        forward_rows(tiny, cache, [(z, list(range(1, 18)))])
    assert cache.sequence(z).blocks == [] and cache.pool.cached == 1  # refused before any slot was taken
    forward_rows(tiny, cache, [(z, list(range(1, 17)))])  # 4 blocks: the 3 free and the cached one, evicted
    assert cache.pool.in_use == 4 + 4 and cache.pool.cached == 0
    cache.release(y)
    assert cache.pool.refs[first] == 0 and list(cache.pool.lru)[-1] == first  # the parent, most recently used


def test_every_path_picks_every_token_in_the_one_step(tiny, monkeypatch):
    """generate (with its cache and without), generate_batch, serving (static, continuous), a prompt cache's
    answer and a shared system prompt's users: each token of each answer is picked in a postprocess of
    batching.step, called by batching.steps. Counted by wrapping step; a path with a loop of its own picks
    tokens no step's Record holds, and the count falls short."""
    from kvlib.lessons.sharing import serve_shared_prefix
    from kvlib.server import batching, serving

    picked, step = [], batching.step

    def counting(model, batch):
        before = {d: len(d.gen.ids) for d in [*batch.running, *batch.waiting]}
        record = step(model, batch)
        picked.append(sum(len(d.gen.ids) - before[d] for d, _ in record.rows))  # tokens this step picked
        return record
    monkeypatch.setattr(batching, "step", counting)
    prompt = "ROMEO.\nBut soft, what light"

    def tokens(run):  # -> (tokens the path answered, tokens picked in steps while it ran)
        picked.clear()
        return run(), sum(picked)
    for answered, in_steps in [
        tokens(lambda: len(generate(tiny, prompt, 6, stop_at_eos=False).ids)),
        tokens(lambda: len(generate(tiny, prompt, 6, use_cache=False, stop_at_eos=False).ids)),
        tokens(lambda: sum(len(g.ids) for g in generate_batch(tiny, [prompt, "The"], 5, stop_at_eos=False))),
        *[tokens(lambda policy=policy: sum(len(s.ids) for s in serving.serve(
            tiny, [serving.Request(serving.label(i), tiny.encode(p), 4) for i, p in enumerate([prompt, "The", "Hi"])],
            policy, max_batch=2).served)) for policy in ("static", "continuous")],
        tokens(lambda: len(PromptCache(tiny, block_size=8).answer(prompt, 5).ids)),
        tokens(lambda: sum(map(len, serve_shared_prefix(tiny, prompt, [" Juliet", " Romeo"], 3).answers))),
    ]:
        assert answered == in_steps > 0
