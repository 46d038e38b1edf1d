"""Notebook 7's exercises: answers computed live from kvlib's catalogue and counts."""

from . import exercise
from .. import longcontext, memory


LLAMA, CONTEXT = memory.CATALOGUE["Llama-3.1-8B"], 131072  # a context within the model's own (131,072 tokens)


@exercise("07.llama3_8b_128k_gb", tolerance=0.03,
          hint="2 (K and V) × 32 layers × 8 KV heads × 128 numbers × 2 bytes is the bytes per token; "
               "multiply by 131,072 tokens and divide by 10⁹.",
          explain="131,072 tokens × 131,072 bytes per token = {answer:.2f} GB: more than the model's 16 GB of "
                  "bf16 weights, for a single sequence as long as Llama-3.1-8B was trained to read.")
def llama3_8b_128k_gb(model):
    """How many GB (10⁹ bytes) does Llama-3.1-8B's KV cache take for one sequence of 131,072 tokens in bf16?"""
    return round(memory.kv_bytes(LLAMA, CONTEXT, batch=1, bytes_per_number=2) / 1e9, 2)


@exercise("07.attention_overtakes", tolerance=0.03,
          hint="Per step, the weights cost about 12 × 12 × 768² multiply-adds (Q, K, V, output, feed-forward) "
               "plus 768 × 50,257 for the logits; attention costs 2 × 12 × 768 per cached token.",
          explain="From {answer:,} cached tokens on, attention costs more multiply-adds than all the weight "
                  "matrices and the logits together, for GPT-2 small's shape.")
def attention_overtakes(model):
    """For GPT-2 small's shape, after how many cached tokens does a decode step spend more multiply-adds in
    attention than in everything else together?"""
    return longcontext.attention_overtakes(longcontext.SHAPES["GPT-2 small"])


@exercise("07.mla_cut", tolerance=0.03,
          hint="Per layer and token, DeepSeek 67B caches 2 × 8 heads × 128 numbers; DeepSeek-V2 caches 512 + 64. "
               "Multiply each by its layers (95 and 60), both at 2 bytes.",
          explain="Latent attention alone, bf16 against bf16, cuts the cache by {answer:.1f} %. The paper's 93.3 % "
                  "also counts the deployed cache's ~6-bit numbers.")
def mla_cut(model):
    """By what percentage is DeepSeek-V2's cache per token (latent attention, bf16) smaller than DeepSeek 67B's
    (grouped heads, bf16)?"""
    v2, old = memory.CATALOGUE["DeepSeek-V2"], memory.CATALOGUE["DeepSeek-67B"]
    return round(100 * (1 - memory.kv_bytes(v2, 1) / memory.kv_bytes(old, 1)), 1)
