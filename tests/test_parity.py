"""kvlib's glass-box forward pass against transformers' GPT2LMHeadModel (eager attention)."""

import pytest
import torch
from transformers import GPT2LMHeadModel

import kvlib
from kvlib import models

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids]), use_cache=False).logits[0]


def check(model, hf, ids, bound=1e-4):
    """Both attention paths against transformers: torch's fused kernel (no trace) and the one
    written out (what a trace records)."""
    theirs = hf_logits(hf, ids)
    for ours in (model.forward(ids), model.forward(ids, trace=kvlib.Trace())):
        assert ours.shape == (len(ids), model.config.vocab_size)
        assert (ours - theirs).abs().max() < bound
    return ours, theirs


def test_tiny_matches_transformers(tiny):
    hf = GPT2LMHeadModel.from_pretrained(models.TINY_DIR, attn_implementation="eager").eval()
    check(tiny, hf, tiny.encode(TEXT * 8)[: tiny.config.n_ctx])


def test_random_gpt2_matches_transformers(random_gpt2):
    hf, _ = models.random_gpt2()
    hf.config._attn_implementation = "eager"
    assert random_gpt2.config == kvlib.Config(12, 12, 768, 1024, 50257)
    check(random_gpt2, hf, torch.randint(0, 50257, (300,), generator=torch.Generator().manual_seed(0)).tolist())


def test_directory_model_matches_transformers(small_gpt2_dir):
    model = kvlib.load_model(str(small_gpt2_dir), device="cpu")
    hf = GPT2LMHeadModel.from_pretrained(small_gpt2_dir, attn_implementation="eager").eval()
    check(model, hf, model.encode(TEXT)[:64])


@pytest.mark.parametrize("text", ["ROMEO.\nBut soft, what light", "Hello, world! 12345", "a"])
def test_round_trip_text(tiny, text):
    assert tiny.decode(tiny.encode(text)) == text
