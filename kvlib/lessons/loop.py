"""The generation loop taken apart, for notebook 1: loops that forget part of what they were fed, the
pieces a stream hands on, and how temperature reshapes the next token's odds. generate (server/generate.py)
is the real loop; these show why it is built as it is."""

from dataclasses import dataclass, field

import torch

from ..errors import KVLibError
from ..server.sampling import check_sampling, next_piece


def stream_pieces(model, ids):  # list[int] -> list[str], a piece per token: what generate hands on_token
    pieces, shown = [], ""
    for n in range(1, len(ids) + 1):
        pieces.append(next_piece(model.decode(ids[:n]), shown))
        shown += pieces[-1]
    return pieces


FEEDS = ("whole", "prompt only", "answer only")


@dataclass
class LoopRun:
    feed: str
    ids: list = field(default_factory=list)          # the token picked at each step
    inputs: list = field(default_factory=list)       # what each step fed the model: a list of ids per step
    from_prompt: list = field(default_factory=list)  # how many of each step's fed tokens are the prompt's
    text: str = ""                                   # the picked tokens as text
    fed_tokens: list = field(default_factory=list)   # each step's input, token by token, as text
    tokens: list = field(default_factory=list)       # each picked token as text


def feed_loop(model, prompt, max_new_tokens=8, feed="whole"):
    """Greedy decoding without a cache, where each step feeds the model `feed`:

    "whole": the prompt and the answer so far (the real loop, = generate(use_cache=False));
    "prompt only": the answer never goes back in, so every step sees the same input;
    "answer only": once there is an answer, the prompt is dropped and only the answer goes in.
    The two broken loops show why the real one feeds everything back."""
    if feed not in FEEDS:
        raise KVLibError(f"feed must be one of {', '.join(map(repr, FEEDS))}, not {feed!r}")
    check_sampling(max_new_tokens, 0.0, None, None)
    prompt_ids = model.check_ids(prompt).tolist()
    run = LoopRun(feed)
    for _ in range(max_new_tokens):
        with_prompt = feed != "answer only" or not run.ids  # the first step has no answer to feed yet
        fed = (prompt_ids if with_prompt else []) + (run.ids if feed != "prompt only" else [])
        run.inputs.append(fed)
        run.from_prompt.append(len(prompt_ids) if with_prompt else 0)
        run.ids.append(int(model.forward(fed, last_only=True)[-1].argmax()))
    run.text = model.decode(run.ids)
    run.fed_tokens = [[model.decode([i]) for i in fed] for fed in run.inputs]
    run.tokens = [model.decode([i]) for i in run.ids]
    return run


def softmax_at(logits, temperature):  # [..., V] -> probabilities [..., V]
    """softmax(logits / temperature); temperature 0 is its limit, all the probability on the top token (greedy)."""
    if temperature < 0:
        raise KVLibError("temperature must be 0 (greedy) or more")
    logits = torch.as_tensor(logits).float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits / temperature, -1)


def temperature_probs(logits, temperatures=(0.5, 1.0, 2.0), k=5):  # [V] -> ids [k], probs [len(temperatures), k]
    """The k most likely tokens and their probability at each temperature (dividing by T keeps their order)."""
    top = torch.topk(torch.as_tensor(logits).float(), k).indices
    return top.tolist(), torch.stack([softmax_at(logits, t)[top] for t in temperatures]).cpu()
