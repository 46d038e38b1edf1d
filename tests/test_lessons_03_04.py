"""What notebooks 3 and 4 add to kvlib: similarity, separation by dimensions, model widths, the
next-token top-k, the most attended token, the first token's share (attention sinks) and the new
plots (the attention explorer: test_views_attention.py)."""

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

import kvlib
from kvlib.lessons import attention, embeddings, memory
from kvlib.ui import plots
from test_views_maps import pca_by_hand, separation_by_hand


def test_similarity_is_the_cosine_of_the_two_rows(tiny):
    assert embeddings.similarity(tiny, "king", "king") == pytest.approx(1.0)
    rows = embeddings.table(tiny)[[tiny.encode(" king")[0], tiny.encode(" queen")[0]]]
    assert embeddings.similarity(tiny, "king", "queen") == pytest.approx(
        torch.cosine_similarity(rows[0], rows[1], dim=0).item(), abs=1e-6)
    with pytest.raises(kvlib.KVLibError, match="type a word"):
        embeddings.similarity(tiny, " ", "queen")


def test_separation_by_dims_matches_the_projection(tiny, hf_tiny):
    scores = embeddings.separation_by_dims(tiny, max_dims=4)
    fams = embeddings.word_families(tiny)
    ids, labels = [i for f in fams.values() for _, i in f], [name for name, f in fams.items() for _ in f]
    coords = pca_by_hand(hf_tiny[0].get_input_embeddings().weight.detach()[ids].numpy(), 4)  # transformers' rows
    assert len(ids) == 40 and scores == [separation_by_hand(coords[:, :d], labels) for d in (1, 2, 3, 4)]


def test_a_trained_model_separates_families_better_than_a_random_one(tiny, random_gpt2):
    scores = embeddings.separation_by_dims(tiny, max_dims=3)
    assert scores[2] > max(embeddings.separation_by_dims(random_gpt2, max_dims=3)) + 0.3
    assert embeddings.dims_to_reach([0.2, 0.5, 0.9], 0.5) == 2
    assert embeddings.dims_to_reach([0.2, 0.5], 0.95) is None


def test_per_family_separation_hand_made_points():
    # on a line: a, a at 0 and 0.1; b, b at 5 and 5.2; one c at 0.05 among the a's and one c at 9
    coords = torch.tensor([[0.0], [0.1], [5.0], [5.2], [0.05], [9.0]])
    labels = ["a", "a", "b", "b", "c", "c"]
    # left-out centres: the c at 0.05 sees c's centre at 9 and a's at 0.05: it is taken for an a;
    # the c at 9 sees c's centre at 0.05 and b's at 5.1: taken for a b
    assert embeddings.nearest_families(coords, labels) == ["a", "a", "b", "b", "a", "b"]
    assert embeddings.separation_per_family(coords, labels) == {"a": 1.0, "b": 1.0, "c": 0.0}
    assert embeddings.separation(coords, labels) == pytest.approx(4 / 6)


def test_position_rows_by_distance(tiny, random_gpt2, small_llama):
    sims = embeddings.similarity_by_distance(tiny)
    wpe = tiny.params["wpe.weight"]
    assert sims.shape == (wpe.shape[0] - 1,)
    for d in (1, 37, 400):  # the mean over every pair d apart, one pair at a time
        pairs = [torch.cosine_similarity(wpe[i], wpe[i + d], dim=0) for i in range(wpe.shape[0] - d)]
        assert sims[d - 1].item() == pytest.approx(torch.stack(pairs).mean().item(), abs=1e-5)
    assert sims[0] > sims[-1] + 0.05                     # trained: neighbours more alike than far positions
    assert torch.equal(embeddings.rows_by_distance(wpe), sims)  # any table's rows: notebook 3 sets random ones beside
    noise = embeddings.rows_by_distance(torch.randn(wpe.shape, generator=torch.Generator().manual_seed(0)))
    assert noise.shape == sims.shape and noise[:256].abs().max() < 0.02
    # noise: about 0 wherever many pairs are averaged (the last distances have only a few pairs each)
    assert embeddings.similarity_by_distance(random_gpt2)[:512].abs().max() < 0.02
    with pytest.raises(kvlib.KVLibError, match="no position table"):
        embeddings.similarity_by_distance(small_llama)


@torch.no_grad()
def test_two_orders_follow_a_word_into_layer_0_as_each_family_gives_position(tiny, hf_tiny, small_llama,
                                                                            hf_small_llama):
    """The same tokens in two orders: the next-token odds and what enters layer 0 are transformers' own; GPT-2
    enters ' king' as two vectors (another position row), a RoPE model as one, whose key it turns (same length)."""
    texts = ("The king is dead, long live the", "The dead is king, long live the")
    for model, hf, rope in ((tiny, hf_tiny[0], False), (small_llama, hf_small_llama, True)):
        o = embeddings.two_orders(model, texts, "king")
        assert o.places == (1, 3)
        for text, place, entering, probs in zip(texts, o.places, o.entering, o.probs):
            out = hf(torch.tensor([model.encode(text)]), output_hidden_states=True)
            assert torch.allclose(entering, out.hidden_states[0][0, place], atol=1e-5)  # what layer 0 reads
            assert torch.allclose(probs, torch.softmax(out.logits[0, -1], -1), atol=1e-5)
        assert o.moved == pytest.approx((o.probs[0] - o.probs[1]).abs().sum().item() / 2) and o.moved > 0
        assert torch.equal(*o.entering) is rope
        a, b = o.keys.norm(dim=1)
        assert bool(abs(a - b) < 1e-4 * a) is rope and torch.cosine_similarity(*o.keys, dim=0) < 0.999
    with pytest.raises(kvlib.KVLibError, match="not the same tokens"):
        embeddings.two_orders(tiny, ("The king is dead", "The queen is dead"), "king")


@torch.no_grad()
def test_a_model_knows_a_token_only_by_its_row(tiny, small_llama):
    """Given queen's row, ' king' is read as ' queen' (GPT-2's position table, and RoPE): the swapped model's
    logits on 'The king...' are the trained model's on 'The queen...', bit for bit, though the trained model
    tells the two texts apart; the model's own table is left as it was."""
    text, queen_text = "The king is dead, long live the", "The queen is dead, long live the"
    for model in (tiny, small_llama):
        before = embeddings.table(model).clone()
        king, queen = embeddings.whole_token(model, "king"), embeddings.whole_token(model, " queen ")
        swapped = embeddings.with_row(model, king, before[queen])
        assert torch.equal(swapped.forward(model.encode(text)), model.forward(model.encode(queen_text)))
        assert all(swapped.params[k] is v for k, v in model.params.items() if k != model.family.token_table)
        swap = embeddings.known_by_row(model, text, "king", "queen")
        assert swap.texts == (text, queen_text)
        assert swap.swapped == 0 and swap.top_swapped[0] == swap.top_swapped[1]
        assert swap.trained == (model.forward(model.encode(text)) - model.forward(model.encode(queen_text))
                                ).abs().max().item() > 0
        assert torch.equal(embeddings.table(model), before)
        nudged = embeddings.with_row(model, king, before[queen] + 1e-3)   # not quite queen's row: read otherwise
        assert not torch.equal(nudged.forward(model.encode(text)), model.forward(model.encode(queen_text)))


def test_a_word_of_several_tokens_has_no_row_to_swap(tiny):
    assert len(tiny.encode(" Rosencrantz")) == 4
    with pytest.raises(kvlib.KVLibError, match="' Rosencrantz' is 4 tokens for tiny .* keeps whole"):
        embeddings.known_by_row(tiny, "The king is dead, long live the", "king", "Rosencrantz")
    with pytest.raises(kvlib.KVLibError, match="' queen' is not a token of 'The king is dead'"):
        embeddings.known_by_row(tiny, "The king is dead", "queen", "king")
    assert embeddings.stand_in(tiny, "king") == "queen"
    assert len(tiny.encode(" Juliet")) == 2 and embeddings.stand_in(tiny, "Romeo") == "Hamlet"  # Juliet: 2 tokens
    with pytest.raises(kvlib.KVLibError, match="no other word of 'dragon'"):
        embeddings.stand_in(tiny, "dragon")


def test_widths_put_loaded_models_before_published_ones(tiny, random_gpt2):
    dims = embeddings.widths([tiny, random_gpt2])
    assert list(dims)[:2] == ["tiny", "random-gpt2"] and dims["tiny"] == 256
    assert dims["random-gpt2"] == dims["GPT-2 small (2019)"] == 768
    assert dims["Llama-3-70B (2024)"] == 8192
    widest = max(dims, key=dims.get)  # the essay's point: real models' tokens are thousands of numbers wide
    assert widest == "Llama-3.1-405B (2024)" and dims[widest] == memory.CATALOGUE["Llama-3.1-405B"].hidden > 10_000


def test_top_next_gives_the_models_probabilities_and_fills_a_trace(tiny):
    trace = kvlib.Trace()
    top = attention.top_next(tiny, "To be, or not", k=3, trace=trace)
    probs = torch.softmax(tiny.forward(tiny.encode("To be, or not"))[-1], -1)
    assert [p for _, p in top] == pytest.approx(probs.topk(3).values.tolist(), abs=1e-6)
    assert top[0][0] == tiny.decode([int(probs.argmax())])
    assert len(trace.layers) == tiny.config.n_layer


def test_most_attended_and_the_first_tokens_share(tiny):
    trace = kvlib.Trace()
    tiny.forward(tiny.encode("Mary had a little lamb"), trace=trace)
    row = trace.layers[1].weights[2, -1]
    tokens = [tiny.decode([i]) for i in tiny.encode("Mary had a little lamb")]
    j, tok, w = attention.most_attended(row, tokens)
    assert w == row.max().item() and tok == tokens[j]
    share = attention.first_token_share(trace)
    assert share.shape == (tiny.config.n_layer, tiny.config.n_head)
    assert share[1, 2] == pytest.approx(trace.layers[1].weights[2, 1:, 0].mean().item())
    assert attention.even_first_share(2) == 0.5
    assert attention.even_first_share(3) == pytest.approx((1 / 2 + 1 / 3) / 2)


def test_smollm2_parks_attention_on_the_first_token(smollm2):
    text = "Mary had a little lamb, its fleece was white as snow"
    trace = kvlib.Trace()
    smollm2.forward(smollm2.encode(text), trace=trace)
    assert attention.first_token_share(trace).mean() > 2 * attention.even_first_share(len(smollm2.encode(text)))


def test_average_last_row_is_the_last_tokens_weights_over_every_head(tiny):
    text = "The king is dead, long live the"
    tokens, row = attention.average_last_row(tiny, text)
    trace = kvlib.Trace()
    tiny.forward(tiny.encode(text), trace=trace)
    by_hand = sum(layer.weights[h, -1] for layer in trace.layers for h in range(tiny.config.n_head))
    assert tokens == [tiny.decode([i]) for i in tiny.encode(text)]
    assert row.tolist() == pytest.approx((by_hand / (tiny.config.n_layer * tiny.config.n_head)).tolist(), abs=1e-6)
    assert row.sum().item() == pytest.approx(1, abs=1e-5)


def test_smollm2s_last_row_goes_to_whatever_comes_first(smollm2):
    """Notebook 4's check of the essay's reading: the first token takes the most of the last row, a bare comma as
    much as 'Mary', which keeps little once it is second; ' king' is not first in the running example."""
    (tokens, king), (_, mary), (_, comma) = (attention.average_last_row(smollm2, text) for text in
                                             ("The king is dead, long live the", "Mary had a little", ", Mary had a little"))
    assert all(int(row.argmax()) == 0 and row[0] > 0.5 for row in (king, mary, comma))
    assert comma[1] < mary[0] / 4 and int(king.argmax()) != tokens.index(" king")


def test_separation_curves_draw_each_models_scores_against_chance():
    ax = plots.separation_curves({"tiny": [0.2, 0.5, 0.9], "random": [0.1, 0.2]}, 0.25, "families").axes[0]
    tiny, random, chance = ax.get_lines()
    assert (list(tiny.get_xdata()), list(tiny.get_ydata())) == ([1, 2, 3], [0.2, 0.5, 0.9])  # 1D, 2D, 3D
    assert (list(random.get_xdata()), list(random.get_ydata())) == ([1, 2], [0.1, 0.2])
    assert list(chance.get_ydata()) == [0.25, 0.25]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["tiny", "random", "chance (25%)"]
    assert ax.get_title() == "families" and ax.get_xlabel() == "dimensions kept (PCA)"
    for bad in ({}, {"tiny": []}):
        with pytest.raises(ValueError, match="at least one score each"):
            plots.separation_curves(bad, 0.25, "families")


def test_widths_draw_a_bar_per_model_with_its_number():
    ax = plots.widths({"a": 256, "b": 8192}, "t").axes[0]
    assert [bar.get_width() for bar in ax.patches] == [256, 8192]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.texts] == [" 256", " 8,192"] and ax.get_title() == "t"
    for bad in ({}, {"a": "256"}):
        with pytest.raises(ValueError, match="whole numbers, at least one"):
            plots.widths(bad, "t")


def test_kv_groups_find_the_shared_key_weights(small_llama, tiny):
    assert attention.kv_groups(small_llama, 1) == [[0, 1], [2, 3]]  # 4 query heads, 2 K/V heads
    assert attention.kv_groups(tiny, 0) == [[h] for h in range(tiny.config.n_head)]  # GPT-2: one K per head


class _Layer:  # what word_or_place reads of a trace's layer: weights [heads, T, T]
    def __init__(self, last_rows):
        T = len(last_rows[0])
        self.weights = torch.zeros(len(last_rows), T, T)
        self.weights[:, -1] = torch.tensor(last_rows)


class _Trace:
    def __init__(self, *layers):
        self.layers = [_Layer(rows) for rows in layers]


def test_word_or_place_sorts_heads_by_where_the_last_token_looks():
    before = ["Mary", " had", " a", " little"]
    after = ["Mary", " had", ",", " as", " you", " know", ",", " a", " little"]
    one_hot = lambda j, n: [float(i == j) for i in range(n)]
    rows_a = [one_hot(1, 4), one_hot(1, 4), one_hot(2, 4), one_hot(0, 4), one_hot(1, 4)]
    rows_b = [one_hot(1, 9), one_hot(6, 9), one_hot(7, 9), one_hot(0, 9), one_hot(3, 9)]
    # head 0 follows ' had' from 3 back to 8 back; head 1 stays 3 back and lands on ','; head 2 stays on
    # ' a' just before the last (same word, same place); head 3 sits on the first token; head 4 neither
    kinds = attention.word_or_place((_Trace(rows_a), before), (_Trace(rows_b), after))
    assert kinds == {"word": [(0, 0)], "place": [(0, 1)], "both": [(0, 2)], "first": [(0, 3)], "neither": [(0, 4)]}


def test_hardest_look_finds_the_head_whose_last_token_weighs_a_position_most():
    # layer 0: heads give position 1 weights 0.5 and 0.7; layer 1: 0.8 and 0.1
    trace = _Trace([[0.5, 0.5, 0.0], [0.2, 0.7, 0.1]], [[0.1, 0.8, 0.1], [0.9, 0.1, 0.0]])
    assert attention.hardest_look(trace, 1) == (1, 0, pytest.approx(0.8))
    assert attention.hardest_look(trace, 0)[:2] == (1, 1)


def test_some_smollm2_heads_follow_king_when_words_come_between(smollm2):
    runs = []
    for text in ("The king is dead, long live the", "The king, as you may know, is dead, long live the"):
        trace = kvlib.Trace()
        smollm2.forward(smollm2.encode(text), trace=trace)
        runs.append((trace, [smollm2.decode([i]) for i in smollm2.encode(text)]))
    kinds = attention.word_or_place(*runs)
    assert sum(map(len, kinds.values())) == smollm2.config.n_layer * smollm2.config.n_head
    assert (23, 0) in kinds["word"] and len(kinds["first"]) > len(kinds["word"])  # the head looking hardest at ' king'


def test_leads_name_only_gaps_of_more_than_one_word():
    """Notebook 3's default model against SmolLM2, on the curves measured for tiny and SmolLM2 (40 words): a lead
    of one word either way is level."""
    tiny = [0.7, 0.8, 0.875, 0.925, 0.925, 0.95, 0.95, 0.95, 0.95, 0.95]
    smollm2 = [0.425, 0.575, 0.725, 0.9, 0.95, 0.925, 0.95, 0.95, 0.95, 0.95]
    assert embeddings.leads(tiny, smollm2, 40) == {"ahead": [1, 2, 3], "level": [4, 5, 6, 7, 8, 9, 10], "behind": []}
    assert embeddings.leads(smollm2, tiny, 40)["behind"] == [1, 2, 3]
    assert embeddings.leads([0.5, 0.5], [0.55, 0.45], 40) == {"ahead": [2], "level": [], "behind": [1]}
    assert embeddings.spans([4, 5, 6, 7, 8, 9, 10]) == "4–10" and embeddings.spans([1, 3, 5, 6]) == "1, 3, 5–6"
    assert embeddings.spans([]) == ""
