"""Notebook 6's exercises: answers computed live, by running a prompt cache on the model the notebook
passes (random prompts of a given length) or by pricing a receipt with the published price table."""

from ...model.measure import random_ids
from ...server.prompt_cache import ManualClock, PromptCache, Receipt
from .. import memory, pricing
from . import exercise


@exercise("06.second_request_cached",
          hint={"en": "Only full blocks of 16 are stored, and only from the first request's first 99 tokens "
                      "(its last token is always computed). Round down.",
                "zh": "只有 16 个 token 的整块才会存下，而且只从第一个请求的前 99 个 token 里存"
                      "（它的最后一个 token 每次都要算）。往下取整。"},
          explain={"en": "{answer} tokens: the first request stored its full blocks (6 x 16 = 96 of its first 99 "
                         "tokens), and the second request starts with all of them. Its 30 new tokens, and the 4 shared "
                         "ones after the last full block, are computed.",
                   "zh": "{answer} 个 token：第一个请求存下了它的整块（前 99 个 token 里的 6 × 16 = 96 个），"
                         "第二个请求开头正好是这些块。它新加的 30 个 token，加上最后一个整块之后那 4 个共同的 token，"
                         "都要重新算。"})
def second_request_cached(model):
    """Block size 16. A first request of 100 tokens, then a second request of those same 100 tokens
    followed by 30 new ones. How many tokens of the second request are read from the cache?"""
    pc = PromptCache(model, block_size=16)
    first = random_ids(model, 100, 6)
    pc.prefill(first)
    return pc.prefill(first + random_ids(model, 30, 7)).receipt.cached_tokens


SONNET = "Claude Sonnet 4.5"  # a model whose minimum (pricing.ANTHROPIC_MIN_TOKENS) lets 1,200 marked tokens be cached


@exercise("06.anthropic_write_cost", tolerance=1e-9,
          hint={"en": "Written tokens cost 1.25 each, the others 1 each; nothing is read from the cache yet.",
                "zh": "写入的 token 每个 1.25，其余每个 1；这时缓存里还没有东西可读。"},
          explain={"en": "{answer:g}: 1,200 written tokens at 1.25 plus 300 plain ones at 1. The first request costs "
                         "MORE than sending it uncached (1,500); the saving comes from the next ones, which read the "
                         "1,200 tokens at 0.1 (1,200 x 0.1 + 300 = 420).",
                   "zh": "{answer:g}：写入 1,200 个 token，每个 1.25，再加 300 个普通 token，每个 1。第一次请求"
                         "比不用缓存（1,500）还要贵；省钱要靠后面的请求，它们按 0.1 读这 1,200 个 token"
                         "（1,200 × 0.1 + 300 = 420）。"})
def anthropic_write_cost(model):
    """On Claude Sonnet 4.5 (it caches a marked prefix from 1,024 tokens), under Anthropic's 5-minute cache
    prices (written 1.25x, read 0.1x), a 1,500-token request whose first 1,200 tokens are marked with
    cache_control is sent for the first time (nothing cached yet). What does it cost, in units of one uncached
    input token?"""
    marked, prices = 1200, pricing.EXPLICIT["anthropic-5m"]
    if marked < pricing.ANTHROPIC_MIN_TOKENS[SONNET]:  # the question's premise, read from the table
        raise ValueError(f"06.anthropic_write_cost: {SONNET} caches no prefix under "
                         f"{pricing.ANTHROPIC_MIN_TOKENS[SONNET]:,} tokens: name another model")
    first_time = Receipt(input_tokens=1500, cached_tokens=0, written_tokens=marked, mode="explicit")
    return pricing.cost(first_time, prices)


@exercise("06.ttl_renewed",
          hint={"en": "The TTL counts from an entry's last use, not from when it was written.",
                "zh": "TTL 从最后一次使用算起，不是从写入时算起。"},
          explain={"en": "{answer} tokens: the hit at 200 s renewed the blocks, so at 450 s they had been unused for "
                         "only 250 s, under the 300 s TTL. Only an entry left alone for longer than the TTL expires.",
                   "zh": "{answer} 个 token：200 秒那次命中让这些块重新计时，到 450 秒时它们只闲置了 250 秒，"
                         "没到 300 秒的 TTL。只有闲置超过 TTL 的条目才会过期。"})
def ttl_renewed(model):
    """TTL 300 s, block size 16. A 40-token prompt is sent at 0 s, the same prompt again at 200 s, and
    again at 450 s. How many tokens of the request at 450 s are read from the cache?"""
    clock = ManualClock()
    pc = PromptCache(model, block_size=16, ttl_seconds=300, clock=clock)
    prompt = random_ids(model, 40, 8)
    pc.prefill(prompt)
    clock.advance(200)
    pc.prefill(prompt)
    clock.advance(250)
    return pc.prefill(prompt).receipt.cached_tokens


@exercise("06.evicted",
          hint={"en": "Under a byte budget the least recently USED prefix goes first; a hit counts as a use.",
                "zh": "内存有上限时，最久没被“用”过的前缀先走；命中也算一次使用。"},
          explain={"en": "({answer}) B goes: A was used again at 2 s, after B was written at 1 s, so B was the least "
                         "recently used prefix when C needed room.",
                   "zh": "（{answer}）B 被逐出：B 在 1 秒时写入，A 在 2 秒时又被用了一次，所以 C 需要腾地方时，"
                         "B 是最久没用过的前缀。"})
def evicted(model):
    """A cache with room for exactly 4 blocks of 16 tokens. Prefix A (2 blocks) is sent at 0 s, prefix B
    (2 blocks) at 1 s, A again at 2 s, then prefix C (2 blocks) at 3 s. Whose blocks were evicted to make
    room for C? (a) A's (b) B's (c) nobody's"""
    clock = ManualClock()
    block_bytes = 16 * memory.model_kv_bytes_per_token(model.config)
    pc = PromptCache(model, block_size=16, max_bytes=4 * block_bytes, clock=clock)
    a, b, c = (random_ids(model, 33, seed) for seed in (1, 2, 3))  # 33 tokens: 2 full blocks before the last
    for prompt in (a, b, a, c):
        pc.prefill(prompt)
        clock.advance(1)
    held = lambda p: pc.block_keys(p, "default", pc.spans(len(p)))[0] in pc.index  # looked up, not sent
    return "a" if not held(a) else "b" if not held(b) else "c"
