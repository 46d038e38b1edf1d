"""One attention head, step by step, recomputed by hand from the layer's weights.

The seeds' pseudocode, with the real matrices: E (the layer-normed input),
Q = E·WQ + bQ, K = E·WK + bK, scores = Q·Kᵀ / √d, the causal mask (-inf above the
diagonal), softmax rows that sum to 1, V = E·WV + bV, out = weights·V. GPT-2 has the
biases b; a Llama-family model has none, and turns Q and K by their positions (RoPE)
before the scores, and its query head h reads the K/V head `config.kv_head(h)`. `explain`
returns every intermediate (as minGPT's `encode_and_show_work` does), taking E from
a Trace of the real forward pass so the numbers are the model's own.

`toy_prefill` runs the same steps first on a toy head, as the seed essay (Sam Rose, "Prompt
caching: 10x cheaper LLM tokens, but how?", ngrok's blog, 2025) walks a prefill: 4 tokens of 3
made-up numbers, W_Q, W_K, W_V of 3 × 2 small integers, so every product can be done with a
pencil; `show` and `worked` write its matrices and sums as text (they compute; views draw).
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .. import i18n
from ..errors import KVLibError
from ..model.kv_cache import causal_mask
from ..model.llama import rope_angles, rotate
from ..model.trace import Trace


@dataclass
class HeadSteps:
    tokens: list      # the tokens as text
    E: torch.Tensor   # [T, C]
    WQ: torch.Tensor  # [C, hs]
    WK: torch.Tensor
    WV: torch.Tensor
    bQ: torch.Tensor  # [hs] (zeros for a family without biases)
    bK: torch.Tensor
    bV: torch.Tensor
    Q: torch.Tensor   # [T, hs] (after RoPE in the Llama family)
    K: torch.Tensor
    V: torch.Tensor
    scores: torch.Tensor   # [T, T] before the mask
    masked: torch.Tensor   # [T, T] -inf above the diagonal
    weights: torch.Tensor  # [T, T] rows sum to 1
    out: torch.Tensor      # [T, hs]


class HeadWeights(NamedTuple):  # one head's columns of its layer's projections: W [C, hs], b [hs]
    WQ: torch.Tensor
    bQ: torch.Tensor
    WK: torch.Tensor
    bK: torch.Tensor
    WV: torch.Tensor
    bV: torch.Tensor


class Guess(NamedTuple):  # one candidate for the next token
    token: str
    p: float


class Attended(NamedTuple):  # where one query puts its largest weight
    position: int
    token: str
    weight: float


def head_weights(model, layer, head):  # -> HeadWeights
    """One head's columns of the layer's projections, named (where they sit: its family's head_columns)."""
    return HeadWeights(*model.family.head_columns(model.params["h"][layer], model.config, head))


def head_steps(tokens, E, WQ, bQ, WK, bK, WV, bV, turn=None):  # E [T, C], W [C, hs], b [hs] -> HeadSteps
    """One head's prefill, every step kept: the toy's and a real layer's alike (`turn`: RoPE, on Q and K)."""
    Q, K, V = E @ WQ + bQ, E @ WK + bK, E @ WV + bV  # [T, hs]
    if turn is not None:
        Q, K = turn(Q), turn(K)
    scores = Q @ K.T / math.sqrt(Q.shape[-1])  # [T, hs]·[hs, T] = [T, T]
    pos = torch.arange(len(tokens), device=scores.device)
    masked = scores + causal_mask(pos, pos).to(scores.dtype)  # -inf above the diagonal
    weights = torch.softmax(masked, dim=-1)
    return HeadSteps(list(tokens), E, WQ, WK, WV, bQ, bK, bV, Q, K, V, scores, masked, weights, weights @ V)


def explain(model, text, layer=0, head=0):
    ids = model.check_ids(text)
    trace = Trace()
    model.forward(ids, trace=trace)
    turn = None
    if model.family.rope:  # position enters by turning Q and K, as the forward pass did
        cos, sin = rope_angles(torch.arange(len(ids), device=ids.device), model.config.head_dim, model.config.rope_theta)
        turn = lambda x: rotate(x, cos, sin)
    tokens = [model.decode([i]) for i in ids.tolist()]
    return head_steps(tokens, trace.layers[layer].x, *head_weights(model, layer, head), turn=turn)


# the toy head: 4 tokens of 3 numbers, each weight matrix 3 x 2 (made up: small integers, no biases)
TOY_TOKENS = ["The", " king", " is", " dead"]
TOY_E = [[1, 0, 1], [0, 2, 1], [1, 1, 0], [0, 1, 2]]  # [T, C] = [4, 3]
TOY_W = {"Q": [[0, 1], [-1, 0], [0, 0]], "K": [[1, 1], [-1, 0], [1, 1]], "V": [[1, 1], [1, 1], [1, -1]]}  # [C, hs]


def toy_prefill():  # -> HeadSteps of the toy head over TOY_TOKENS
    E = torch.tensor(TOY_E, dtype=torch.float64)
    (WQ, WK, WV), zero = (torch.tensor(TOY_W[p], dtype=torch.float64) for p in "QKV"), torch.zeros(2, dtype=torch.float64)
    return head_steps(TOY_TOKENS, E, WQ, zero, WK, zero, WV, zero)


# the token after the toy prompt and its 3 numbers: notebook 5 feeds it as one cached step
TOY_NEXT, TOY_NEXT_E = ",", [1, 1, 1]


def toy_next():  # -> HeadSteps of the toy head over TOY_NEXT alone: its E [1, 3] and its Q, K, V [1, 2]
    """The next token through the prefill's own W_Q, W_K and W_V: what a cached step computes anew."""
    steps, zero = toy_prefill(), torch.zeros(2, dtype=torch.float64)
    E = torch.tensor([TOY_NEXT_E], dtype=torch.float64)  # [1, C]
    return head_steps([TOY_NEXT], E, steps.WQ, zero, steps.WK, zero, steps.WV, zero)


def toy_cached_step():  # -> tokens, q [1, hs], K [5, hs], V [5, hs]: the prefill's K and V kept, one row added
    steps, new = toy_prefill(), toy_next()
    return [*steps.tokens, TOY_NEXT], new.Q, torch.cat([steps.K, new.K]), torch.cat([steps.V, new.V])


def _num(x, digits):  # one number as the toy prints it: whole numbers bare, -inf as −∞
    x = float(x)
    return "−∞" if x == float("-inf") else f"{x:.{digits}f}" if digits else f"{x:.0f}"


def _shape(m):
    return f"[{m.shape[0]} × {m.shape[1]}]"


def _block(title, m, rows, cols, digits):  # -> lines: a title, column labels if any, one labelled line per row
    cells = [[_num(x, digits) for x in row] for row in m.tolist()]
    heads = cols or [""] * m.shape[1]
    width = max(len(c) for c in [*heads, *(c for row in cells for c in row)])
    label = max(len(r) for r in rows)
    lines = [title]
    if cols:
        lines.append(" " * label + " " + " ".join(h.rjust(width) for h in heads))
    lines += [r.rjust(label) + " " + " ".join(c.rjust(width) for c in row) for r, row in zip(rows, cells)]
    return lines


def show(steps, *names, gap=5):  # toy HeadSteps, part names -> text: the parts side by side, titled with their shapes
    """Parts: E, WQ, WK, WV, Q, K, V, KT (K turned on its side), scores, masked, weights, out."""
    t = [repr(x) for x in steps.tokens]
    dims = [f"#{j + 1}" for j in range(steps.WQ.shape[1])]  # a head's numbers, where Kᵀ has them as rows
    weight = lambda W, p: (f"W_{p} {_shape(W)}", W, [""] * W.shape[0], None, 0)
    made = lambda p: (f"{p} = E·W_{p} {_shape(steps.Q)}", getattr(steps, p), t, None, 0)
    hs = steps.Q.shape[1]
    parts = {
        "E": (f"E {_shape(steps.E)}", steps.E, t, None, 0),
        "WQ": weight(steps.WQ, "Q"), "WK": weight(steps.WK, "K"), "WV": weight(steps.WV, "V"),
        "Q": made("Q"), "K": made("K"), "V": made("V"),
        "KT": (f"Kᵀ {_shape(steps.K.T)}", steps.K.T, dims, t, 0),
        "scores": (f"scores = Q·Kᵀ / √{hs} {_shape(steps.scores)}", steps.scores, t, t, 2),
        "masked": (i18n.t("toy.masked"), steps.masked, t, t, 2),
        "weights": (i18n.t("toy.weights"), steps.weights, t, t, 2),
        "out": (f"out = weights·V {_shape(steps.out)}", steps.out, t, None, 2),
    }
    unknown = [n for n in names if n not in parts]
    if unknown or not names:
        raise KVLibError(f"show takes parts among {', '.join(parts)}; got {names!r}")
    blocks = [_block(*parts[n]) for n in names]
    height, widths = max(map(len, blocks)), [max(map(len, b)) for b in blocks]
    lines = [(" " * gap).join(b[i].ljust(w) if i < len(b) else " " * w for b, w in zip(blocks, widths)).rstrip()
             for i in range(height)]
    return "\n".join(lines)


def worked(A, B, i, j, digits=0):  # -> "a×b + c×d + ... = x": entry (i, j) of A·B, every product written out
    """A's numbers are written to `digits` decimals, and the total is the sum of the products as written, so a
    pencil that redoes it lands on it (entry (i, j) of A·B itself may differ in its last digit)."""
    a, b = [round(x, digits) for x in A[i].tolist()], B[:, j].tolist()
    factor = lambda x, d: f"({_num(x, d)})" if x < 0 else _num(x, d)
    total = sum(x * y for x, y in zip(a, b))
    return " + ".join(f"{factor(x, digits)}×{factor(y, 0)}" for x, y in zip(a, b)) + f" = {_num(total, 2 if digits else 0)}"


def top_next(model, text, k=5, trace=None):  # -> [Guess(token text, probability)] for the token after `text`
    """What the model really predicts next, best first (fills `trace` when one is passed)."""
    probs = torch.softmax(model.forward(model.check_ids(text), trace=trace, last_only=True)[-1].float(), dim=-1)
    top = probs.topk(k)
    return [Guess(model.decode([i]), p) for i, p in zip(top.indices.tolist(), top.values.tolist())]


def most_attended(row, tokens):  # one query's weights [S], S token texts -> Attended
    j = int(row.argmax())
    return Attended(j, tokens[j], row[j].item())


def word_or_place(before, after):  # two (trace, tokens) runs -> {kind: [(layer, head)]}
    """Does each head's last token follow a word, or a place? Feed two texts that end alike, the second
    with words put in between, and compare where each head's last row puts its largest weight:
    "word": the same word, now at another distance back; "place": the same distance back, another word;
    "both": the same word at the same distance (these texts cannot tell); "first": the first token in
    both (an attention sink, below); "neither": anything else."""
    (trace_a, tokens_a), (trace_b, tokens_b) = before, after
    kinds = {kind: [] for kind in ("word", "place", "both", "first", "neither")}
    for layer, (a, b) in enumerate(zip(trace_a.layers, trace_b.layers)):
        for head in range(a.weights.shape[0]):
            ja, jb = int(a.weights[head, -1].argmax()), int(b.weights[head, -1].argmax())
            same_word = tokens_a[ja] == tokens_b[jb]
            same_place = len(tokens_a) - ja == len(tokens_b) - jb  # as many tokens back from the last
            kind = ("first" if ja == jb == 0 else "both" if same_word and same_place else
                    "word" if same_word else "place" if same_place else "neither")
            kinds[kind].append((layer, head))
    return kinds


class HeadPick(NamedTuple):  # one head, and the weight its last token puts on a position
    layer: int
    head: int
    weight: float


def hardest_look(trace, position):  # -> HeadPick: the head whose last token weighs `position` most, every layer
    """Which head's last row puts the most weight on the token at `position` (e.g. the word it must copy)?"""
    w = torch.stack([layer.weights[:, -1, position] for layer in trace.layers])  # [L, nh]
    layer, head = divmod(int(w.argmax()), w.shape[1])
    return HeadPick(layer, head, w[layer, head].item())


def average_last_row(model, text):  # -> (tokens as text, [T]: the last token's weights, averaged over every head)
    """Where the last token's weight goes, over every layer and head of the model at once."""
    ids, trace = model.check_ids(text), Trace()
    model.forward(ids, trace=trace)
    row = torch.stack([layer.weights[:, -1].float().mean(0) for layer in trace.layers]).mean(0)  # [L, T] -> [T]
    return [model.decode([i]) for i in ids.tolist()], row


def first_token_share(trace):  # -> [L, nh]: the mean weight each head gives the first token
    """Averaged over the queries after the first (the first token can only look at itself)."""
    return torch.stack([layer.weights[:, 1:, 0].mean(-1) for layer in trace.layers])


def even_first_share(n_tokens):  # what first_token_share would be if every query spread its weight evenly
    return sum(1 / (i + 1) for i in range(1, n_tokens)) / (n_tokens - 1)


def kv_groups(model, layer):  # -> [[query heads]] per K/V head, found by comparing the weights themselves
    """The query heads that read the very same key weights WK: one group per K/V head."""
    wk = [head_weights(model, layer, h).WK for h in range(model.config.n_head)]
    groups = {}  # the group's first head -> its heads
    for h, w in enumerate(wk):
        first = next((g for g in groups if torch.equal(wk[g], w)), h)
        groups.setdefault(first, []).append(h)
    return list(groups.values())


def worked_softmax(row, tokens, j):  # one row of masked scores -> "e^a + e^b ... = total; 'tok': e^x / total = w"
    exps = [math.exp(x) for x in row.tolist()]
    total = sum(exps)
    shown = [f"e^{_num(x, 2)}" for x in row.tolist()]
    return (" + ".join(shown) + " = " + " + ".join(_num(e, 2) for e in exps) + f" = {_num(total, 2)}; "
            + i18n.t("toy.gets", token=repr(tokens[j]), part=_num(exps[j], 2), total=_num(total, 2),
                     weight=_num(exps[j] / total, 2)))
