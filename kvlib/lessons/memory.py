"""What the KV cache costs and saves, by formula (checked against real tensors in tests).

Memory: every token keeps, in every layer, one key and one value vector per KV head:
    bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per number.
Compute, counted in multiply-adds (one multiply and one add; FLOPs are twice this):
a forward pass of T new tokens after P cached ones does the weight matmuls for the
T tokens only, and attention of each new token over everything before it. Grouped
KV heads (Llama family) shrink both the cache and the K and V projections.
`counted_step_macs_by_part` counts the same parts in a real step (rows fed to each weight matrix, scores
the mask let through), so the formula can be caught out.
"""

import bisect
from collections import Counter
from dataclasses import dataclass, replace

import torch
from torch.overrides import TorchFunctionMode

from ..errors import KVLibError, check_count
from ..i18n import t
from ..model.models import FAMILIES, Config
from ..model.trace import Trace
from ..texttable import text_table


def kv_bytes_per_token(n_layer, n_kv_heads, head_dim, bytes_per_number=4):
    return 2 * n_layer * n_kv_heads * head_dim * bytes_per_number


def model_kv_bytes_per_token(config, bytes_per_number=4):
    return kv_bytes_per_token(config.n_layer, config.n_kv_head, config.head_dim, bytes_per_number)


def forward_macs_by_part(config, past_len, new_tokens, logits_for=1):
    """Multiply-adds of one forward pass (new_tokens after past_len cached), by where they are spent."""
    C, L, I, hd, T = config.n_embd, config.n_layer, config.n_inner, config.head_dim, new_tokens
    q_width, kv_width = config.n_head * hd, config.n_kv_head * hd
    # each new token at position p scores p+1 keys and mixes p+1 values, in every query head
    seen = sum(range(past_len + 1, past_len + T + 1))
    return {
        "Q projection": L * T * C * q_width,
        "K and V projections": L * T * C * 2 * kv_width,
        "attention (scores and mixing)": L * 2 * q_width * seen,
        "output projection": L * T * q_width * C,
        "feed-forward": L * T * C * I * FAMILIES[config.arch].ffn_matrices,  # SwiGLU has a third matrix
        "logits": logits_for * C * config.vocab_size,
    }


def forward_macs(config, past_len, new_tokens, logits_for=1):
    """Multiply-adds of one forward pass: new_tokens after past_len cached tokens."""
    return sum(forward_macs_by_part(config, past_len, new_tokens, logits_for).values())


def decode_step_macs(config, seq_len, cached):
    """The step that produces token seq_len+1: one new token with a cache, all seq_len without."""
    return forward_macs(config, seq_len - 1, 1) if cached else forward_macs(config, 0, seq_len)


def decode_step_macs_by_part(config, seq_len, cached):
    """decode_step_macs split by part (Q projection, ..., logits): where a step's multiply-adds go."""
    return forward_macs_by_part(config, seq_len - 1, 1) if cached else forward_macs_by_part(config, 0, seq_len)


# which part of a step each weight matrix serves, by its name in either family (GPT-2's c_attn holds Q | K | V)
WEIGHT_PARTS = {"attn.c_attn.weight": "Q, K and V", "attn.c_proj.weight": "output projection",
                "mlp.c_fc.weight": "feed-forward", "mlp.c_proj.weight": "feed-forward",
                "self_attn.q_proj.weight": "Q projection", "self_attn.k_proj.weight": "K and V projections",
                "self_attn.v_proj.weight": "K and V projections", "self_attn.o_proj.weight": "output projection",
                "mlp.gate_proj.weight": "feed-forward", "mlp.up_proj.weight": "feed-forward",
                "mlp.down_proj.weight": "feed-forward", "lm_head.weight": "logits"}


class _Products(TorchFunctionMode):
    """Counts, while active, the rows each weight matrix is multiplied with: x @ w and addmm(b, x, w)."""

    def __init__(self, weights):  # {id(tensor): name}
        super().__init__()
        self.weights, self.rows = weights, Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.matmul, torch.matmul, torch.addmm) and id(args[-1]) in self.weights:
            self.rows[self.weights[id(args[-1])]] += args[-2].shape[0]  # x [rows, in] @ w [in, out]
        return func(*args, **(kwargs or {}))


def counted_step_macs_by_part(model, ids, cached):
    """decode_step_macs_by_part(model.config, len(ids), cached) counted in a real step rather than by formula: the
    step that reads ids[:-1] from a cache and feeds ids[-1], or feeds all of ids without one. Each product with a
    weight matrix counts its rows x the matrix's numbers (c_attn's split by its Q | K | V columns); attention counts
    2 x head size for each score the mask let through (one multiply-add to score a key, one to mix its value).
    -> ({part: multiply-adds}, {weight name: rows fed in all layers})"""
    ids, c = model.check_ids(ids).tolist(), model.config
    cache, trace = model.new_cache(), Trace()
    if cached:
        model.forward(ids[:-1], cache=cache)
    weights = {id(w): name for p in model.params["h"] for name, w in p.items() if name in WEIGHT_PARTS}
    weights[id(model.params["lm_head.weight"])] = "lm_head.weight"
    with _Products(weights) as counter:
        model.forward(ids[-1:] if cached else ids, cache=cache, trace=trace, last_only=True)
    named = list(model.params["h"][0].items()) + [("lm_head.weight", model.params["lm_head.weight"])]
    size = {name: w.numel() for name, w in named}  # numbers in each matrix: its multiply-adds per row fed
    macs = dict.fromkeys(forward_macs_by_part(c, 0, 1), 0)
    for name, rows in counter.rows.items():
        part = WEIGHT_PARTS[name]
        if part == "Q, K and V":  # [C, q_width + 2 kv_width]: Q's columns first
            q_share = rows * size[name] * c.n_head // (c.n_head + 2 * c.n_kv_head)
            macs["Q projection"] += q_share
            macs["K and V projections"] += rows * size[name] - q_share
        else:
            macs[part] += rows * size[name]
    macs["attention (scores and mixing)"] = sum(int(t.scores.isfinite().sum()) for t in trace.layers) * 2 * c.head_dim
    return macs, dict(counter.rows)


def macs_table(config, n):
    """A text table: millions of multiply-adds of one decode step after n tokens (the step that produces the
    token after them) by part, with and without the cache, and how many times the one is the other."""
    cached, uncached = (decode_step_macs_by_part(config, n, c) for c in (True, False))
    cached["whole step"], uncached["whole step"] = sum(cached.values()), sum(uncached.values())
    rows = [[t("macs." + part), f"{cached[part] / 1e6:,.1f}", f"{uncached[part] / 1e6:,.0f}",
             f"{uncached[part] / cached[part]:.4g}x"] for part in cached]
    return text_table([t("macs.header", n=n)] + [t(f"macs.{h}") for h in ("cached", "uncached", "times")], rows)


# ---- the catalogue: real architectures, their KV cache at any context ----
# Numbers come from each model's released configuration or code (source and date on each entry);
# bytes_per_number defaults to 2 (bf16/fp16), how these models are served.

@dataclass(frozen=True)
class Architecture:
    name: str
    n_layer: int
    n_head: int
    n_kv_head: int      # K/V heads the code really caches (1 for multi-query attention)
    head_dim: int       # not always hidden // n_head (Gemma)
    hidden: int
    context: int
    params: int         # weights, a count: the real one, not the size in the model's name (params_source says how)
    window: int = None  # sliding-window span of the local layers, in tokens
    pattern: str = "G"  # the layers' repeating pattern: L local (windowed), G global; tiled over n_layer
    mla: tuple = None   # multi-head latent attention: (latent, rope) numbers cached per layer per token
    vocab: int = None   # vocabulary size and feed-forward width, given where kvlib counts the model's
    ffn: int = None     # multiply-adds (as_config); the rest are only sized
    family: str = None  # kvlib's forward pass of this shape ("gpt2" or "llama"), where it has one
    source: str = ""
    date: str = ""
    note: str = ""
    params_source: str = ""  # where params comes from: the shapes in config.json counted, or the source's own total

    @property
    def local_layers(self):  # which layers keep only the last `window` tokens
        return [self.window is not None and self.pattern[i % len(self.pattern)] == "L" for i in range(self.n_layer)]

    @property
    def numbers_per_token_per_layer(self):  # K and V of every KV head, or MLA's one shared latent
        return sum(self.mla) if self.mla else 2 * self.n_kv_head * self.head_dim


def _arch(name, n_layer, n_head, n_kv_head, head_dim, hidden, context, params, source, date, **extra):
    return name, Architecture(name, n_layer, n_head, n_kv_head, head_dim, hidden, context, params,
                              source=source, date=date, **extra)


def _gpt2(name, n_layer, n_head, hidden, params, repo):  # one K/V head per query head, 1,024 positions
    return _arch(name, n_layer, n_head, n_head, hidden // n_head, hidden, 1024, params,
                 f"huggingface.co/openai-community/{repo}/config.json (Radford et al., 2019)", "2019-02",
                 vocab=50257, ffn=4 * hidden, family="gpt2",  # n_inner is null in the configs: 4 x hidden
                 params_source=_counted("vocabulary 50,257 and 1,024 positions; feed-forward 4 x hidden; biases; "
                                        "the output layer is the token table"))


def _counted(shapes):  # params_source of a count worked out from a released config's shapes
    return f"counted from config.json's shapes ({shapes}): every weight matrix, bias and norm"


_LLAMA3 = "github.com/meta-llama/llama-models models/sku_list.py and the Llama 3 model card"
_GEMMA = "github.com/google-deepmind/gemma gemma/gm/nn/_gemma.py, and the models' config.json on the hub"
_LLAMA_SHAPES = ("vocabulary {vocab}; gated feed-forward of {ffn}; two norms per layer; an output layer apart from "
                 "the token table")
_GEMMA_SHAPES = ("vocabulary {vocab}; gated feed-forward of {ffn}; four norms per layer; the output layer is the "
                 "token table")
_GEMMA3_SHAPES = _GEMMA_SHAPES + ", and a norm of q and of k per layer: the language model alone, without the " \
                                 "vision encoder the release adds (417M parameters, Gemma 3 technical report, Table 1)"
CATALOGUE = dict([
    _gpt2("GPT-2 small", 12, 12, 768, 124_439_808, "gpt2"),
    _gpt2("GPT-2 medium", 24, 16, 1024, 354_823_168, "gpt2-medium"),
    _gpt2("GPT-2 large", 36, 20, 1280, 774_030_080, "gpt2-large"),
    _gpt2("GPT-2 XL", 48, 25, 1600, 1_557_611_200, "gpt2-xl"),
    _arch("Llama-2-7B", 32, 32, 32, 128, 4096, 4096, 6_738_415_616,
          "github.com/meta-llama/llama MODEL_CARD.md (only 70B uses GQA) and configs of meta-llama/Llama-2-7b-hf",
          "2023-07", note="multi-head attention: one K/V head per query head",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="32,000", ffn="11,008"))),
    _arch("Llama-2-70B", 80, 64, 8, 128, 8192, 4096, 68_976_648_192,
          "github.com/meta-llama/llama MODEL_CARD.md and configs of meta-llama/Llama-2-70b-hf", "2023-07",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="32,000", ffn="28,672"))),
    _arch("Llama-3-8B", 32, 32, 8, 128, 4096, 8192, 8_030_261_248, _LLAMA3, "2024-04-18",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="128,256", ffn="14,336") + " of meta-llama/Meta-Llama-3-8B")),
    _arch("Llama-3-70B", 80, 64, 8, 128, 8192, 8192, 70_553_706_496, _LLAMA3, "2024-04-18",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="128,256", ffn="28,672") + " of meta-llama/Meta-Llama-3-70B")),
    _arch("Llama-3.1-8B", 32, 32, 8, 128, 4096, 131072, 8_030_261_248,
          "github.com/meta-llama/llama-models models/llama3_1/api/sku_list.py (llama3_1_8b: dim 4096, n_layers 32, "
          "n_heads 32, n_kv_heads 8; CONTEXT_LENGTH 131072)", "2024-07-23",
          note="Llama-3-8B's shape, trained to read 131,072 tokens where Llama-3-8B reads 8,192",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="128,256", ffn="14,336") + " of meta-llama/Llama-3.1-8B")),
    _arch("Llama-3.1-405B", 126, 128, 8, 128, 16384, 131072, 405_853_388_800,
          "github.com/meta-llama/llama-models models/llama3_1/api/sku_list.py", "2024-07",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="128,256", ffn="53,248") + " of meta-llama/Llama-3.1-405B")),
    _arch("Mistral-7B-v0.1", 32, 32, 8, 128, 4096, 32768, 7_241_732_096,
          "mistralai/Mistral-7B-v0.1 config.json (sliding_window 4096) and transformers' MistralConfig", "2023-09",
          window=4096, pattern="L", note="every layer keeps a rolling window of 4,096 tokens",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="32,000", ffn="14,336"))),
    _arch("Falcon-7B", 32, 71, 1, 64, 4544, 2048, 6_921_720_704,
          "tiiuae/falcon-7b config.json (multi_query: true) and transformers' modeling_falcon.py, which uses one "
          "K/V head", "2023-05", note="multi-query attention: the config's 71 heads share one K/V head",
          params_source=_counted("vocabulary 65,024; feed-forward 4 x hidden, no biases; one layer norm per layer, "
                                 "attention and feed-forward side by side; the output layer is the token table")),
    _arch("DeepSeek-67B", 95, 64, 8, 128, 8192, 4096, 67_425_001_472,
          "github.com/deepseek-ai/DeepSeek-LLM README.md and configs of deepseek-llm-67b-base", "2023-11",
          params_source=_counted(_LLAMA_SHAPES.format(vocab="102,400", ffn="22,016") + " of deepseek-llm-67b-base")),
    _arch("DeepSeek-V2", 60, 128, 128, 128, 5120, 131072, 236_000_000_000,
          "DeepSeek-V2 technical report (arXiv:2405.04434) Sec. 3.1.2; DeepSeek-V3 repo inference/configs/"
          "config_236B.json", "2024-05-06", mla=(512, 64),
          note="MLA: one 512-number latent plus a 64-number RoPE key per layer, shared by all 128 heads",
          params_source="the DeepSeek-V2 technical report's total (arXiv:2405.04434, abstract: 236B parameters, "
                        "21B of them activated per token): a mixture of experts, every expert counted"),
    _arch("DeepSeek-V3", 61, 128, 128, 128, 7168, 131072, 671_000_000_000,
          "github.com/deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json and inference/model.py",
          "2024-12-26", mla=(512, 64),
          note="weights shipped in FP8, one byte per parameter (FACTS['deepseek_v3_weight_bytes']), not bf16",
          params_source="the DeepSeek-V3 README's total for the main model (671B, 37B activated per token; the "
                        "hub's files add the 14B multi-token-prediction module): every expert counted"),
    _arch("Gemma-2-9B", 42, 16, 8, 256, 3584, 8192, 9_241_705_984, _GEMMA, "2024-06", window=4096, pattern="LG",
          note="head_dim 256 is not 3584 / 16; local and global layers alternate",
          params_source=_counted(_GEMMA_SHAPES.format(vocab="256,000", ffn="14,336") + " of google/gemma-2-9b")),
    _arch("Gemma-2-27B", 46, 32, 16, 128, 4608, 8192, 27_227_128_320, _GEMMA, "2024-06", window=4096, pattern="LG",
          params_source=_counted(_GEMMA_SHAPES.format(vocab="256,000", ffn="36,864") + " of google/gemma-2-27b")),
    _arch("Gemma-3-12B", 48, 16, 8, 256, 3840, 131072, 11_766_034_176, _GEMMA + "; Gemma 3 technical report (2025)",
          "2025-03", window=1024, pattern="LLLLLG", note="five local layers (1,024-token window) per global one",
          params_source=_counted(_GEMMA3_SHAPES.format(vocab="262,208", ffn="15,360") + " of google/gemma-3-12b-pt")),
    _arch("Gemma-3-27B", 62, 32, 16, 128, 5376, 131072, 27_009_346_304, _GEMMA + "; Gemma 3 technical report (2025)",
          "2025-03", window=1024, pattern="LLLLLG",
          params_source=_counted(_GEMMA3_SHAPES.format(vocab="262,208", ffn="21,504") + " of google/gemma-3-27b-pt")),
    _arch("SmolLM2-135M", 30, 9, 3, 64, 576, 8192, 134_515_008,
          "HuggingFaceTB/SmolLM2-135M config.json (Allal et al., 2025); live in kvlib", "2024-11",
          vocab=49152, ffn=1536, family="llama",
          params_source=_counted("vocabulary 49,152; gated feed-forward of 1,536; two norms per layer; the output "
                                 "layer is the token table") + "; kvlib counts the loaded model's the same"),
])

GPUS = {  # nominal memory, decimal gigabytes as vendors state them
    "NVIDIA T4": 16e9, "NVIDIA L4": 24e9, "GeForce RTX 4090": 24e9, "NVIDIA A100 40GB": 40e9,
    "NVIDIA A100 80GB": 80e9, "NVIDIA H100": 80e9, "NVIDIA H200": 141e9, "NVIDIA B200": 192e9,
}

FACTS = {
    "vllm_token_states": ((0.204, 0.382), "Kwon et al., 2023, 'Efficient Memory Management for Large Language "
                          "Model Serving with PagedAttention', Sec. 1 and Fig. 2: the share of KV memory holding "
                          "token states in earlier systems"),
    "vllm_token_states_paged": (0.963, "the same figure for vLLM, Kwon et al., 2023, Fig. 2"),
    "vllm_waste": (0.04, "vLLM blog post 'Easy, Fast, and Cheap LLM Serving with PagedAttention' (2023-06-20): "
                   "under 4 % of KV memory wasted"),
    "deepseek_v2_kv_reduction": (0.933, "DeepSeek-V2 technical report (2024): KV cache reduced by 93.3 % "
                                 "against DeepSeek 67B"),
    "deepseek_v2_deployed_kv_bits": (6, "DeepSeek-V2 technical report Sec. 3.2.3: the deployed model's KV cache "
                                     "is compressed to about 6 bits per element on average"),
    "kivi": ("keys per channel, values per token", "Liu et al., 2024, 'KIVI: A Tuning-Free Asymmetric 2bit "
             "Quantization for KV Cache', Sec. 1 and Fig. 2: keys have a few outlier channels"),
    "deepseek_v3_weight_bytes": (1, "DeepSeek-V3 README and README_WEIGHTS.md (github.com/deepseek-ai/DeepSeek-V3, "
                                 "released 2024-12-26): the weights ship in FP8 (e4m3, one byte per parameter, with a "
                                 "scale per 128x128 block), so the 671B-parameter main model is about 671 GB, not "
                                 "1,342 GB in bf16; the hub's files total 685B parameters with the 14B "
                                 "multi-token-prediction module"),
    "streamingllm_sinks": (4, "Xiao et al., 2023, 'Efficient Streaming Language Models with Attention Sinks', "
                           "Sec. 3.1 and 4: keep the first 4 tokens beside a rolling window"),
}


def of_model(model):
    """The Architecture of a live kvlib model, so the catalogue's formulas meet real tensors."""
    c = model.config
    n_params = sum(t.numel() for k, t in model.params.items() if k != "h" and k != "lm_head.weight")
    n_params += sum(t.numel() for layer in model.params["h"] for t in layer.values())
    return Architecture(model.name, c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_embd, c.n_ctx, n_params,
                        source="the loaded model", date="live")


def architecture(name):  # -> the catalogue's entry for a model's name
    if name not in CATALOGUE:
        raise KVLibError(f"{name!r} is not in the catalogue: pick one of {', '.join(CATALOGUE)}")
    return CATALOGUE[name]


def as_config(arch):
    """A catalogued architecture as a kvlib Config, to count its multiply-adds without loading weights
    (only for entries that give a vocabulary, a feed-forward width and a kvlib family)."""
    if None in (arch.vocab, arch.ffn, arch.family):
        countable = [a.name for a in CATALOGUE.values() if None not in (a.vocab, a.ffn, a.family)]
        raise KVLibError(f"{arch.name}: the catalogue sizes its cache but gives no vocabulary, feed-forward width "
                         f"or kvlib family to count its multiply-adds with; pick one of {', '.join(countable)}")
    return Config(n_layer=arch.n_layer, n_head=arch.n_head, n_embd=arch.hidden, n_ctx=arch.context,
                  vocab_size=arch.vocab, arch=arch.family, n_kv_head=arch.n_kv_head, head_dim=arch.head_dim,
                  n_inner=arch.ffn)


def past_context(arch, context):
    """True when `context` is longer than the model was trained to read: the formula still gives the bytes,
    but the model cannot use such a text, so a table marks the figure (longcontext.PAST)."""
    return context > arch.context


def kv_bytes_per_layer(arch, context, bytes_per_number=2):
    """Bytes each layer's cache holds after `context` tokens (a local layer keeps at most its window)."""
    check_count(context, "a context (tokens)", least=0)
    per_token = arch.numbers_per_token_per_layer * bytes_per_number
    return [per_token * (min(context, arch.window) if local else context) for local in arch.local_layers]


def kv_bytes(arch, context, batch=1, bytes_per_number=2):
    """Bytes of the whole cache: every layer, every sequence of the batch."""
    check_count(batch, "a batch (sequences)")
    return batch * sum(kv_bytes_per_layer(arch, context, bytes_per_number))


def all_weight_bytes(arch, bytes_per_number=2):
    """Bytes of all of a catalogued architecture's weights, its parameter count (the real one, as params_source
    says, not the size in its name) times the bytes of a number (not measure.step_weight_bytes: what one decode step of a loaded model reads)."""
    return int(arch.params * bytes_per_number)


def crossover_context(arch, bytes_per_number=2, batch=1, limit=10_000_000):
    """The smallest context at which the cache outweighs the weights; None if not within `limit`
    (a model whose every layer is windowed stops growing)."""
    weights = all_weight_bytes(arch, bytes_per_number)
    if kv_bytes(arch, limit, batch, bytes_per_number) <= weights:
        return None
    # kv_bytes only grows with the context, so the contexts are sorted by it: bisect for the first above
    return bisect.bisect_right(range(limit + 1), weights, key=lambda n: kv_bytes(arch, n, batch, bytes_per_number))


def mistakes(arch, context, bytes_per_number=2):
    """Classic wrong estimates of this model's cache: {mistake: (wrong bytes, right bytes)}."""
    right = kv_bytes(arch, context, bytes_per_number=bytes_per_number)
    wrong = {}
    if not arch.mla and arch.head_dim != arch.hidden // arch.n_head:
        wrong["head_dim taken as hidden / heads"] = replace(arch, head_dim=arch.hidden // arch.n_head)
    if not arch.mla and arch.n_kv_head < arch.n_head:
        wrong["shared K/V heads ignored (GQA or MQA counted as one K/V head per query head)"] = replace(arch, n_kv_head=arch.n_head)
    if arch.window and "G" in arch.pattern:
        wrong["sliding window applied to every layer"] = replace(arch, pattern="L")
    if arch.window:
        wrong["sliding window ignored"] = replace(arch, window=None)
    if arch.mla:
        wrong["latent attention counted as full K and V per head"] = replace(arch, mla=None)
    return {k: (kv_bytes(a, context, bytes_per_number=bytes_per_number), right) for k, a in wrong.items()}
