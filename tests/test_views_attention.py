"""The attention grid view (views.AttentionGrid) and the apps drawn with it, headless: the data it
sends is the live run's (tokens, weights to 3 decimals), under 1 MB, a big model's layers fill in
on request, and GridFilling's notes hold what a recomputation finds."""

import pytest
import torch

import kvlib
from conftest import hf_greedy
from kvlib.ui import widgets
from kvlib.ui.views import AttentionGrid
from kvlib.ui.views.base import MAX_STATE_BYTES

LONG = "Mary had a little lamb, its fleece was white as snow, and everywhere that Mary went the lamb was sure to go. " * 3


def run(model, ids_or_text):  # -> (tokens, trace) of a plain forward pass
    ids = model.encode(ids_or_text) if isinstance(ids_or_text, str) else ids_or_text
    trace = kvlib.Trace()
    model.forward(ids, trace=trace)
    return [model.decode([i]) for i in ids], trace


def to3(weights):  # [nh, T, T] tensor -> nested lists at 3 decimals
    return [[[round(w, 3) for w in row] for row in head] for head in weights.tolist()]


def test_grid_of_a_live_run_on_tiny(tiny):
    text = "Mary had a little lamb"
    view = AttentionGrid.of(tiny, text, layer=2, head="mean")
    tokens, trace = run(tiny, text)
    assert view.tokens == tokens and view.prompt_len == len(tokens) and (view.layer, view.head) == (2, "mean")
    assert len(view.weights) == tiny.config.n_layer and all(w is not None for w in view.weights)  # all fit
    for l, layer in enumerate(trace.layers):
        assert view.weights[l] == to3(layer.weights)
    T = len(tokens)
    grid = torch.tensor(view.weights[1][3])
    assert grid.triu(1).abs().max() == 0 and (grid.sum(1) - 1).abs().max() < 3e-3  # masked above; rows sum to 1
    assert view.state_bytes() < MAX_STATE_BYTES
    text = view.summary()
    assert "layer 2, mean of heads" in text and len(text.splitlines()) == 2 + T
    mean = trace.layers[2].weights.mean(0)[-1]
    assert " ".join(f"{w:.2f}" for w in mean.tolist()) in text.splitlines()[-1]


def test_short_prompts_send_every_head_of_smollm2_once(smollm2):
    view = AttentionGrid.of(smollm2, "Mary had a little", layer=10, head=1)
    tokens, trace = run(smollm2, "Mary had a little")
    assert view.tokens == tokens
    assert all(view.weights[l] == to3(t.weights) for l, t in enumerate(trace.layers))  # 30 layers x 9 heads
    assert view.state_bytes() < MAX_STATE_BYTES
    assert f"{trace.layers[10].weights[1, 3, 2].item():.2f}" in view.summary().splitlines()[-1]


def test_a_long_prompt_sends_some_layers_and_fills_in_the_one_asked_for(smollm2):
    view = AttentionGrid.of(smollm2, LONG, layer=3)
    tokens, trace = run(smollm2, LONG)
    sent = [l for l, w in enumerate(view.weights) if w is not None]
    assert 3 in sent and len(sent) < smollm2.config.n_layer and sent == list(range(sent[0], sent[-1] + 1))
    assert view.state_bytes() < MAX_STATE_BYTES
    view.layer = 29  # what the browser does for a layer it lacks
    assert view.weights[29] == to3(trace.layers[29].weights) and view.weights[3] is None
    assert view.state_bytes() < MAX_STATE_BYTES
    assert view.summary().startswith("smollm2: attention over") and "looks most at" in view.summary()


def test_bad_input_is_refused_with_a_hint(tiny):
    with pytest.raises(kvlib.KVLibError, match="empty"):
        AttentionGrid.of(tiny, "")
    with pytest.raises(ValueError, match="layers 0-3"):
        AttentionGrid.of(tiny, "Mary had", layer=4)
    with pytest.raises(ValueError, match="one note per step"):
        AttentionGrid.of(tiny, "Mary had a little", prompt_len=2, notes=["only one"])
    with pytest.raises(kvlib.KVLibError, match="shorter prompt"):  # one layer alone is over 1 MB
        AttentionGrid.of(tiny, LONG * 3)


def test_grid_filling_notes_agree_with_a_recomputation(tiny, hf_tiny):
    app = widgets.GridFilling(tiny, "Mary had a little", new_tokens=5)
    prompt = hf_tiny[1].encode("Mary had a little")
    seq = prompt + hf_greedy(hf_tiny[0], prompt, 5, stop_at_eos=False)  # transformers' tokens and greedy picks
    P, view = app.prompt_len, app.grid
    assert view.tokens == [tiny.decode([i]) for i in seq[:P + 4]] and view.prompt_len == P
    _, last = run(tiny, seq[:P + 4])
    assert view.weights[1] == to3(last.layers[1].weights)  # the grid of the last step, Play shows its rows
    assert view.notes[0] == f"The model reads the prompt's {P} tokens: a {P} × {P} grid."
    for s in range(1, 5):
        before, after = kvlib.Trace(), kvlib.Trace()
        tiny.forward(seq[:P + s - 1], trace=before)
        tiny.forward(seq[:P + s], trace=after)
        change = max((a.weights[:, :-1, :-1] - b.weights).abs().max().item() for b, a in zip(before.layers, after.layers))
        # by hand: the P + s - 1 old tokens go through every layer again: Q, K, V and output projections (4 C^2)
        # and GPT-2's two feed-forward matrices (2 C I), and old row p scores and mixes p + 1 keys and values
        # (2 C (p + 1) over all heads); the logits are made for the last token alone either way
        L, C, I, old = tiny.config.n_layer, tiny.config.n_embd, tiny.config.n_inner, P + s - 1
        wasted = L * old * (4 * C * C + 2 * C * I) + L * 2 * C * sum(p + 1 for p in range(old))
        shown = torch.tensor(view.weights)[:, :, :P + s, :P + s]  # what Play shows at step s: that step's own grid
        assert (shown - torch.stack([a.weights for a in after.layers])).abs().max() < 6e-4
        assert f"Rows 0–{P + s - 2} came out as at step {s - 1}" in view.notes[s]
        assert f"any layer and head: {change:.1e})" in view.notes[s] and change < 1e-5
        assert f"{P + s - 1} rows of attention and {wasted:,} multiply-adds" in view.notes[s]
    assert app.old_rows_change() < 1e-5
    assert view.summary().endswith("step 4: " + view.notes[4])


def test_explorer_reruns_on_a_new_text_and_keeps_working_after_bad_input(smollm2):
    app = widgets.AttentionExplorer(smollm2, "Mary had a little", layer=10, head=1)
    first = app.grid
    assert first in app.children and (first.layer, first.head) == (10, 1)
    app.text.value = ""
    assert "empty" in app.message.value and app.grid is None and app.children == (app.text, app.message)
    assert first.comm is None  # closed: the browser drops it, the kernel its weights
    app.text.value = "Hi there"
    tokens, trace = run(smollm2, "Hi there")
    assert app.message.value == "" and app.grid is not first and app.grid in app.children
    assert app.grid.tokens == tokens and app.grid.weights[10] == to3(trace.layers[10].weights)
