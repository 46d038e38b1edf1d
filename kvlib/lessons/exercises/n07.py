"""Notebook 7's exercises: answers computed live from kvlib's catalogue and counts."""

from .. import longcontext, memory
from . import exercise


LLAMA, CONTEXT = memory.CATALOGUE["Llama-3.1-8B"], 131072  # a context within the model's own (131,072 tokens)


@exercise("07.llama3_8b_128k_gb", tolerance=0.03,
          hint={"en": "2 (K and V) × 32 layers × 8 KV heads × 128 numbers × 2 bytes is the bytes per token; "
                      "multiply by 131,072 tokens and divide by 10⁹.",
                "zh": "2（K 和 V）× 32 层 × 8 个 KV 头 × 128 个数 × 2 字节，是每个 token 的字节数；"
                      "再乘以 131,072 个 token，除以 10⁹。"},
          explain={"en": "131,072 tokens × 131,072 bytes per token = {answer:.2f} GB: more than the model's 16 GB of "
                         "bf16 weights, for a single sequence as long as Llama-3.1-8B was trained to read.",
                   "zh": "131,072 个 token × 每个 token 131,072 字节 = {answer:.2f} GB：只是一条 Llama-3.1-8B 训练时"
                         "读过那么长的序列，缓存就比模型 16 GB 的 bf16 权重还大。"})
def llama3_8b_128k_gb(model):
    """How many GB (10⁹ bytes) does Llama-3.1-8B's KV cache take for one sequence of 131,072 tokens in bf16?"""
    return round(memory.kv_bytes(LLAMA, CONTEXT, batch=1, bytes_per_number=2) / 1e9, 2)


@exercise("07.attention_overtakes", tolerance=0.03,
          hint={"en": "Per step, the weights cost about 12 × 12 × 768² multiply-adds (Q, K, V, output, feed-forward) "
                      "plus 768 × 50,257 for the logits; attention costs 2 × 12 × 768 per cached token.",
                "zh": "每一步，权重大约要 12 × 12 × 768² 次乘加（Q、K、V、输出、前馈网络），logits 再加 768 × 50,257；"
                      "注意力每个缓存 token 要 2 × 12 × 768 次。"},
          explain={"en": "From {answer:,} cached tokens on, attention costs more multiply-adds than all the weight "
                         "matrices and the logits together, for GPT-2 small's shape.",
                   "zh": "按 GPT-2 small 的形状，从 {answer:,} 个缓存 token 起，注意力的乘加次数超过所有权重矩阵"
                         "和 logits 加起来。"})
def attention_overtakes(model):
    """For GPT-2 small's shape, after how many cached tokens does a decode step spend more multiply-adds in
    attention than in everything else together?"""
    return longcontext.attention_overtakes(longcontext.SHAPES["GPT-2 small"])


@exercise("07.mla_cut", tolerance=0.03,
          hint={"en": "Per layer and token, DeepSeek 67B caches 2 × 8 heads × 128 numbers; DeepSeek-V2 caches 512 + "
                      "64. Multiply each by its layers (95 and 60), both at 2 bytes.",
                "zh": "每层每个 token，DeepSeek 67B 缓存 2 × 8 个头 × 128 个数；DeepSeek-V2 缓存 512 + 64 个。"
                      "各自乘以层数（95 和 60），都按 2 字节算。"},
          explain={"en": "Latent attention alone, bf16 against bf16, cuts the cache by {answer:.1f} %. The paper's "
                         "93.3 % also counts the deployed cache's ~6-bit numbers.",
                   "zh": "只算潜在注意力，bf16 对 bf16，缓存小了 {answer:.1f}%。论文的 93.3% 还算上了实际部署时"
                         "缓存里约 6 位的数。"})
def mla_cut(model):
    """By what percentage is DeepSeek-V2's cache per token (latent attention, bf16) smaller than DeepSeek 67B's
    (grouped heads, bf16)?"""
    v2, old = memory.CATALOGUE["DeepSeek-V2"], memory.CATALOGUE["DeepSeek-67B"]
    return round(100 * (1 - memory.kv_bytes(v2, 1) / memory.kv_bytes(old, 1)), 1)
