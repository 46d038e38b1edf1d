"""Loading GPT-2-family models: the bundled `tiny`, OpenAI's GPT-2 sizes, a random
GPT-2 small, or a directory saved with `save_pretrained`. All go through one path:
Hugging Face loads the checkpoint, and its weights become the plain tensors that
`gpt2.py` computes with. This is the only module that touches disk or network.
"""

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import torch

from . import gpt2
from .kv_cache import KVCache

TINY_DIR = Path(__file__).parent / "assets"
HUB_IDS = {name: f"openai-community/{name}" for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")}
NAMES = ("tiny", "random-gpt2", *HUB_IDS)
DOWNLOAD_HINT = "python -m kvlib download gpt2"


class KVLibError(ValueError):
    """Bad input or an unavailable model or device; the message says what to do."""


@dataclass(frozen=True)
class Config:
    n_layer: int
    n_head: int
    n_embd: int
    n_ctx: int
    vocab_size: int
    eps: float = 1e-5

    @property
    def head_dim(self):
        return self.n_embd // self.n_head


class Model:
    """A GPT-2 as plain weights, its tokenizer, and the glass-box forward pass."""

    def __init__(self, name, params, config, tokenizer, device):
        self.name, self.params, self.config, self.tokenizer, self.device = name, params, config, tokenizer, device
        self.eos_token_id = tokenizer.eos_token_id

    def __repr__(self):
        c = self.config
        return (f"Model({self.name!r} on {self.device}: {c.n_layer} layers, {c.n_head} heads, "
                f"{c.n_embd} dims, {c.n_ctx} context, {c.vocab_size} vocab)")

    def encode(self, text):  # str -> list[int]
        if not isinstance(text, str):
            raise KVLibError(f"encode takes a string, not {type(text).__name__}")
        return self.tokenizer.encode(text)

    def decode(self, ids):  # list[int] -> str
        ids = [int(i) for i in ids]
        known = len(self.tokenizer)
        # random-gpt2 may pick ids beyond a borrowed tokenizer's vocabulary: show them, don't drop them
        pieces, run = [], []
        for i in ids + [None]:
            if i is not None and i < known:
                run.append(i)
                continue
            if run:
                pieces.append(self.tokenizer.decode(run))
                run = []
            if i is not None:
                pieces.append(f"<{i}>")
        return "".join(pieces)

    def new_cache(self):
        return KVCache(self.config.n_layer)

    def check_ids(self, ids, past_len=0):
        """Validate ids for one forward pass; returns them as a tensor on the model's device."""
        if isinstance(ids, str):
            ids = self.encode(ids)
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if len(ids) == 0:
            raise KVLibError("the prompt is empty: give at least one token of text")
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise KVLibError(f"token ids must be in 0..{self.config.vocab_size - 1} for {self.name}")
        if past_len + len(ids) > self.config.n_ctx:
            raise KVLibError(
                f"{past_len + len(ids)} tokens do not fit in {self.name}'s context of {self.config.n_ctx}"
                f" ({past_len} cached + {len(ids)} new): shorten the prompt or start a new cache")
        return ids.to(self.device)

    @torch.no_grad()
    def forward(self, ids, cache=None, trace=None, last_only=False):  # [T] -> logits [T, V] (or [1, V])
        """Logits for the new tokens; with a cache, they follow the cached ones and the cache grows.

        last_only: only the last position's logits, all that generation needs (as
        transformers' `logits_to_keep=1`): the output head is the largest matmul."""
        past_len = 0 if cache is None else len(cache)
        ids = self.check_ids(ids, past_len)
        return gpt2.gpt2(ids, self.params, self.config.n_head, self.config.eps, past_len, cache, trace, last_only)


def pick_device(device=None):
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(device)
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    missing_gpu = device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count()
    if not available.get(device.type, False) or missing_gpu:
        raise KVLibError(f"device {str(device)!r} is not available on this machine: "
                         f"use device=None (picks CUDA, then MPS, then CPU) or device='cpu'")
    return device


def params_from_state_dict(state_dict, n_layer):
    """Hugging Face's GPT2LMHeadModel weights -> {'wte.weight', 'wpe.weight', 'ln_f.*', 'h': [per layer]}."""
    sd = {k.removeprefix("transformer."): v.detach() for k, v in state_dict.items()}
    params = {k: sd[k] for k in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")}
    params["h"] = [{k.removeprefix(f"h.{i}."): v for k, v in sd.items() if k.startswith(f"h.{i}.")}
                   for i in range(n_layer)]
    return params


def from_hf(name, hf_model, tokenizer, device):
    """Wrap a transformers GPT2LMHeadModel: keep its weights, drop the module."""
    c = hf_model.config
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh") or c.scale_attn_by_inverse_layer_idx \
            or c.reorder_and_upcast_attn or not c.scale_attn_weights:
        raise KVLibError(f"{name} is not a plain GPT-2 (activation or attention variant); kvlib runs GPT-2 only")
    config = Config(c.n_layer, c.n_head, c.n_embd, c.n_positions, c.vocab_size, c.layer_norm_epsilon)
    params = params_from_state_dict(hf_model.to(device).float().state_dict(), c.n_layer)
    assert params["wte.weight"].shape == (config.vocab_size, config.n_embd)
    assert params["h"][0]["attn.c_attn.weight"].shape == (config.n_embd, 3 * config.n_embd)
    return Model(name, params, config, tokenizer, device)


def load_hf(path_or_id, local_only=True):
    from transformers import AutoTokenizer, GPT2LMHeadModel
    from transformers.utils import logging

    logging.disable_progress_bar()  # a bar per load clutters notebooks; downloads keep theirs
    hf = GPT2LMHeadModel.from_pretrained(path_or_id, local_files_only=local_only)
    return hf.eval(), AutoTokenizer.from_pretrained(path_or_id, local_files_only=local_only)


def random_gpt2(seed=0):
    """GPT-2 small's exact shape with random weights: honest speed and memory at the real size."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        hf = GPT2LMHeadModel(GPT2Config()).eval()
    # real GPT-2's tokenizer if it is here, else tiny's (its ids are a subset of the 50257)
    tok_src = HUB_IDS["gpt2"] if in_hf_cache("gpt2") else TINY_DIR
    return hf, AutoTokenizer.from_pretrained(tok_src, local_files_only=True)


def in_hf_cache(name):
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(HUB_IDS[name], "config.json")
    return isinstance(found, str)


def online(host="huggingface.co", timeout=3.0):
    """True if the hub answers within seconds; never wait on a network that is not there."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def download(name="gpt2"):
    """Fetch OpenAI's GPT-2 weights into the Hugging Face cache, with progress bars."""
    if name not in HUB_IDS:
        raise KVLibError(f"unknown model {name!r} to download: choose one of {', '.join(HUB_IDS)}")
    if not online():
        raise KVLibError(f"cannot reach the Hugging Face hub to download {name}: connect to the internet "
                         f"(or copy a saved GPT-2 directory here and load it by path); meanwhile use 'tiny'")
    from huggingface_hub import snapshot_download

    return snapshot_download(HUB_IDS[name], allow_patterns=["*.json", "*.txt", "model.safetensors"])


def default_name():
    """KVLIB_MODEL if set; else gpt2 if it is already here; else the bundled tiny."""
    if os.environ.get("KVLIB_MODEL"):
        return os.environ["KVLIB_MODEL"]
    if in_hf_cache("gpt2"):
        return "gpt2"
    # stdout, not stderr: a notebook shows stderr in red, and this is news, not an error
    print(f"kvlib: using the bundled 'tiny' Shakespeare model; for real GPT-2 run `{DOWNLOAD_HINT}`")
    return "tiny"


def load_model(name=None, device=None):
    """A Model by name ('tiny', 'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl', 'random-gpt2') or directory."""
    name = default_name() if name is None else str(name)
    device = pick_device(device)
    if name == "tiny":
        hf, tok = load_hf(TINY_DIR)
    elif name == "random-gpt2":
        hf, tok = random_gpt2()
    elif name in HUB_IDS:
        if not in_hf_cache(name):
            hint = DOWNLOAD_HINT.replace("gpt2", name)
            raise KVLibError(f"{name}'s weights are not on this machine (and kvlib does not download "
                             f"behind your back): run `{hint}` with internet, or use load_model('tiny')")
        hf, tok = load_hf(HUB_IDS[name])
    elif Path(name).is_dir():
        if not (Path(name) / "config.json").exists():
            raise KVLibError(f"{name} has no config.json: give a directory saved with save_pretrained")
        hf, tok = load_hf(name)
    else:
        raise KVLibError(f"unknown model {name!r}: choose one of {', '.join(NAMES)} or a directory "
                         f"saved with save_pretrained")
    return from_hf(name, hf, tok, device)
