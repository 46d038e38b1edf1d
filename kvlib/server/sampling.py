"""How one sequence picks its tokens and when it stops: every decode path's, as the step's postprocess calls it.

A `Generation` is a sequence's record (its prompt, the tokens it picked, why it stopped); `Rules` say how it
picks (greedy, or sampled with a temperature, top-k, top-p, its own generator) and when it stops; `pick` is
the one place a generated token is picked and the one set of stop rules. A stop is a code of `STOPS`, which
code compares; its words, for a person, are translated when they are read (`stop_words`).
"""

from dataclasses import dataclass, field

import torch

from ..errors import KVLibError, check_count
from ..i18n import t


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
    """Where every decode path picks a token, and the one set of stop rules: batching.postprocess calls it.
    gen.stop names the rule that ends the sequence with this token (a code of STOPS), or stays "" while it goes
    on; gen.stop_reason says it in words."""
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


def next_piece(text, shown):  # the answer decoded so far, the text handed on so far -> the next piece
    """A character that takes several tokens (most Chinese, every emoji) decodes as '�' until its last token
    arrives, then the '�' goes: a piece is handed on once its characters are whole, so the pieces read as the
    text does (a stream that stops inside a character never hands on the '�' that the text ends with)."""
    return "" if text.endswith("\ufffd") else text[len(shown):]
