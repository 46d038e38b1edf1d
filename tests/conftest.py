import os

import pytest
import torch
from hypothesis import settings

import kvlib
from kvlib import models

torch.set_num_threads(2)

# Property tests draw the same examples on every run, so a red CI names a bug, not an unlucky draw
# (CI once drew a run of special tokens on which float32 drift is larger; it is now an @example).
# `HYPOTHESIS_PROFILE=explore make test` draws fresh ones to hunt for new cases.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiny():
    return kvlib.load_model("tiny", device="cpu")


@pytest.fixture(scope="session")
def random_gpt2():
    return kvlib.load_model("random-gpt2", device="cpu")


@pytest.fixture(scope="session")
def small_gpt2_dir(tmp_path_factory):
    """A GPT-2-family checkpoint saved with save_pretrained, as a user's disk holds it."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    out = tmp_path_factory.mktemp("small-gpt2")
    tok = AutoTokenizer.from_pretrained(models.TINY_DIR)
    torch.manual_seed(1)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=48, n_layer=3, n_head=3)).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def small_llama_dir(tmp_path_factory):
    """A small random Llama-family checkpoint with grouped KV heads (4 query heads share 2 K/V heads)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("small-llama")
    tok = AutoTokenizer.from_pretrained(models.TINY_DIR)
    torch.manual_seed(2)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         rope_theta=10000.0, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def small_llama(small_llama_dir):
    return kvlib.load_model(str(small_llama_dir), device="cpu")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct, fetched by `make test` (python -m kvlib download smollm2)."""
    return kvlib.load_model("smollm2", device="cpu")
