import dataclasses

import torch

import kvlib
from kvlib.model import models
from kvlib.server.sampling import sample

from conftest import hf_greedy  # test_serving.py imports it from here too


def test_on_token_streams_every_token_in_order(tiny):
    seen = []
    gen = kvlib.generate(tiny, "ROMEO.\n", 12, on_token=lambda i, piece: seen.append((i, piece)))
    assert [i for i, _ in seen] == gen.ids
    assert "".join(p for _, p in seen) == gen.text == tiny.decode(gen.ids)
    assert len(gen.step_seconds) == len(gen.ids)


PARROT = "a 鹦鹉 🦜."  # two Chinese characters and an emoji: each takes several of a byte-level BPE's tokens


def answering(model, monkeypatch, text):
    """The model's forward made to pick `text`'s tokens in turn (a real model never says what a test needs)."""
    picks = iter(model.encode(text))

    def forward(ids, params, config, cache=None, trace=None, last_only=False):  # the family's forward pass
        logits = torch.zeros(1, model.config.vocab_size)
        logits[0, next(picks)] = 1.0
        return logits

    monkeypatch.setitem(models.FAMILIES, model.config.arch, dataclasses.replace(model.family, forward=forward))
    return model.encode(text)


def test_on_token_hands_on_a_character_only_once_its_last_token_arrives(tiny, monkeypatch):
    ids = answering(tiny, monkeypatch, PARROT)
    assert "\ufffd" in tiny.decode(ids[:3])  # part of 鹦's bytes: decoded alone, a replacement character
    pieces = []
    gen = kvlib.generate(tiny, "x", len(ids), on_token=lambda i, piece: pieces.append(piece), stop_at_eos=False)
    assert gen.ids == ids and gen.text == PARROT
    assert "".join(pieces) == PARROT and len(pieces) == len(ids)
    assert [p for p in pieces if p] == ["a", " ", "鹦", "鹉", " ", "🦜", "."]


def test_a_stream_stopped_inside_a_character_hands_on_no_replacement_character(tiny, monkeypatch):
    ids = answering(tiny, monkeypatch, PARROT)
    cut = next(k for k in range(1, len(ids)) if tiny.decode(ids[:k]).endswith("\ufffd"))
    pieces = []
    gen = kvlib.generate(tiny, "x", cut, on_token=lambda i, piece: pieces.append(piece), stop_at_eos=False)
    assert gen.text.endswith("\ufffd") and "".join(pieces) == gen.text.rstrip("\ufffd")


def test_sampling_is_reproducible_with_a_seed_and_varies_without(tiny):
    runs = [kvlib.generate(tiny, "JULIET.\n", 20, temperature=1.0, top_k=50, seed=s, stop_at_eos=False).ids
            for s in (7, 7, 8, 9)]
    assert runs[0] == runs[1]  # the same seed, the same answer
    assert len({tuple(r) for r in runs}) == 3  # another seed, another answer: the sampler really draws


def test_greedy_and_top_k_1_and_tiny_top_p_pick_what_transformers_picks(tiny, hf_tiny):
    ids = tiny.encode("To be, or not")
    greedy = hf_greedy(hf_tiny[0], ids, 10, stop_at_eos=False)  # transformers' own: shares no code with kvlib
    assert kvlib.generate(tiny, "To be, or not", 10, stop_at_eos=False).ids == greedy
    assert kvlib.generate(tiny, "To be, or not", 10, temperature=0.8, top_k=1, seed=1, stop_at_eos=False).ids == greedy
    assert kvlib.generate(tiny, "To be, or not", 10, temperature=0.8, top_p=1e-6, seed=1, stop_at_eos=False).ids == greedy


def test_sample_respects_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    picks = {sample(logits, 1.0, None, 0.7, torch.Generator().manual_seed(s))
             for s in range(200)}
    assert picks == {0, 1}


def test_generation_stops_when_the_context_is_full(tiny):
    n_ctx = tiny.config.n_ctx
    gen = kvlib.generate(tiny, [1] * (n_ctx - 3), 50)
    assert len(gen.prompt_ids) + len(gen.ids) == n_ctx
    assert "context full" in gen.stop_reason


def test_greedy_takes_the_first_of_tied_maxima(tiny):
    """As torch.argmax and transformers do: of equal top logits, the lowest id. Every path picks through
    sampling.pick, so a one-step answer from logits made to tie shows what all of them do."""
    from kvlib.server.sampling import Generation, Rules, pick, sample

    logits = torch.zeros(50)
    logits[[7, 3, 41]] = 2.5  # three ties, the lowest id neither first written nor last
    assert sample(logits) == 3
    gen = Generation(prompt_ids=[1, 2])
    assert pick(tiny, gen, logits, Rules(max_new_tokens=4)) == 3 and gen.ids == [3]


def test_without_a_cache_every_step_feeds_the_whole_text(tiny):
    """Counted where the work is done (measure.Fed): with the cache the prompt once, then one token a step;
    without it the whole text so far every step, as a model without memory must. Equal answers alone would not
    tell a loop that forgot to forget."""
    from kvlib.model.measure import Fed

    prompt = tiny.encode("ROMEO.\n")
    cached, uncached = Fed(tiny), Fed(tiny)
    a = kvlib.generate(cached, prompt, 5, stop_at_eos=False)
    b = kvlib.generate(uncached, prompt, 5, use_cache=False, stop_at_eos=False)
    assert a.ids == b.ids
    assert cached.rows == [len(prompt), 1, 1, 1, 1]
    assert uncached.rows == [len(prompt) + i for i in range(5)]
