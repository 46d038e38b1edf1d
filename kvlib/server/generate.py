"""Generation: prefill the prompt, then decode one token at a time.

With the cache (use_cache=True) the prompt goes through the model once, and each
step feeds only the newest token, whose K and V join the cache. Without it, every
step feeds the whole sequence again, as a model without memory must (the loop in
rasbt/LLMs-from-scratch ch04 before its KV-cache diff). Both give the same tokens.
"""

import time
from dataclasses import dataclass, field

import torch

from ..errors import KVLibError, check_count
from ..i18n import t
from ..model.kv_cache import one_sequence


@dataclass
class Generation:
    prompt_ids: list
    ids: list = field(default_factory=list)  # new tokens only
    text: str = ""
    step_seconds: list = field(default_factory=list)  # step 0 is the prefill
    cache: object = None
    stop: str = ""  # why it ended, one of STOPS ("" while it goes on): the code that code compares
    stop_args: dict = field(default_factory=dict)  # what the words for the stop name: a count, the model

    @property
    def stop_reason(self):  # the stop in words, in the language set when they are read (kvlib.i18n)
        return stop_words(self.stop, self.stop_args)


STOPS = ("max_new_tokens", "eos", "context", "on_token")  # the rules that end a sequence, as codes


def stop_words(stop, args):  # a stop code and its arguments -> words for a person ("" for no stop)
    return t(f"stop.{stop}", **args) if stop else ""


def sample(logits, temperature=0.0, top_k=None, top_p=None, generator=None):  # [V] -> token id
    """Greedy at temperature 0; else softmax(logits / temperature) over the top-k / top-p set."""
    if temperature == 0:
        return int(logits.argmax())
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = torch.softmax(sorted_logits, -1).cumsum(-1)
        drop = cum - torch.softmax(sorted_logits, -1) >= top_p  # keep the smallest set reaching top_p
        logits = logits.masked_fill(drop.scatter(0, order, drop), float("-inf"))
    probs = torch.softmax(logits, -1).cpu()
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass
class Rules:  # how one sequence picks its tokens and when it stops: what pick reads
    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = None
    top_p: float = None
    generator: torch.Generator = None  # its own, so a seeded sequence draws alike alone or in a batch
    stop_at_eos: bool = True


def pick(model, gen, logits, rules):  # logits [V] -> the next token, appended to gen.ids
    """Where every decode loop that answers picks a token, and the one set of stop rules: generate's loop and
    batching.postprocess call it. gen.stop names the rule that ends the sequence with this token (a code of STOPS), or stays "" while it
    goes on; gen.stop_reason says it in words."""
    token = sample(logits, rules.temperature, rules.top_k, rules.top_p, rules.generator)
    gen.ids.append(token)
    if len(gen.ids) == rules.max_new_tokens:
        gen.stop, gen.stop_args = "max_new_tokens", {"n": rules.max_new_tokens}
    elif rules.stop_at_eos and token == model.eos_token_id:
        gen.stop = "eos"
    elif not model.fits(len(gen.prompt_ids) + len(gen.ids) + 1):  # the context is full: no room for one more
        gen.stop, gen.stop_args = "context", {"model": model.name, "n": model.config.n_ctx}
    return token


def check_sampling(max_new_tokens, temperature, top_k, top_p):
    check_count(max_new_tokens, "max_new_tokens")
    if temperature < 0:
        raise KVLibError("temperature must be 0 (greedy) or more")
    if top_k is not None and top_k < 1:
        raise KVLibError("top_k must be at least 1 (or None for no limit)")
    if top_p is not None and not 0 < top_p <= 1:
        raise KVLibError("top_p must be in (0, 1] (or None for no limit)")


def generate(model, prompt, max_new_tokens=20, use_cache=True, temperature=0.0, top_k=None, top_p=None,
             seed=None, on_token=None, stop_at_eos=True, cache=None):
    """Continue `prompt` (text or ids). on_token(id, text_piece) is called as each token arrives
    and may return False to stop (a Stop button); text_piece is "" while a character several tokens
    long is still arriving, so the pieces join up to gen.text (but for a character the last token cut).
    cache: a KVCache to fill instead of a new one, empty (so a caller can watch it grow from on_token)
    or having already read the prompt's first tokens (only the rest is fed);
    gen.cache is it either way.

    Stops after max_new_tokens, at the end-of-text token, or when the context is full (gen.stop says which, as
    a code; gen.stop_reason in words). The decode loop of one sequence on a KVCache (the views use it): it picks
    and stops through pick, as batching.step does for sequences on a paged cache (PromptCache.answer's among them)."""
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    prompt_ids = model.check_ids(prompt).tolist()
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    if cache is not None and not use_cache:
        raise KVLibError("a cache was given with use_cache=False: pass one or the other")
    # tokens fed so far, not tokens held: a sliding window holds fewer than it has seen
    if cache is not None and one_sequence(cache).seen >= len(prompt_ids):
        raise KVLibError(f"the cache has already read {cache.seen} tokens, the prompt is {len(prompt_ids)}: it may "
                         "hold the prompt's first tokens, but at least the last one must be fed. Pass a new cache "
                         "(model.new_cache()), or the prompt with the answer so far")
    gen = Generation(prompt_ids=prompt_ids, cache=(model.new_cache() if cache is None else cache) if use_cache else None)
    rules = Rules(max_new_tokens, temperature, top_k, top_p, generator, stop_at_eos)
    feed = prompt_ids[0 if cache is None else cache.seen:]
    shown = ""  # the text the pieces handed to on_token add up to
    while True:
        model.synchronize()  # a GPU runs ahead of Python: wait for it before each clock read
        t0 = time.perf_counter()
        logits = model.forward(feed, cache=gen.cache, last_only=True)[-1]
        token = pick(model, gen, logits, rules)  # int() waits too, but don't rely on it
        model.synchronize()
        gen.step_seconds.append(time.perf_counter() - t0)
        gen.text = model.decode(gen.ids)
        piece = next_piece(gen.text, shown)
        shown += piece
        if on_token is not None and on_token(token, piece) is False:
            gen.stop, gen.stop_args = "on_token", {}  # a Stop button outranks the rule this token met, if any
        if gen.stop:
            return gen
        feed = [token] if use_cache else gen.prompt_ids + gen.ids


def next_piece(text, shown):  # the answer decoded so far, the text handed on so far -> the next piece
    """A character that takes several tokens (most Chinese, every emoji) decodes as '�' until its last token
    arrives, then the '�' goes: a piece is handed on once its characters are whole, so the pieces read as the
    text does (a stream that stops inside a character never hands on the '�' that the text ends with)."""
    return "" if text.endswith("\ufffd") else text[len(shown):]
