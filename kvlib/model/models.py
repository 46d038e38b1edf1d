"""Loading models: the bundled `tiny`, OpenAI's GPT-2 sizes, a random GPT-2 small,
SmolLM2-135M (a Llama-family model), or a directory saved with `save_pretrained`.
All go through one path: transformers loads the checkpoint, and its weights become
the plain tensors that `gpt2.py` or `llama.py` computes with. This module reads
from disk; `download.py` is the only one that uses the network.
"""

import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from ..errors import KVLibError
from ..i18n import t
from . import gpt2, llama, weights_file
from .kv_cache import KVCache, one_sequence

ASSETS = Path(__file__).parents[1] / "assets"  # kvlib/assets: the bundled model and tokenizers
TINY_DIR = ASSETS  # the bundled model's config, weights and tokenizer
GPT2_TOKENIZER_DIR = ASSETS / "gpt2-tokenizer"  # OpenAI's encoder.json and vocab.bpe
HUB_IDS = {**{name: f"openai-community/{name}" for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")},
           "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct"}
NAMES = ("tiny", "random-gpt2", *HUB_IDS)


def download_hint(name, *options):
    """The command that fetches `name`, naming this Python: the one kvlib is installed in (a bare `python` in a
    terminal is often another, without kvlib), by a path relative to the current directory when it is a virtual
    environment beside it (`.venv/bin/python` in the project, `../.venv/bin/python` in its notebooks), else as
    `python`. Never its absolute path: a notebook that prints this is shared, or published by `make site`, and
    must not show the folders of the machine that ran it."""
    return " ".join([_this_python(), "-m", "kvlib", "download", name, *options])


def _this_python():
    venv, here = Path(sys.prefix).resolve(), Path.cwd().resolve()
    if sys.prefix == sys.base_prefix or not here.is_relative_to(venv.parent):  # not a venv beside us: say python
        return "python"
    python = os.path.relpath(Path(sys.executable).absolute(), Path.cwd().absolute())
    if os.name != "nt":
        return shlex.quote(python)
    return f'"{python}"' if " " in python else python  # cmd.exe reads double quotes, not the shell's single ones


@dataclass(frozen=True)
class Config:
    n_layer: int
    n_head: int
    n_embd: int
    n_ctx: int
    vocab_size: int
    eps: float = 1e-5
    arch: str = "gpt2"           # which forward pass: "gpt2" or "llama"
    n_kv_head: int = None        # key/value heads; fewer than n_head is grouped-query attention
    head_dim: int = None         # n_embd // n_head unless the checkpoint says otherwise
    n_inner: int = None          # feed-forward width (GPT-2: 4 x n_embd)
    rope_theta: float = 10000.0  # Llama's rotary base; GPT-2 adds a position table instead

    def __post_init__(self):  # the defaults that follow from the other fields
        for name, value in (("n_kv_head", self.n_head), ("head_dim", self.n_embd // self.n_head),
                            ("n_inner", 4 * self.n_embd)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    def kv_head(self, head):  # query head(s), an int or a tensor -> the K/V head that serves each
        """Grouped-query attention gives each K/V head n_head // n_kv_head consecutive query heads, the order
        transformers' repeat_kv expands them in; with one K/V head per query head (GPT-2) each serves its own."""
        return head // (self.n_head // self.n_kv_head)


class Model:
    """A model as plain weights, its tokenizer, and the glass-box forward pass of its family."""

    def __init__(self, name, params, config, tokenizer, device):
        self.name, self.params, self.config, self.tokenizer, self.device = name, params, config, tokenizer, device
        self.eos_token_id = tokenizer.eos_token_id

    def __repr__(self):
        c = self.config
        kv = f" ({c.n_kv_head} K/V heads)" if c.n_kv_head != c.n_head else ""
        dtype = "" if self.dtype == torch.float32 else f", {str(self.dtype).removeprefix('torch.')}"
        return (f"Model({self.name!r}, {c.arch} family, on {self.device}{dtype}: {c.n_layer} layers, "
                f"{c.n_head} heads{kv}, {c.n_embd} dims, {c.n_ctx} context, {c.vocab_size} vocab)")

    @property
    def family(self):  # its forward pass and the facts of its family
        return FAMILIES[self.config.arch]

    @property
    def dtype(self):  # of the weights, so of every activation and of the KV cache
        return self.params["h"][0][next(iter(self.params["h"][0]))].dtype

    def encode(self, text):  # str -> list[int]
        if not isinstance(text, str):
            raise KVLibError(f"encode takes a string, not {type(text).__name__}")
        return self.tokenizer.encode(text)

    def decode(self, ids):  # list[int] -> str
        ids = [int(i) for i in ids]
        known = len(self.tokenizer)
        # a checkpoint may pad its vocabulary past its tokenizer's: show such ids, don't drop them
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

    def new_cache(self, window=None, sinks=0):
        """An empty KV cache for this model; window, sinks: keep only the first `sinks` and last `window` tokens."""
        return KVCache(self.config.n_layer, window, sinks)

    def synchronize(self):
        """Wait until the device has finished the work queued on it (call before reading a clock)."""
        synchronize(self.device)

    def fits(self, n_tokens):  # the one check, for all of kvlib, that a sequence of n tokens fits the context
        return n_tokens <= self.config.n_ctx

    def check_ids(self, ids, past_len=0):
        """Validate ids for one forward pass; returns them as a tensor on the model's device."""
        if isinstance(ids, str):
            ids = self.encode(ids)
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if len(ids) == 0:
            raise KVLibError("the prompt is empty: give at least one token of text")
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise KVLibError(f"token ids must be in 0..{self.config.vocab_size - 1} for {self.name}")
        if not self.fits(past_len + len(ids)):
            raise KVLibError(
                f"{past_len + len(ids)} tokens do not fit in {self.name}'s context of {self.config.n_ctx}"
                + (f" ({past_len} cached + {len(ids)} new): shorten the prompt or start a new cache" if past_len
                   else ": shorten the prompt"))  # nothing cached: only the prompt can shrink
        return ids.to(self.device)

    @torch.no_grad()
    def forward(self, ids, cache=None, trace=None, last_only=False):  # [T] -> [T, V] (or [1, V])
        """Logits for the new tokens; with a cache, they follow the cached ones and the cache grows.

        last_only: only the last position's logits, all that generation needs (as
        transformers' `logits_to_keep=1`): the output head is the largest matmul."""
        ids = self.check_ids(ids, 0 if cache is None else one_sequence(cache).seen)
        return self.family.forward(ids, self.params, self.config, cache, trace, last_only)


def synchronize(device):
    """Block until `device` has run everything queued on it; a no-op on the CPU, which runs as it is called.

    A GPU runs asynchronously: a call returns once its kernel is queued, so a clock read
    without this measures the queueing, not the work."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


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


def gpt2_weights(c, sd):
    """transformers' GPT2LMHeadModel -> Config and {'wte.weight', 'wpe.weight', 'ln_f.*', 'lm_head.weight', 'h'}."""
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh") or c.scale_attn_by_inverse_layer_idx \
            or c.reorder_and_upcast_attn or not c.scale_attn_weights:
        raise KVLibError("this is not a plain GPT-2 (activation or attention variant), which kvlib cannot run")
    config = Config(c.n_layer, c.n_head, c.n_embd, c.n_positions, c.vocab_size, c.layer_norm_epsilon,
                    n_inner=c.n_inner)
    sd = {k.removeprefix("transformer."): v for k, v in sd.items()}
    params = {k: sd[k] for k in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")}
    # the output head is tied to the token table; the logits' matmul reads a contiguous [C, V] copy
    # 1.5-2x faster than wte.T's transposed view (GPT-2 small: 19.5 vs 29.2 ms on one CPU thread), like llama's
    params["lm_head.weight"] = params["wte.weight"].T.contiguous()
    params["h"] = [{k.removeprefix(f"h.{i}."): v for k, v in sd.items() if k.startswith(f"h.{i}.")}
                   for i in range(c.n_layer)]
    assert params["wte.weight"].shape == (config.vocab_size, config.n_embd)
    assert params["h"][0]["attn.c_attn.weight"].shape == (config.n_embd, 3 * config.n_embd)
    return config, params


def llama_weights(c, sd):
    """transformers' LlamaForCausalLM -> Config and {'embed_tokens.weight', 'norm.weight', 'lm_head.weight', 'h'}."""
    rope = getattr(c, "rope_parameters", None) or {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.hidden_act != "silu" or c.attention_bias or c.mlp_bias or rope.get("rope_type", "default") != "default":
        raise KVLibError("this Llama variant (biases, another activation or a scaled RoPE) is not one kvlib runs")
    config = Config(c.num_hidden_layers, c.num_attention_heads, c.hidden_size, c.max_position_embeddings,
                    c.vocab_size, c.rms_norm_eps, arch="llama", n_kv_head=c.num_key_value_heads,
                    head_dim=getattr(c, "head_dim", None), n_inner=c.intermediate_size, rope_theta=rope["rope_theta"])
    # projections stored [in, out] (see llama.py); the tied output head becomes a [C, V] copy of the table
    sd = {k.removeprefix("model."): v.T.contiguous() if v.ndim == 2 and "embed" not in k else v for k, v in sd.items()}
    params = {k: sd[k] for k in ("embed_tokens.weight", "norm.weight")}
    params["lm_head.weight"] = sd.get("lm_head.weight", params["embed_tokens.weight"].T.contiguous())
    params["h"] = [{k.removeprefix(f"layers.{i}."): v for k, v in sd.items() if k.startswith(f"layers.{i}.")}
                   for i in range(c.num_hidden_layers)]
    p, C = params["h"][0], config.n_embd
    assert p["self_attn.q_proj.weight"].shape == (C, config.n_head * config.head_dim)
    assert p["self_attn.k_proj.weight"].shape == (C, config.n_kv_head * config.head_dim)
    assert p["mlp.gate_proj.weight"].shape == (C, config.n_inner)
    assert params["lm_head.weight"].shape == (C, config.vocab_size)
    return config, params


@dataclass(frozen=True)
class Family:
    """What the rest of kvlib needs to know about a model family, said once (Config.arch names it)."""
    forward: Callable         # (ids, params, config, cache, trace, last_only) -> logits: gpt2.gpt2 or llama.llama
    weights: Callable         # transformers' config and state dict -> Config, params
    token_table: str          # the checkpoint name of the token embedding table [V, C]
    position_table: str       # GPT-2's learned positions [n_ctx, C]; None where RoPE turns Q and K instead
    rope: bool                # position enters attention by turning Q and K (llama.rotate), not by a table
    ffn_matrices: int         # GPT-2's MLP has 2, SwiGLU 3 (gate, up, down)
    head_columns: Callable    # (layer params, config, head) -> one head's WQ, bQ, WK, bK, WV, bV
    map_kv: Callable          # (layer params, f) -> a copy with f applied to the K and V projections' weights, biases

    def __post_init__(self):  # position enters one way or the other: where rope is False, there is a table to read
        assert self.rope == (self.position_table is None)


FAMILIES = {"gpt2": Family(gpt2.gpt2, gpt2_weights, "wte.weight", "wpe.weight", False, 2, gpt2.head_columns,
                           gpt2.map_kv),
            "llama": Family(llama.llama, llama_weights, "embed_tokens.weight", None, True, 3, llama.head_columns,
                            llama.map_kv)}


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_dtype(dtype=None):
    """fp32 unless told; bf16 and fp16 halve the weights and the cache (at some precision)."""
    if dtype is None or dtype in DTYPES.values():
        return dtype or torch.float32
    if str(dtype) not in DTYPES:
        raise KVLibError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return DTYPES[str(dtype)]


def weights(name, hf_model, device, dtype=torch.float32):
    """A transformers model of a family kvlib runs -> (Config, params): its weights kept, the module dropped."""
    c = hf_model.config
    if c.model_type not in FAMILIES:
        raise KVLibError(f"{name} is a {c.model_type!r} model; kvlib runs the GPT-2 and Llama families")
    try:
        return FAMILIES[c.model_type].weights(c, hf_model.to(device, dtype).state_dict())
    except KVLibError as e:
        raise KVLibError(f"{name}: {e}") from None


def from_hf(name, hf_model, tokenizer, device, dtype=torch.float32):
    """Wrap a transformers model of a family kvlib runs: keep its weights, drop the module."""
    config, params = weights(name, hf_model, device, dtype)
    return Model(name, params, config, tokenizer, device)


def load_hf(path):
    """A checkpoint directory on disk -> (transformers model, tokenizer); never the network."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()  # a bar per load clutters notebooks; downloads keep theirs
    hf = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    return hf.eval(), load_tokenizer(path)


def load_tokenizer(path):
    """A checkpoint's fast tokenizer (its tokenizer.json), never the network. AutoTokenizer gives the same one, but
    imports every family's tokenizer classes to choose it: 0.05 GB more in each learner's kernel on a shared server."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)


@lru_cache(maxsize=None)
def gpt2_tokenizer():
    """GPT-2's own byte-level BPE, from OpenAI's encoder.json and vocab.bpe (bundled, so always here)."""
    from transformers import GPT2Tokenizer

    return GPT2Tokenizer(vocab=str(GPT2_TOKENIZER_DIR / "encoder.json"), merges=str(GPT2_TOKENIZER_DIR / "vocab.bpe"))


RANDOM_SEED = 0  # random-gpt2's weights: GPT-2 small's shape drawn from this seed


def random_gpt2(seed=RANDOM_SEED):
    """GPT-2 small's exact shape with random weights and GPT-2's tokenizer: honest speed and memory."""
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        hf = GPT2LMHeadModel(GPT2Config()).eval()
    return hf, gpt2_tokenizer()


def kvlib_home():
    """Where kvlib keeps what it converted itself (SmolLM2 from its GGUF): $KVLIB_HOME or ~/.cache/kvlib."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("KVLIB_HOME") or cache / "kvlib")


def gguf_path():
    """Where kvlib keeps SmolLM2's GGUF file (4-bit weights), which llama.cpp's server reads as it is."""
    return kvlib_home() / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def local_dir(name):
    """The directory holding a named model on this machine: the Hugging Face cache, then kvlib's own; else None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(HUB_IDS[name], "config.json")
    if isinstance(found, str):
        return Path(found).parent
    converted = kvlib_home() / name
    return converted if (converted / "config.json").exists() else None


def default_name():
    """KVLIB_MODEL if set; else gpt2 if it is already here; else the bundled tiny."""
    if os.environ.get("KVLIB_MODEL"):
        return os.environ["KVLIB_MODEL"]
    if local_dir("gpt2"):
        return "gpt2"
    # stdout, not stderr: a notebook shows stderr in red, and this is news, not an error
    print(t("models.bundled_tiny", hint=download_hint("gpt2")))
    return "tiny"


def checkpoint_dir(name):
    """The directory holding a model's checkpoint on this machine: tiny's in the package, a hub model's in the
    Hugging Face cache or kvlib's own, or the directory named."""
    if name == "tiny":
        return TINY_DIR
    if name in HUB_IDS:
        where = local_dir(name)
        if where is None:
            raise KVLibError(f"{name}'s weights are not on this machine (and kvlib does not download "
                             f"behind your back): run `{download_hint(name)}` once, or use load_model('tiny')")
        return where
    if Path(name).is_dir():
        if not (Path(name) / "config.json").exists():
            raise KVLibError(f"{name} has no config.json: give a directory saved with save_pretrained")
        return Path(name)
    raise KVLibError(f"unknown model {name!r}: choose one of {', '.join(NAMES)} or a directory "
                     f"saved with save_pretrained")


def hf_model(name):
    """(transformers model, tokenizer) for a model name or a directory; the one path every model's weights take."""
    return random_gpt2() if name == "random-gpt2" else load_hf(checkpoint_dir(name))


def shared_model(name, dtype):
    """A model on the CPU whose weights are one copy for every process on the machine (weights_file.py): the
    file kvlib wrote from transformers' load (or, for random-gpt2, its draw) the first time, mapped read-only."""
    from transformers import __version__ as transformers_version

    if name == "random-gpt2":  # drawn from a seed: the same weights wherever the same libraries draw them
        sources, tokenizer = ["random-gpt2", RANDOM_SEED, torch.__version__, transformers_version], gpt2_tokenizer()
    else:
        sources = checkpoint_dir(name).resolve()
        tokenizer = load_tokenizer(sources)
    path = weights_file.path_for(kvlib_home(), name, sources, dtype)
    config, params = weights_file.shared(path, Config, lambda: weights(name, hf_model(name)[0], torch.device("cpu"), dtype),
                                         sources if isinstance(sources, Path) else name)
    return Model(name, params, config, tokenizer, torch.device("cpu"))


def load_model(name=None, device=None, dtype=None):
    """A Model by name ('tiny', 'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl', 'random-gpt2', 'smollm2')
    or directory, on a device (CUDA, then MPS, then CPU) in a dtype (float32, bfloat16, float16)."""
    name = default_name() if name is None else str(name)
    device, dtype = pick_device(device), pick_dtype(dtype)
    if device.type == "cpu":
        return shared_model(name, dtype)
    return from_hf(name, *hf_model(name), device, dtype)
