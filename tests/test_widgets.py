"""The notebook apps, driven headless: set values, click, and check what they produced."""

import ast
import html
import re

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from conftest import hf_greedy
from kvlib.lessons import embeddings, tokenization
from kvlib.ui import plots, views, widgets
from test_views_maps import pca_by_hand, same_up_to_sign, separation_by_hand


def test_chat_streams_the_same_tokens_as_transformers_greedy(tiny, hf_tiny):
    chat = widgets.Chat(tiny, prompt="ROMEO.\n", max_new_tokens=15)
    chat.send.click()
    chat.wait(60)
    model, tok = hf_tiny
    ids = hf_greedy(model, tok.encode("ROMEO.\n"), 15)  # transformers' own tokenizer and decoding
    text = tok.decode(ids)
    assert chat.last.ids == ids and len(ids) == 15
    assert text.replace("\n", "") in chat.answer.value.replace("\n", "")
    assert "15 tokens" in chat.status.value and not chat.send.disabled


def test_chat_never_shows_half_a_character(tiny, monkeypatch):
    from test_generate import PARROT, answering

    ids = answering(tiny, monkeypatch, PARROT)
    chat = widgets.Chat(tiny, prompt="x", max_new_tokens=len(ids))
    shown = []
    chat.answer.observe(lambda change: shown.append(change.new), names="value")
    chat.send.click()
    chat.wait(60)
    answers = [re.search(r"<b style='[^']*'>(.*)</b>", s, re.S)[1] for s in shown]  # the answer part of each
    # a value per token that changed it (a token inside a character changes nothing), then the end, no cursor
    assert answers == ["a", "a ", "a 鹦", "a 鹦鹉", "a 鹦鹉 ", "a 鹦鹉 🦜", PARROT, PARROT]
    assert shown[-2].endswith("▌</pre>") and shown[-1].endswith("</b></pre>")


def test_chat_stop_button_ends_generation(tiny):
    chat = widgets.Chat(tiny, max_new_tokens=400)
    chat.send.click()
    running = chat._thread
    chat.send.click()  # a second click while it runs (before the button greys out, in a browser) starts nothing
    assert chat._thread is running
    chat.stop.click()
    chat.wait(60)
    assert chat.last.stop_reason == "stopped by on_token" and len(chat.last.ids) < 400


@pytest.mark.parametrize("prompt, max_tokens, words", [
    ("", 10, "empty"),
    ("to be " * 400, 10, "context"),
    ("ROMEO.", 10**6, "Lower 'Max tokens'"),
    (" the" * 512, 1, "shorten it so an answer fits"),  # 512 tokens: the whole context, no room for one more
])
def test_chat_shows_bad_input_in_place_and_keeps_working(tiny, hf_tiny, prompt, max_tokens, words):
    chat = widgets.Chat(tiny)
    chat.prompt.value, chat.max_tokens.value = prompt, max_tokens
    chat.send.click()
    assert words in chat.status.value and "⚠" in chat.status.value
    chat.prompt.value, chat.max_tokens.value = "JULIET.\n", 5
    chat.send.click()
    chat.wait(60)
    assert chat.last.ids == hf_greedy(hf_tiny[0], hf_tiny[1].encode("JULIET.\n"), 5)


def test_tokens_view_uses_each_tokenizers_ids(tiny):
    app = widgets.Tokens(tiny)
    app.text.value = "Check out ngrok.ai"
    for tok, strip in zip(tokenization.available(tiny), app.strips):
        assert app.counts[tok.name] == [t["id"] for t in strip.tokens] == tok.encode("Check out ngrok.ai")
        assert strip.title.startswith(f"{tok.name}: {len(tok.encode('Check out ngrok.ai'))} tokens for 18 characters")
    assert app.counts["GPT-4o / GPT-5 (o200k_base)"] == [4383, 842, 1657, 17690, 75584]
    own, *others = app.strips  # the model's strip links to the model's other views; the rest link to none of them
    assert own.link == views.TokenStrip.of(tiny, "Check out ngrok.ai").link  # the model's other views of this prompt
    assert len({s.link for s in app.strips}) == len(app.strips)


def test_tokens_view_errors_in_place(tiny):
    app = widgets.Tokens(tiny)
    app.text.value = ""
    assert "empty" in app.message.value
    assert all(s.tokens == [] and s.title == "" for s in app.strips) and app.counts == {}  # no chips of the last text
    app.text.value = "x " * 600
    assert "longer than tiny's context" in app.message.value
    app.text.value = "will Will"
    assert "⚠" not in app.message.value and app.strips[0].tokens[0]["text"] == "will"


def test_divergence_finds_the_first_different_token(tiny):
    app = widgets.Divergence(tiny, "To be, or not to be", "To be, or not to see")
    a, b = tiny.encode("To be, or not to be"), tiny.encode("To be, or not to see")
    assert app.index == next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) == 6  # the last token: ' be' or ' see'
    assert [s.mark for s in app.strips] == [app.index] * 2
    assert [t["id"] for t in app.strips[1].tokens] == b and app.strips[0].link != app.strips[1].link
    app.b.value = ""
    assert "empty" in app.note.value
    assert app.index is None and all(s.tokens == [] and s.title == "" for s in app.strips)
    app.b.value = "To be"
    assert "prefix" in app.note.value and [t["id"] for t in app.strips[1].tokens] == tiny.encode("To be")
    app.b.value = app.a.value
    assert app.note.value == f"the same tokens: all {len(a)} shared"


def test_lookup_rows_are_the_table_rows(tiny):
    app = widgets.Lookup(tiny, "Mary had a little lamb")
    ids = tiny.encode("Mary had a little lamb")
    assert [t["id"] for t in app.view.tokens] == ids  # token ids first: the chips
    app.mode.value = "embedding rows"
    table = embeddings.table(tiny)
    assert len(app.view.values) == len(ids) and len(app.view.values[0]) == tiny.config.n_embd
    assert app.view.values[2][5] == round(table[ids[2], 5].item(), 4)
    assert app.view.rows == [tiny.decode([i]) for i in ids] and app.children[-1] is app.view
    app.text.value = ""
    assert "empty" in app.info.value and app.view is None and len(app.children) == 2
    app.text.value = "lamb"
    assert app.view.rows == [tiny.decode([i]) for i in tiny.encode("lamb")] and "⚠" not in app.info.value
    app.text.value = " the" * 500  # fits the context, but its rows are too many numbers for one view
    assert "would send" in app.info.value and app.view is None and len(app.children) == 2
    app.text.value = "lamb"
    assert app.children[-1] is app.view and app.view.rows == [tiny.decode([i]) for i in tiny.encode("lamb")]


def token_by_hand(tok, word):  # the token a word stands for, as EmbeddingSpace says: " word" whole, or its first piece
    word = word.strip()
    spaced = tok.encode(" " + word)
    return spaced[0] if len(spaced) == 1 else tok.encode(word)[0]


def neighbours_by_hand(hf_tiny, word, k=8):  # -> [(token text, cosine)]: transformers' table, numpy's arithmetic
    model, tok = hf_tiny
    rows = model.get_input_embeddings().weight.detach().double().numpy()
    token = token_by_hand(tok, word)
    cos = rows @ rows[token] / (np.linalg.norm(rows, axis=1) * np.linalg.norm(rows[token]))
    return [(tok.decode([i]), cos[i]) for i in np.argsort(-cos) if i != token][:k]


def neighbours_shown(app):  # -> [(token text, cosine)] as the app lists them, each as printed (2 decimals)
    return [(ast.literal_eval(html.unescape(t)), float(s))
            for t, s in re.findall(r"<code>([^<]*)</code> (-?\d\.\d\d)", app.neighbour_view.value)]


def check_neighbours(app, hf_tiny, word):
    shown, want = neighbours_shown(app), neighbours_by_hand(hf_tiny, word)
    assert [t for t, _ in shown] == [t for t, _ in want]
    assert [s for _, s in shown] == pytest.approx([s for _, s in want], abs=0.0051)  # printed to 2 decimals


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_embedding_space_shows_the_map_from_the_requested_dimension(tiny, hf_tiny, dims):
    app = widgets.EmbeddingSpace(tiny, dims=dims)
    assert app.view.dims == dims and app.view in app.children  # the browser switches 1D / 2D / 3D itself
    fams = embeddings.word_families(tiny)
    ids, labels = [i for f in fams.values() for _, i in f], [name for name, f in fams.items() for _ in f]
    coords = pca_by_hand(hf_tiny[0].get_input_embeddings().weight.detach()[ids].numpy(), 3)  # transformers' rows
    assert app.view.scores == [separation_by_hand(coords[:, :d], labels) for d in (1, 2, 3)]
    assert same_up_to_sign(np.asarray(app.view.coords)[:, :dims], coords[:, :dims]) < 1e-4  # the d-D projection
    app.word.value = ""
    assert "type a word" in app.neighbour_view.value
    app.word.value = "queen"
    assert "nearest tokens to <code>&#x27; queen&#x27;</code> (cosine" in app.neighbour_view.value
    assert "piece" not in app.neighbour_view.value and len(neighbours_shown(app)) == 8
    check_neighbours(app, hf_tiny, "queen")
    app.word.value = "Montague"  # split by tiny's tokenizer: its first piece is what is looked up, and said to be
    tok = hf_tiny[1]
    piece = tok.decode([tok.encode("Montague")[0]])
    assert len(tok.encode(" Montague")) > 1 and f"to <code>{html.escape(repr(piece))}</code> (the first piece of" \
        in app.neighbour_view.value
    check_neighbours(app, hf_tiny, "Montague")
    app.word.value = "\tMontague  "  # spaces typed around a word: the same token, the same neighbours
    assert html.escape(repr(piece)) in app.neighbour_view.value
    check_neighbours(app, hf_tiny, "Montague")


def test_families_come_from_the_models_vocabulary(tiny):
    fams = embeddings.word_families(tiny)
    assert len(fams) >= 4
    for members in fams.values():
        for word, i in members:
            assert tiny.encode(" " + word) == [i]


def test_pca_and_separation():
    x = torch.cat([torch.randn(10, 5) + 10, torch.randn(10, 5) - 10])
    coords = embeddings.pca(x, 2)
    assert coords.shape == (20, 2)
    assert embeddings.separation(coords, ["a"] * 10 + ["b"] * 10) == 1.0


def test_the_loop_diagram_names_the_models_layers():
    ax = plots.loop_diagram(12).axes[0]
    boxes = [t.get_text() for t in ax.texts][:6]
    assert boxes == ["text", "tokens\n(ids)", "embeddings\n(+ position)", "12 layers:\nattention +\nfeed-forward",
                     "next-token\nprobabilities", "pick one\ntoken"]
    assert sum(isinstance(p, FancyBboxPatch) for p in ax.patches) == 6  # a box each
    assert sum(isinstance(p, FancyArrowPatch) for p in ax.patches) == 6  # 5 from box to box, 1 back to the start
    for bad in (0, "4", 2.0, True):
        with pytest.raises(ValueError, match="number of layers, a whole number of at least 1"):
            plots.loop_diagram(bad)


def texts_by_row(ax):  # -> {y: [(text, weight)] left to right}: a figure's rows of token boxes as drawn
    rows = {}
    for t in sorted(ax.texts, key=lambda t: t.get_position()[0]):
        rows.setdefault(t.get_position()[1], []).append((t.get_text(), t.get_fontweight()))
    return rows


def test_input_growth_draws_what_each_step_feeds():
    ax = plots.input_growth(["Mary", " had"], [" a", " little", " lamb"]).axes[0]
    n = "normal"  # step t feeds the prompt and the t tokens before it, then picks one (bold)
    assert texts_by_row(ax) == {0: [("Mary", n), (" had", n), (" a", "bold")],
                    -1: [("Mary", n), (" had", n), (" a", n), (" little", "bold")],
                    -2: [("Mary", n), (" had", n), (" a", n), (" little", n), (" lamb", "bold")]}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["step 1: 2 in", "step 2: 3 in", "step 3: 4 in"]
    assert ax.get_title(loc="left").startswith("Without a cache every step feeds the whole sequence again")
    with pytest.raises(ValueError, match="at least one new token"):
        plots.input_growth(["Mary"], [])
    with pytest.raises(ValueError, match="lists of token strings"):  # a string is not a list of tokens
        plots.input_growth("Mary had", " a little")


def test_heatmap_and_projection_check_shapes():
    with pytest.raises(ValueError, match="2-D"):
        plots.heatmap([1, 2, 3], "x")
    with pytest.raises(ValueError, match="one label per row"):
        plots.heatmap([[1, 2], [3, 4]], "x", row_labels=["a"])
    with pytest.raises(ValueError, match="project first"):
        plots.projection([[1, 2, 3, 4]], ["w"], ["f"], "t")
