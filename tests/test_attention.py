"""Attention by hand equals the model's trace; the grid and cache apps show the real tensors."""

import matplotlib

matplotlib.use("Agg")

import torch

import kvlib
from kvlib import attention, memory, widgets


def test_explain_equals_the_trace(tiny):
    trace = kvlib.Trace()
    tiny.forward(tiny.encode("Mary had a little lamb"), trace=trace)
    for layer, head in [(0, 0), (2, 3), (3, 1)]:
        steps = attention.explain(tiny, "Mary had a little lamb", layer, head)
        t = trace.layers[layer]
        for mine, theirs in [(steps.Q, t.q[head]), (steps.K, t.k[head]), (steps.V, t.v[head]),
                             (steps.masked, t.scores[head]), (steps.weights, t.weights[head]), (steps.out, t.out[head])]:
            assert torch.allclose(mine, theirs, atol=1e-5)
        T = len(steps.tokens)
        assert torch.isneginf(steps.masked[torch.ones(T, T, dtype=torch.bool).triu(1)]).all()
        assert not torch.isinf(steps.scores).any()


def test_attention_explorer_shows_the_chosen_head(tiny):
    app = widgets.AttentionExplorer(tiny, "To be, or not to be")
    trace = kvlib.Trace()
    tiny.forward(tiny.encode("To be, or not to be"), trace=trace)
    app.layer.value, app.head.value = 2, 1
    assert torch.equal(app.weights, trace.layers[2].weights[1])
    app.head.value = None
    assert torch.allclose(app.weights, trace.layers[2].weights.mean(0))
    assert f"{app.weights[3, 1].item():.3f}" in app.grid.value  # hover text carries each value
    app.text.value = ""
    assert "empty" in app.message.value
    app.text.value = "Hi there"
    assert app.weights.shape == (len(tiny.encode("Hi there")),) * 2


def test_grid_filling_adds_exactly_one_row_per_step_and_old_rows_stay(tiny):
    app = widgets.GridFilling(tiny, "Mary had a little", new_tokens=6)
    seq = tiny.encode("Mary had a little") + kvlib.generate(tiny, "Mary had a little", 6).ids
    app.layer.value, app.head.value = 1, 2
    for s in range(6):
        app.step.value = s
        n = app.prompt_len + s
        assert app.grid.shape == (n, n)
        plain = kvlib.Trace()
        tiny.forward(seq[:n], trace=plain)
        assert torch.allclose(app.grid, plain.layers[1].weights[2], atol=1e-6)
        if s:
            assert torch.allclose(app.grid[:-1, :-1], app.grid_at(s - 1), atol=1e-5)
            assert "only the last row is new" in app.info.value
            assert f"{app.wasted_macs[s]:,} multiply-adds" in app.info.value


def test_cache_growth_picture_matches_the_cache(tiny):
    app = widgets.CacheGrowth(tiny, "Mary had a little", new_tokens=5)
    P = len(tiny.encode("Mary had a little"))
    for s in range(5):
        app.step.value = s
        assert app.shown_bytes == app.nbytes[s] == (P + s) * memory.model_kv_bytes_per_token(tiny.config)
        assert f"{app.shown_bytes:,} bytes" in app.info.value
        assert len(app.figure.axes) >= 2 * tiny.config.n_layer


def test_macs_of_a_cached_step_grow_linearly_and_uncached_quadratically(random_gpt2):
    c = random_gpt2.config
    cached = [memory.decode_step_macs(c, n, True) for n in (100, 200, 300)]
    plain = [memory.decode_step_macs(c, n, False) for n in (100, 200, 300)]
    assert cached[2] - cached[1] == cached[1] - cached[0]  # linear: attention over one more token
    assert (plain[2] - plain[1]) > (plain[1] - plain[0])    # quadratic attention term
    # a full pass over n tokens is n cached steps
    assert memory.forward_macs(c, 0, 50, logits_for=50) == sum(memory.forward_macs(c, p, 1) for p in range(50))
