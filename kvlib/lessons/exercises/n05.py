"""Notebook 5's exercises: answers computed live from the models the notebook passes."""

from ...server.generate import generate
from .. import cache_evidence, memory
from . import exercise

EXAMPLE = "The king is dead"  # notebook 5's example, the running line's start: whole words on every tokenizer here


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
                      "proportion to them. Scale its uncached whole step from 256 tokens to 300, then divide by the cached one.",
                "zh": "表里，用缓存的一步几乎不随 token 数增长；不用缓存的一步大致和 token 数成正比。"
                      "把表里不用缓存的整步合计从 256 个 token 按比例放大到 300 个，再除以用缓存的。"},
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


class Watched:
    """A model that writes down each forward call's tokens fed and cache, for the cached loop's check."""

    def __init__(self, model):
        self.model, self.calls = model, []  # calls: (tokens fed, the cache passed or None)

    def forward(self, ids, cache=None, *args, **kwargs):
        self.calls.append((len(ids), cache))
        return self.model.forward(ids, cache, *args, **kwargs)

    def __getattr__(self, name):  # everything else is the model's: new_cache, encode, config...
        return getattr(self.model, name)


NEW_TOKENS = 20

FAULTS = {
    "function": {"en": "pass your function itself, not what it returned: exercises.check(\"05.cached_loop\", "
                       "my_generate, model). The check runs it and counts the tokens each model.forward call is fed.",
                 "zh": "传入函数本身，而不是它的返回值：exercises.check(\"05.cached_loop\", my_generate, model)。"
                       "检查会运行它，数每次调用 model.forward 送进去几个 token。"},
    "no_call": {"en": "your loop never called model.forward: the ids must come from the model, step by step.",
                "zh": "你的循环一次也没调用 model.forward：id 要由模型一步一步算出来。"},
    "no_cache": {"en": "your loop called model.forward without a cache (tokens fed per call: {fed}), so every step "
                       "ran the whole text again. Make one cache before the loop, pass it to every call "
                       "(cache=cache), and after the prompt feed only the token you just picked.",
                 "zh": "你的循环调用 model.forward 时没传缓存（每次送进去的 token 数：{fed}），所以每一步都把整段文字"
                       "重算了一遍。在循环之前建一个缓存，每次调用都传给它（cache=cache），提示词之后只送刚选出的那个 token。"},
    "many_caches": {"en": "your loop fed {caches} different caches (tokens fed per call: {fed}). One cache, made "
                          "before the loop, keeps every token's K and V: pass that one to every call.",
                    "zh": "你的循环用了 {caches} 个不同的缓存（每次送进去的 token 数：{fed}）。只要一个缓存，在循环之前建好，"
                          "它存着每个 token 的 K 和 V：每次调用都传这一个。"},
    "fed_again": {"en": "your loop fed the cache {total} tokens for a {prompt}-token prompt and {n} new tokens "
                        "(per call: {fed}): some went in twice. After the prompt, feed only the token you just "
                        "picked; the cache already holds the rest.",
                  "zh": "提示词 {prompt} 个 token、新写 {n} 个，你的循环却给缓存送了 {total} 个（每次：{fed}）："
                        "有的 token 送了两遍。提示词之后只送刚选出的那个 token；其余的缓存里都有。"},
}


def _per_call(fed):  # "4, 5, 6, 7, 8, 9, …"
    return ", ".join(str(n) for n in fed[:6]) + (", …" if len(fed) > 6 else "")


def _fault(key, **values):
    return {lang: text.format(**values) for lang, text in FAULTS[key].items()}


def watch_loop(fn, model):
    """Run the learner's loop on the running example with a model that writes its forward calls down -> (the ids
    it returned, None or why it is not a cached loop: no call, a call without a cache, more than one cache, or
    a token fed twice). A cached loop feeds each token once: the prompt, then one token per step."""
    if not callable(fn):
        return fn, _fault("function")
    watched, prompt = Watched(model), model.encode(EXAMPLE)
    ids = fn(watched, list(prompt), NEW_TOKENS)
    if ids is Ellipsis:  # the notebook's untouched stub
        return ids, None
    fed, caches = [n for n, _ in watched.calls], [c for _, c in watched.calls]
    if not fed:
        return ids, _fault("no_call")
    if any(c is None for c in caches):
        return ids, _fault("no_cache", fed=_per_call(fed))
    if len({id(c) for c in caches}) > 1:
        return ids, _fault("many_caches", caches=len({id(c) for c in caches}), fed=_per_call(fed))
    if sum(fed) > len(prompt) + NEW_TOKENS:
        return ids, _fault("fed_again", total=sum(fed), prompt=len(prompt), n=NEW_TOKENS, fed=_per_call(fed))
    return ids, None


@exercise("05.cached_loop", run=watch_loop,
          hint={"en": "Feed the prompt once into a new cache; after that, feed only the token you just picked (the "
                      "cache already holds the rest), and pick each token as the argmax of the last row of logits.",
                "zh": "先把提示词送进一个新缓存，只送一次；之后每步只送你刚选出的那个 token（其余的缓存里都有），"
                      "每个 token 取最后一行 logits 的 argmax。"},
          explain={"en": "kvlib.generate's greedy ids: {answer}. Your loop is right when it matches them token for token "
                         "and feeds each token once, into one cache: the prompt, then one token per step.",
                   "zh": "kvlib.generate 贪心解码得到的 id：{answer}。你的循环和它一个 token 一个 token 都对上，"
                         "并且每个 token 只送一次、都送进同一个缓存（先是提示词，之后每步一个 token），就对了。"})
def cached_loop(model):
    """Write greedy generation with a KV cache, using model.forward(ids, cache=cache): the 20 token ids that
    follow the running example, "The king is dead". The check runs your function and counts the tokens each
    model.forward call is fed."""
    return generate(model, EXAMPLE, NEW_TOKENS, stop_at_eos=False).ids
