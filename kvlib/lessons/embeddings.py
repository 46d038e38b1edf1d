"""Embeddings: each token id picks a row of a table, a point in n_embd dimensions.

Projections to 1, 2 and 3 dimensions (PCA) show families of tokens (numbers, kin,
names...) that overlap on a line and come apart as dimensions are added;
`separation` counts it. The position embedding is a second table added in, so the
same token at two positions enters the model as two different points; a RoPE model
adds none, and turns each key by its position inside attention instead (`two_orders`).
`known_by_row` tests that the model knows a token by its row alone: given another word's row, it reads
the token as that word.

Widths of models kvlib does not load come from memory.CATALOGUE, where each carries its source.
"""

from dataclasses import dataclass

import torch

from ..model.models import KVLibError, Model
from ..model.trace import Trace
from . import memory

# candidate families of words (models.FAMILIES are families of models); each model keeps the words that are
# one token in its own vocabulary
WORD_FAMILIES = {
    "number words": "one two three four five six seven eight nine ten twenty hundred thousand",
    "kin and rank": "king queen lord lady duke prince father mother brother sister son daughter wife husband",
    "names": "Romeo Juliet Hamlet Caesar Brutus Richard Henry John Edward Antonio",
    "body": "hand eye head heart face blood tongue arm",
    "verbs": "go come speak say give take make tell know see hear",
}


def word_families(model, per_family=8, min_size=4):  # -> {family: [(word, id)]}
    """Words of each family that the model's tokenizer keeps whole (with GPT-2's leading space)."""
    out = {}
    for family, words in WORD_FAMILIES.items():
        whole = [(w, ids[0]) for w in words.split() if len(ids := model.encode(" " + w)) == 1]
        if len(whole) >= min_size:
            out[family] = whole[:per_family]
    return out


def table(model):  # the token embedding table [V, C]
    return model.params[model.family.token_table]


def lookup(model, ids):  # list[int] -> [T, C]
    return table(model)[torch.as_tensor(ids, device=model.device)]


def whole_token(model, word):  # -> the one token id of " word"
    ids = model.encode(" " + word.strip())
    if len(ids) != 1:
        raise KVLibError(f"{' ' + word.strip()!r} is {len(ids)} tokens for {model.name} ({ids}), so no one row "
                         f"stands for it: pick a word its tokenizer keeps whole")
    return ids[0]


def stand_in(model, word):  # -> the first other word of `word`'s family in WORD_FAMILIES that is one token
    family = next((words.split() for words in WORD_FAMILIES.values() if word in words.split()), [])
    whole = [w for w in family if w != word and len(model.encode(" " + w)) == 1]
    if not whole:
        raise KVLibError(f"no other word of {word!r}'s family is one token for {model.name}: name one")
    return whole[0]


def with_row(model, token, row):  # -> a copy of the model whose table holds `row` at `token`'s place
    """The model itself is left as it is (its weights may be a file every process maps): only the table is
    copied; every other weight is shared."""
    swapped = table(model).clone()
    swapped[token] = row
    return Model(model.name, {**model.params, model.family.token_table: swapped}, model.config, model.tokenizer,
                 model.device)


@dataclass
class RowSwap:
    """A text and the same tokens with one word's id changed to another's, both read as trained and swapped."""
    texts: tuple          # the text, and it with the other word for the word
    trained: float        # the largest |difference| between the two texts' logits, at every position, as trained
    swapped: float        # the same, the other word's row put in the word's place in the table
    top_trained: tuple    # the next-token guess after each text, as trained
    top_swapped: tuple    # the same, swapped


def known_by_row(model, text, word, other):
    """Reads `text` and the same tokens with `other` for `word` through the model, then through a copy whose
    table holds `other`'s row in `word`'s place. A model that knows a token only by its row gives the two texts
    the same logits, bit for bit, in the copy, while the model as trained tells them apart.

    GPT-2 and SmolLM2 tie their output head to this table, but kvlib keeps the head as its own copy, so the
    swap changes what enters, not the head. Had it changed the head too, the test would hold: each time both
    texts are read by one and the same model, never one text by each."""
    token, stand = whole_token(model, word), whole_token(model, other)
    ids = model.encode(text)
    if token not in ids:
        raise KVLibError(f"{' ' + word.strip()!r} is not a token of {text!r}")
    pair = [ids, [stand if i == token else i for i in ids]]  # the same tokens, the word's id changed
    swapped = with_row(model, token, table(model)[stand])
    gaps, tops = [], []
    for m in (model, swapped):
        a, b = (m.forward(x) for x in pair)  # [T, V] each
        gaps.append((a - b).abs().max().item())
        tops.append(tuple(model.decode([int(logits[-1].argmax())]) for logits in (a, b)))
    return RowSwap((text, model.decode(pair[1])), *gaps, *tops)


def pca(x, dims):  # [N, C] -> [N, dims]
    if not 1 <= dims <= min(x.shape):
        raise KVLibError(f"can project {x.shape[0]} points to 1..{min(x.shape)} dimensions, not {dims}")
    centred = x - x.mean(0)
    _, _, v = torch.linalg.svd(centred.float(), full_matrices=False)
    return centred.float() @ v[:dims].T


def project(model, fams, dims):  # -> coords [N, dims], words, family labels
    words = [w for f in fams.values() for w, _ in f]
    labels = [name for name, f in fams.items() for _ in f]
    ids = [i for f in fams.values() for _, i in f]
    return pca(lookup(model, ids).cpu(), dims), words, labels


def nearest_families(coords, labels):  # -> for each point, the family whose centre is nearest to it
    """Each centre is computed without the point itself, so a word cannot vote for its own family."""
    labels = list(labels)
    nearest = []
    for i in range(len(labels)):
        keep = [j for j in range(len(labels)) if j != i]
        centres = {f: coords[[j for j in keep if labels[j] == f]].mean(0) for f in dict.fromkeys(labels)}
        nearest.append(min(centres, key=lambda f: torch.dist(coords[i], centres[f]).item()))
    return nearest


def separation(coords, labels):
    """Share of points whose nearest family centre (left out of it) is their own family."""
    return sum(n == f for n, f in zip(nearest_families(coords, labels), labels)) / len(labels)


def separation_per_family(coords, labels):  # -> {family: share of its words nearest their own centre}
    nearest, labels = nearest_families(coords, labels), list(labels)
    return {f: sum(n == f for n, l in zip(nearest, labels) if l == f) / labels.count(f) for f in dict.fromkeys(labels)}


def separation_by_dims(model, max_dims=10):  # -> [separation in 1D, 2D, ..., max_dims D]
    fams = word_families(model)
    scores = []
    for dims in range(1, max_dims + 1):
        coords, _, labels = project(model, fams, dims)
        scores.append(separation(coords, labels))
    return scores


def leads(scores, others, words):
    """Two separation curves over the same `words` words -> {"ahead": dims, "level": dims, "behind": dims}: the
    numbers of dimensions kept where the first sorts more than one word more than the other, within one word
    of it, or more than one word fewer. One word either way is a single word landing nearer another centre."""
    out = {"ahead": [], "level": [], "behind": []}
    for dims, (a, b) in enumerate(zip(scores, others), 1):
        more = round((a - b) * words)  # words sorted to their own family, more than the other curve
        out["level" if abs(more) <= 1 else "ahead" if more > 0 else "behind"].append(dims)
    return out


def spans(numbers):  # [1, 2, 3, 5, 7, 8] -> "1–3, 5, 7–8"
    runs = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def dims_to_reach(scores, level):  # -> the fewest dimensions whose separation reaches `level` (None: never)
    return next((d for d, s in enumerate(scores, 1) if s >= level), None)


def token_of(model, word):  # -> the token id that stands for `word`
    if not word.strip():
        raise KVLibError("type a word: an empty text has no token to look up")
    word = word.strip()  # a stray space or tab typed around it would be looked up as a token of its own
    spaced = model.encode(" " + word)
    return spaced[0] if len(spaced) == 1 else model.encode(word)[0]


def similarity(model, a, b):  # -> cosine similarity of two words' embedding rows, in [-1, 1]
    """1: the rows point the same way; 0: at right angles (unrelated); -1: opposite."""
    rows = table(model)[[token_of(model, a), token_of(model, b)]].float()
    return torch.nn.functional.cosine_similarity(rows[0], rows[1], dim=0).item()


def neighbours(model, word, k=8):  # -> [(token text, cosine similarity)]
    """The k tokens whose embedding rows point most nearly the same way as `word`'s.

    A word inside a sentence carries its leading space (" king", not "king"), so
    that is the token looked up when the tokenizer keeps it whole."""
    token = token_of(model, word)
    emb = table(model).float()
    sims = torch.nn.functional.cosine_similarity(emb[token][None], emb, dim=-1)
    top = sims.topk(k + 1).indices.tolist()
    return [(model.decode([i]), round(sims[i].item(), 3)) for i in top if i != token][:k]


# published widths (n_embd) of models kvlib does not load, labelled with the year of their source; the widest,
# Llama-3.1-405B, gives each token 16,384 numbers: real models' tokens are thousands of numbers wide
PUBLISHED_WIDTHS = {f"{a.name} ({a.date[:4]})": a.hidden
                    for a in map(memory.CATALOGUE.get, ("GPT-2 small", "GPT-2 XL", "Llama-3-8B", "Llama-3-70B",
                                                        "Llama-3.1-405B"))}


def widths(models):  # -> {name: dims}: the loaded models' own n_embd, then the published ones
    return {**{m.name: m.config.n_embd for m in models}, **PUBLISHED_WIDTHS}


def position_table(model):  # GPT-2's learned position rows [n_ctx, C]
    if model.family.rope:
        raise KVLibError(f"{model.name} adds no position table: a {model.config.arch}-family model gives position "
                         f"inside attention (notebook 4) instead, turning numbers there by angles set by each "
                         f"token's position (rotary embeddings, RoPE). Load a GPT-2 model (such as 'tiny') to see "
                         f"positions added in.")
    return model.params[model.family.position_table]


def similarity_by_distance(model):  # -> [n_ctx - 1]: mean cosine similarity of position rows d = 1, 2, ... apart
    return rows_by_distance(position_table(model))


def rows_by_distance(rows):  # [n, C] -> [n - 1]: mean cosine similarity of any table's rows d = 1, 2, ... apart
    """For a table of random numbers it stays near 0 at every distance: no row is like another."""
    unit = torch.nn.functional.normalize(rows.float(), dim=-1)
    similarity = unit @ unit.T  # [n, n]
    return torch.stack([similarity.diagonal(d).mean() for d in range(1, len(unit))]).cpu()


def with_position(model, token_id, positions):  # -> [len(positions), C]
    """What enters layer 0: the token's row plus each position's row (GPT-2's way of giving position)."""
    wpe = position_table(model)
    if max(positions) >= wpe.shape[0]:
        raise KVLibError(f"positions go up to {wpe.shape[0] - 1} for {model.name}")
    return table(model)[token_id][None] + wpe[list(positions)]


@dataclass
class TwoOrders:
    """The same tokens in two orders, and one word of them at its place in each."""
    texts: tuple              # the two orders
    probs: torch.Tensor       # [2, V]: each order's next-token probabilities
    places: tuple             # the word's position in each
    entering: torch.Tensor    # [2, C]: what layer 0 takes in for the word at each place
    keys: torch.Tensor        # [2, nkv * hs]: the word's keys in layer 0, all K/V heads

    @property
    def moved(self):  # the share of the probability that sits on other tokens in the second order (total variation)
        return (self.probs[0] - self.probs[1]).abs().sum().item() / 2


def two_orders(model, texts, word):
    """Next-token odds after each order, and `word`'s input and layer-0 keys at its place in each. GPT-2
    adds a position row to what enters; a RoPE model enters the token row alone and turns the keys."""
    ids = [model.encode(text) for text in texts]
    if sorted(ids[0]) != sorted(ids[1]):
        raise KVLibError(f"{texts[0]!r} and {texts[1]!r} are not the same tokens in another order")
    token = token_of(model, word)
    places, probs, entering, keys = [], [], [], []
    for order in ids:
        place = order.index(token)
        trace = Trace()
        probs.append(torch.softmax(model.forward(order, trace=trace)[-1].float(), -1))
        row = table(model)[token]
        entering.append(row if model.family.rope else row + position_table(model)[place])
        keys.append(trace.layers[0].k[:, place].flatten())   # [nkv, T, hs] -> the word's, every K/V head
        places.append(place)
    return TwoOrders(tuple(texts), torch.stack(probs).cpu(), tuple(places), torch.stack(entering).float().cpu(),
                     torch.stack(keys).float().cpu())
