"""The notebook apps, driven headless: set values, click, and check what they produced."""

import html
import re

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
from matplotlib.figure import Figure

import kvlib
from kvlib import embeddings, plots, tokenization, views, widgets


@torch.no_grad()
def greedy(hf_tiny, prompt, n):  # transformers' own greedy ids and text: not kvlib's decode loop
    model, tok = hf_tiny
    ids = tok(prompt, return_tensors="pt").input_ids
    new = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)[0, ids.shape[1]:].tolist()
    return new, tok.decode(new)


def test_chat_streams_the_same_tokens_as_transformers_greedy(tiny, hf_tiny):
    chat = widgets.Chat(tiny, prompt="ROMEO.\n", max_new_tokens=15)
    chat.send.click()
    chat.wait(60)
    ids, text = greedy(hf_tiny, "ROMEO.\n", 15)
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
    assert chat.last.ids == greedy(hf_tiny, "JULIET.\n", 5)[0]


def test_tokens_view_uses_each_tokenizers_ids(tiny):
    app = widgets.Tokens(tiny)
    app.text.value = "Check out ngrok.ai"
    for tok, strip in zip(tokenization.available(tiny), app.strips):
        assert app.counts[tok.name] == [t["id"] for t in strip.tokens] == tok.encode("Check out ngrok.ai")
        assert strip.title.startswith(f"{tok.name}: {len(tok.encode('Check out ngrok.ai'))} tokens for 18 characters")
    assert app.counts["GPT-4o / GPT-5 (o200k_base)"] == [4383, 842, 1657, 17690, 75584]
    own, *others = app.strips  # the model's strip links to the model's other views; the rest link to none of them
    assert own.link == views.Tokens.of(tiny, "Check out ngrok.ai").link  # the model's other views of this prompt
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


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_embedding_space_shows_the_map_from_the_requested_dimension(tiny, dims):
    app = widgets.EmbeddingSpace(tiny, dims=dims)
    assert app.view.dims == dims and app.view in app.children  # the browser switches 1D / 2D / 3D itself
    coords, words, labels = embeddings.project(tiny, embeddings.families(tiny), dims)
    assert app.view.scores == [28 / 40, 32 / 40, 35 / 40]  # tiny's 40 family words nearest their own centre
    shown = torch.tensor(app.view.coords)[:, :dims]
    assert (shown - coords).abs().max() < 6e-5  # the first components are the d-D projection, rounded
    app.word.value = ""
    assert "type a word" in app.neighbour_view.value
    app.word.value = "queen"
    shown = app.neighbour_view.value
    assert "nearest tokens to <code>&#x27; queen&#x27;</code> (cosine" in shown and "piece" not in shown
    assert all(f"{html.escape(repr(t))}</code> {s:.2f}" in shown for t, s in embeddings.neighbours(tiny, "queen"))
    app.word.value = "Montague"  # split by tiny's tokenizer: its first piece is what is looked up, and said to be
    piece = tiny.decode([embeddings.token_of(tiny, "Montague")])
    assert len(tiny.encode("Montague")) > 1 and f"to <code>{html.escape(repr(piece))}</code> (the first piece of" \
        in app.neighbour_view.value
    app.word.value = "\tMontague  "  # spaces typed around a word: the same token, the same neighbours
    assert embeddings.token_of(tiny, "\tMontague  ") == embeddings.token_of(tiny, "Montague")
    assert all(f"{html.escape(repr(t))}</code> {s:.2f}" in app.neighbour_view.value
               for t, s in embeddings.neighbours(tiny, "Montague"))


def test_families_come_from_the_models_vocabulary(tiny):
    fams = embeddings.families(tiny)
    assert len(fams) >= 4
    for members in fams.values():
        for word, i in members:
            assert tiny.encode(" " + word) == [i]


def test_pca_and_separation():
    x = torch.cat([torch.randn(10, 5) + 10, torch.randn(10, 5) - 10])
    coords = embeddings.pca(x, 2)
    assert coords.shape == (20, 2)
    assert embeddings.separation(coords, ["a"] * 10 + ["b"] * 10) == 1.0


def test_plots_return_figures_and_check_shapes():
    assert isinstance(plots.loop_diagram(4), Figure)
    assert isinstance(plots.input_growth(["a", "b"], ["c", "d", "e"]), Figure)
    with pytest.raises(ValueError, match="2-D"):
        plots.heatmap([1, 2, 3], "x")
    with pytest.raises(ValueError, match="one label per row"):
        plots.heatmap([[1, 2], [3, 4]], "x", row_labels=["a"])
    with pytest.raises(ValueError, match="project first"):
        plots.projection([[1, 2, 3, 4]], ["w"], ["f"], "t")
