"""kvlib's glass-box forward pass against transformers' GPT2LMHeadModel (eager attention), and the one
logit tolerance (bounds.py) against transformers' own float32 drift and the bugs it must still catch."""

import pytest
import torch
from transformers import GPT2LMHeadModel

import kvlib

from bounds import assert_logits_close, hf_cached_vs_uncached, hf_logits, logit_bound
from conftest import hf_model

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"


def check(model, hf, ids):
    """Both attention paths against transformers: torch's fused kernel (no trace) and the one
    written out (what a trace records)."""
    theirs = hf_logits(hf, ids)
    for ours in (model.forward(ids), model.forward(ids, trace=kvlib.Trace())):
        assert ours.shape == (len(ids), model.config.vocab_size)
        assert_logits_close(ours, theirs, model)
    return ours, theirs


def test_tiny_matches_transformers(tiny, hf_tiny):
    check(tiny, hf_tiny[0], tiny.encode(TEXT * 8)[: tiny.config.n_ctx])


def test_random_gpt2_matches_transformers(random_gpt2, hf_random_gpt2):
    assert random_gpt2.config == kvlib.Config(12, 12, 768, 1024, 50257)
    check(random_gpt2, hf_random_gpt2, torch.randint(0, 50257, (300,), generator=torch.Generator().manual_seed(0)).tolist())


def test_directory_model_matches_transformers(small_gpt2_dir):
    model = kvlib.load_model(str(small_gpt2_dir), device="cpu")
    hf = GPT2LMHeadModel.from_pretrained(small_gpt2_dir, attn_implementation="eager").eval()
    check(model, hf, model.encode(TEXT)[:64])


@pytest.mark.parametrize("text", ["ROMEO.\nBut soft, what light", "Hello, world! 12345", "a"])
def test_round_trip_text(tiny, text):
    assert tiny.decode(tiny.encode(text)) == text


@torch.no_grad()
def bug_changes(hf, ids, split):
    """How far two cache bugs move transformers' logits: the tokens after ids[:split] fed at positions one
    too far (a RoPE offset on cached calls, or GPT-2's position table read a row on), and the middle token's
    K and V left out of what the last token attends to (a dropped cache row)."""
    plain = hf_logits(hf, ids)
    prefix = hf(torch.tensor([ids[:split]]), use_cache=True)
    shifted = hf(torch.tensor([ids[split:]]), cache=prefix.cache,
                 position_ids=torch.arange(split + 1, len(ids) + 1)[None]).logits[0]
    mask = torch.ones(1, len(ids), dtype=torch.long)
    mask[0, len(ids) // 2] = 0
    dropped = hf(torch.tensor([ids]), attention_mask=mask).logits[0, -1]
    return (shifted - plain[split:]).abs().max().item(), (dropped - plain[-1]).abs().max().item()


@pytest.mark.parametrize("name", ["tiny", "small_llama", "random_gpt2", "smollm2"])
def test_the_bound_covers_transformers_own_drift_and_is_tight_enough_to_catch_a_bug(name, request):
    """On text (a prefill then steps, and a long prefill then 8 steps), and on SmolLM2 the run of special
    tokens that drifted the most of those tried (bounds.py), the bound sits at least 4x from both sides:
    transformers' own cached and uncached logits differ by at most a quarter of it, and each bug moves
    them by at least 4 bounds (the least, 7, on the small random Llama, whose logits are small and whose
    near-uniform attention barely sees positions)."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    text = model.encode(TEXT * 20)[: min(256, model.config.n_ctx - 1)]  # room for the position one too far
    cases = [(text[:24], 1), (text, len(text) - 8)] + ([(list(range(17)), 1)] if name == "smollm2" else [])
    for ids, split in cases:
        cached, plain = hf_cached_vs_uncached(hf, ids, split)
        drift, bound = (cached - plain).abs().max().item(), logit_bound(model, plain)
        shifted, dropped = bug_changes(hf, ids, split)
        numbers = f"{len(ids)} tokens: drift {drift:.2g}, bound {bound:.2g}, offset {shifted:.2g}, dropped row {dropped:.2g}"
        assert 4 * drift <= bound, numbers
        assert 4 * bound <= min(shifted, dropped), numbers
