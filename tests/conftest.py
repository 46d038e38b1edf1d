import pytest
import torch

import kvlib
from kvlib import models

torch.set_num_threads(2)


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
