"""Notebook 5's exercises: answers computed live from the models the notebook passes."""

from . import exercise
from .. import cache_evidence, memory
from ..generate import generate

EXAMPLE = "The king is dead"  # notebook 5's running example (notebook 4's too): whole words on every tokenizer here


@exercise("05.k_rows", hint={"en": "Each forward pass appends one K row per token it is fed, in every layer; "
                                "nothing is ever removed.",
                          "zh": "每次前向计算，送进几个 token，每一层就追加几行 K；什么也不会删掉。"},
          explain={"en": "The prompt's 4 tokens give 4 rows, and each of the 3 one-token steps appends one more: "
                         "{answer} rows in every layer (and as many V rows).",
                   "zh": "提示词的 4 个 token 先给出 4 行，之后 3 步每步送一个 token，各追加一行：每一层 {answer} 行"
                         "（V 也一样多）。"})
def k_rows(model):
    """Feed a 4-token prompt into a new cache, then 3 more tokens one at a time: how many K rows does each
    layer's cache hold?"""
    cache = model.new_cache()
    model.forward([1, 2, 3, 4], cache=cache)
    for token in (5, 6, 7):
        model.forward([token], cache=cache)
    rows = {layer.keys.shape[1] for layer in cache.layers}
    assert len(rows) == 1  # every layer holds the same tokens
    return rows.pop()


@exercise("05.swap_changes", uses=("smollm2",),
          hint={"en": "Keys decide where the new token looks; values are what it brings back from there.",
                "zh": "key 决定新 token 往哪里看；value 是它从那里带回来的东西。"},
          explain={"en": "With France's keys but Germany's values, the answer changes; with Germany's keys and France's "
                         "values it does not: the right letter is {answer}. What a cached token contributes is carried "
                         "by its value; its key only decides how much weight it gets.",
                   "zh": "France 的 key 配上 Germany 的 value，答案变了；Germany 的 key 配上 France 的 value，答案不变："
                         "正确选项是 {answer}。缓存里的 token 贡献的内容装在它的 value 里；它的 key 只决定它分到多少权重。"})
def swap_changes(smollm2):
    """In SmolLM2's cache for "The capital of France", replace the rows of " France" by those of " Germany"
    (every layer), then feed " is". Which swap changes the predicted next token? a) the K rows only,
    b) the V rows only, c) either one alone, d) neither."""
    runs = cache_evidence.swap_effects(smollm2, "The capital of France", "The capital of Germany", " is")
    before = int(runs["none"].argmax())
    k, v = (int(runs[part].argmax()) != before for part in ("K", "V"))
    return {(True, False): "a", (False, True): "b", (True, True): "c", (False, False): "d"}[(k, v)]


@exercise("05.uncached_factor_300", uses=("random-gpt2",), tolerance=0.03,
          hint={"en": "In the table, the cached step hardly grows with the tokens; the uncached one grows about in "
                      "proportion to them. Scale the 256-token column to 300 tokens, then divide.",
                "zh": "表里，用缓存的一步几乎不随 token 数增长；不用缓存的一步大致和 token 数成正比。"
                      "把 256 个 token 那一列按比例放大到 300，再相除。"},
          explain={"en": "At 300 tokens the uncached step costs about {answer:.0f} times the cached one. Not 300 times: "
                         "both compute the logits of the last position only, the same work in both.",
                   "zh": "到 300 个 token 时，不用缓存的一步大约是用缓存的 {answer:.0f} 倍。不是 300 倍："
                         "两种做法都只算最后一个位置的 logits，这部分工作一样多。"})
def uncached_factor_300(big):
    """For GPT-2 small's shape: the step that follows 300 tokens, by what factor do its multiply-adds without
    the cache exceed those with it (within 3 %)?"""
    c = big.config
    return round(memory.decode_step_macs(c, 300, cached=False) / memory.decode_step_macs(c, 300, cached=True), 1)


@exercise("05.smollm2_bytes", uses=("smollm2",),
          hint={"en": "2 (K and V) × layers × KV heads (not query heads) × head size × 4 bytes.",
                "zh": "2（K 和 V）× 层数 × KV 头数（不是 query 头数）× 头的维数 head_dim × 4 字节。"},
          explain={"en": "2 × 30 layers × 3 KV heads × 64 × 4 bytes = {answer:,} bytes per token, measured on the real "
                         "cache's tensors.",
                   "zh": "2 × 30 层 × 3 个 KV 头 × 64 × 4 字节 = 每个 token {answer:,} 字节，是在真实缓存的张量上量出来的。"})
def smollm2_bytes(smollm2):
    """How many bytes per token does SmolLM2's KV cache take in fp32 (4 bytes per number)?"""
    cache = smollm2.new_cache()
    smollm2.forward(smollm2.encode("The capital of France is"), cache=cache)
    return cache.nbytes // len(cache)


@exercise("05.cached_loop",
          hint={"en": "Feed the prompt once into a new cache; after that, feed only the token you just picked (the "
                      "cache already holds the rest), and pick each token as the argmax of the last row of logits.",
                "zh": "先把提示词送进一个新缓存，只送一次；之后每步只送你刚选出的那个 token（其余的缓存里都有），"
                      "每个 token 取最后一行 logits 的 argmax。"},
          explain={"en": "kvlib.generate's greedy ids: {answer}. Your loop is right when it matches them token for token.",
                   "zh": "kvlib.generate 贪心解码得到的 id：{answer}。你的循环和它一个 token 一个 token 都对上，就对了。"})
def cached_loop(model):
    """Write greedy generation with a KV cache, using model.forward(ids, cache=cache): the 20 token ids that
    follow the running example, "The king is dead"."""
    return generate(model, EXAMPLE, 20, stop_at_eos=False).ids
