"""Notebook 8's exercises: answers computed live, from the catalogue of real models, by serving requests
through kvlib's scheduler on the model the notebook passes, and by the block count of a shared prefix."""

from ...model.measure import random_ids
from ...server import serving
from .. import memory, sharing
from . import exercise


LLAMA, GPU = memory.CATALOGUE["Llama-3.1-8B"], memory.GPUS["NVIDIA H100"]  # trained on 131,072 tokens
LEFT = GPU - memory.all_weight_bytes(LLAMA)  # bytes the weights leave for the caches


def users_fit(context):
    """How many sequences of `context` tokens fit beside Llama-3.1-8B's weights on the 80 GB GPU."""
    return int(LEFT // memory.kv_bytes(LLAMA, context))


@exercise("08.users_at_128k",
          hint={"en": f"The GPU's {GPU / 1e9:.0f} GB minus the {memory.all_weight_bytes(LLAMA) / 1e9:.0f} GB of weights "
                      f"is what the caches share; one sequence of 131,072 tokens takes 2 x {LLAMA.n_layer} layers x "
                      f"{LLAMA.n_kv_head} KV heads x {LLAMA.head_dim} numbers x 2 bytes per token. Round down.",
                "zh": f"GPU 的 {GPU / 1e9:.0f} GB 减去 {memory.all_weight_bytes(LLAMA) / 1e9:.0f} GB 权重，剩下的由各个缓存"
                      f"分；一条 131,072 个 token 的序列，每个 token 占 2 × {LLAMA.n_layer} 层 × {LLAMA.n_kv_head} 个 KV 头 "
                      f"× {LLAMA.head_dim} 个数 × 2 字节。向下取整。"},
          explain={"en": f"{{answer}} users: {LEFT / 1e9:.0f} GB left over, and each 131,072-token cache takes "
                         f"{memory.kv_bytes(LLAMA, 131072) / 1e9:.1f} GB. At 8,192 tokens the same GPU holds "
                         f"{users_fit(8192)}: long contexts, not the weights, decide how many people a GPU serves.",
                   "zh": f"{{answer}} 个用户：剩下 {LEFT / 1e9:.0f} GB，每个 131,072 token 的缓存要 "
                         f"{memory.kv_bytes(LLAMA, 131072) / 1e9:.1f} GB。换成 8,192 个 token，同一块 GPU 能放 "
                         f"{users_fit(8192)} 个：一块 GPU 能服务多少人，由长上下文决定，而不是权重。"})
def users_at_128k(model):
    """Llama-3.1-8B in bf16 (16 GB of weights) on an 80 GB GPU: how many sequences of 131,072 tokens can it
    decode together, their KV caches filling the memory the weights leave?"""
    return users_fit(131072)


@exercise("08.static_idle",
          hint={"en": "Every occupied slot makes one token a step (the prefill makes the first), and a static batch "
                      "runs until its longest answer is done. Count 4 slots x the steps, minus the tokens made.",
                "zh": "每个有人的槽位每步生成一个 token（预填充生成第一个），静态批要跑到最长的回答结束。"
                      "算 4 个槽位 × 步数，再减去生成的 token 数。"},
          explain={"en": "{answer} slot-steps idle: the batch runs 10 steps, so 4 slots offer 40, and the answers use "
                         "2 + 3 + 5 + 10 = 20 of them. Continuous batching would give each freed slot to a waiting "
                         "request at the next step.",
                   "zh": "空闲 {answer} 个槽位步：这一批跑 10 步，4 个槽位共 40 个槽位步，回答用掉 2 + 3 + 5 + 10 = 20 个。"
                         "连续批处理会在下一步就把空出来的槽位交给一个等着的请求。"})
def static_idle(model):
    """One static batch of 4 slots serves 4 requests whose answers are 2, 3, 5 and 10 tokens long. Each step,
    every request still running makes one token. How many slot-steps sit idle until the batch is done?"""
    requests = [serving.Request(serving.label(i), random_ids(model, 4, seed=80 + i), n)
                for i, n in enumerate((2, 3, 5, 10))]
    run = serving.serve(model, requests, "static", max_batch=4)
    return sum(cell is None for step in run.steps for cell in step.cells)


@exercise("08.shared_blocks",
          hint={"en": "Blocks of 16. The system prompt keeps its own 7 blocks (100 tokens), 6 of them full and read "
                      "by everyone; each user needs blocks for their whole 120 tokens, minus those 6 shared ones.",
                "zh": "每块 16 个 token。系统提示词自己占 7 块（100 个 token），其中 6 块是满的，大家都读；"
                      "每个用户要为自己全部 120 个 token 准备块，减去共享的那 6 块。"},
          explain={"en": "{answer} blocks: the system prompt's 7, plus for each user ceil(120 / 16) = 8 minus the 6 "
                         "full shared ones, so 2 (the partly filled 7th block is copied before a user writes into it). "
                         "Without sharing, 4 x 8 = 32.",
                   "zh": "{answer} 块：系统提示词的 7 块，加上每个用户 ceil(120 / 16) = 8 块减去共享的 6 个满块，即 2 块"
                         "（没填满的第 7 块在用户写入之前先复制一份）。不共享的话是 4 × 8 = 32 块。"})
def shared_blocks(model):
    """Blocks of 16 tokens. A system prompt of 100 tokens is prefilled once; 4 users each add 20 tokens of their
    own after it, sharing its blocks. How many blocks are in use, the system prompt's own included?"""
    return sharing.shared_blocks(100, [120] * 4, block_size=16)


@exercise("08.computed_after_hit",
          hint={"en": "The index holds full blocks only, and a hit stops before the prompt's last token, whose scores "
                      "pick the first answer token. How many whole blocks of 16 fit in the 100 shared tokens?",
                "zh": "索引里只有满块；命中停在提示词最后一个 token 之前，因为要用它的得分挑出回答的第一个 token。"
                      "100 个共享 token 里能装下几个完整的 16 token 块？"},
          explain={"en": "{answer} tokens: the second prompt's first 6 blocks (96 tokens) are the first one's, found in "
                         "the index; the 7th block holds the system prompt's last 4 tokens and the first user's 12, so "
                         "its key (a hash of every token up to its end) is not the second prompt's: those 4 are "
                         "computed again with the user's own 20.",
                   "zh": "{answer} 个 token：第二个提示词的前 6 块（96 个 token）和第一个的一样，在索引里找得到；"
                         "第 7 块装的是系统提示词最后 4 个 token 和第一个用户的 12 个，它的键（到块尾为止所有 token 的"
                         "哈希）和第二个提示词的对不上：这 4 个要和用户自己的 20 个一起重新计算。"})
def computed_after_hit(model):
    """Blocks of 16, prefix caching on. A server has answered one user whose prompt was a 100-token system prompt and
    20 tokens of their own. A second user sends the same system prompt and 20 different tokens. Of its 120 prompt
    tokens, how many does its prefill compute?"""
    system = random_ids(model, 100, seed=81)
    requests = [serving.Request(serving.label(i), system + random_ids(model, 20, seed=82 + i), 1) for i in range(2)]
    second = serving.serve(model, requests, max_batch=1, block_size=16).served[1]
    return len(second.request.prompt_ids) - second.reused
