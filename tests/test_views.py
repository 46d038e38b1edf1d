"""The browser views, built headless from live runs: their data must be the model's own.

Labels equal the model's tokens, numbers equal the trace or the cache (as rounded for
display), bytes equal `cache.nbytes` at every step; each view stays under 1 MB and has a
text fallback for front-ends without widgets."""

import pytest
import torch

import kvlib
from conftest import hf_greedy, toy_by_hand
from kvlib.lessons import tokenization
from kvlib.ui import views
from kvlib.ui.views import base


def decode_by_hand(model, prompt, steps):  # -> tokens fed, cache.nbytes after each step, the final cache
    ids, cache, sizes = model.encode(prompt), model.new_cache(), []
    feed = ids
    for _ in range(steps):
        token = int(model.forward(feed, cache=cache)[-1].argmax())
        sizes.append(cache.nbytes)
        ids, feed = ids + [token], [token]
    return ids[:-1], sizes, cache


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_cache_growth_shows_the_live_cache(name, request):
    model = request.getfixturevalue(name)
    view = views.CacheGrowth.of(model, "Mary had a little", new_tokens=6)
    held, sizes, cache = decode_by_hand(model, "Mary had a little", 6)
    assert view.tokens == [model.decode([i]) for i in held]
    assert view.nbytes == sizes  # cache.nbytes read at every step of an independent run
    per_token = 2 * model.config.n_layer * model.config.n_kv_head * model.config.head_dim * 4
    prompt = len(model.encode("Mary had a little"))
    assert view.fed == [prompt] + [1] * 5
    assert view.nbytes == [(prompt + s) * per_token for s in range(6)]  # step s holds the prompt and s new tokens
    for s in range(6):
        assert view.layer_nbytes[s] == [(prompt + s) * per_token // model.config.n_layer] * model.config.n_layer
    for l in (0, model.config.n_layer - 1):
        assert view.k_rows[l] == [[round(x, 2) for x in row] for row in cache.layers[l].keys[0, :, :8].tolist()]
        assert view.v_rows[l] == [[round(x, 2) for x in row] for row in cache.layers[l].values[0, :, :8].tolist()]
    assert view.shape["n_kv_head"] == model.config.n_kv_head and view.state_bytes() < base.MAX_STATE_BYTES
    assert f"{sizes[-1]:,} bytes" in view.summary()


def test_generate_fills_the_cache_it_is_given(tiny, hf_tiny):
    cache = tiny.new_cache()
    gen = kvlib.generate(tiny, "Mary had", 4, cache=cache, stop_at_eos=False)
    assert gen.cache is cache and len(cache) == len(gen.prompt_ids) + 3
    assert gen.ids == hf_greedy(hf_tiny[0], hf_tiny[1].encode("Mary had"), 4, stop_at_eos=False)
    with pytest.raises(kvlib.KVLibError, match="already read 6 tokens, the prompt is 3"):
        kvlib.generate(tiny, "Mary had", 4, cache=cache)


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_tokens_view_is_the_models_tokens(name, request):
    model = request.getfixturevalue(name)
    view = views.TokenStrip.of(model, "Check out ngrok.ai")
    ids = model.encode("Check out ngrok.ai")
    assert [t["id"] for t in view.tokens] == ids and [t["pos"] for t in view.tokens] == list(range(len(ids)))
    assert [t["text"] for t in view.tokens] == [model.decode([i]) for i in ids]
    assert [bytes.fromhex(t["bytes"]) for t in view.tokens] == [model.decode([i]).encode() for i in ids]
    same = views.Matrix.of(torch.zeros(len(ids), 2), [model.decode([i]) for i in ids])
    assert view.link == same.link != views.TokenStrip.of(model, "Check out ngrok").link  # views of one prompt link up
    with pytest.raises(kvlib.KVLibError, match="empty"):
        views.TokenStrip.of(model, "")


def test_tokens_view_of_another_tokenizer():
    o200k = views.TokenStrip.of(tokenization.openai("o200k_base"), "Check out ngrok.ai")
    assert [t["id"] for t in o200k.tokens] == [4383, 842, 1657, 17690, 75584]  # tiktoken's ids
    assert o200k.title == "GPT-4o / GPT-5 (o200k_base): 5 tokens for 18 characters (18 bytes)"


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_matrix_view_is_the_tensor_rounded(name, request):
    from kvlib.lessons import embeddings

    model = request.getfixturevalue(name)
    ids = model.encode("Mary had a little")
    rows = embeddings.table(model)[ids]  # [T, C]
    m = views.Matrix.of(embeddings.lookup(model, ids), [model.decode([i]) for i in ids], "E", new_row=3)
    assert m.values == [[round(x, 4) for x in row] for row in rows.tolist()]  # 2 decimals printed, 4 on hover
    assert m.rows[-1] == " little" and m.new_row == 3 and len(m.values[0]) == model.config.n_embd
    with pytest.raises(ValueError, match="one label per row"):
        views.Matrix.of(rows, ["a"])
    with pytest.raises(ValueError, match="2-D"):
        views.Matrix.of(rows[0], ["a"])


def test_toy_step_is_the_arithmetic_a_learner_does_by_hand():
    step = views.DecodeStep.toy_step()
    q, K, V, scores, weights, out = toy_by_hand()
    assert q == [-1, 1] and K[-1] == [1, 2] and V[-1] == [3, 1]  # the new token's rows, by hand
    assert step.parts["q"] == [q] and step.parts["K"] == K and step.parts["V"] == V
    assert step.parts["scores"][0] == pytest.approx(scores, abs=1e-4)
    assert step.parts["weights"][0] == pytest.approx(weights, abs=1e-4)
    assert step.parts["out"][0] == pytest.approx(out, abs=1e-4)
    assert step.parts["mask"] == [[0.0] * 5] and step.tokens == ["The", " king", " is", " dead", ","]


# kv: the K/V head query head `head` reads: tiny has one per query head; SmolLM2's 9 query heads share 3, 3 each
@pytest.mark.parametrize("name, layer, head, kv", [("tiny", 1, 2, 2), ("smollm2", 20, 7, 2)])
def test_decode_step_is_the_models_own_step(name, layer, head, kv, request):
    model = request.getfixturevalue(name)
    step = views.DecodeStep.of(model, "Mary had a little", layer=layer, head=head)
    cache = model.new_cache()
    ids = model.encode("Mary had a little")
    token = int(model.forward(ids, cache=cache)[-1].argmax())
    trace = kvlib.Trace()
    model.forward([token], cache=cache, trace=trace)
    t = trace.layers[layer]
    assert step.tokens == [model.decode([i]) for i in ids + [token]]
    close = lambda part, tensor: torch.allclose(torch.tensor(step.parts[part], dtype=torch.float64), tensor.double(), atol=1e-4)
    assert close("q", t.q[head]) and close("K", cache.layers[layer].keys[kv]) and close("V", cache.layers[layer].values[kv])
    assert close("scores", t.scores[head]) and close("weights", t.weights[head]) and close("out", t.out[head])
    grouped = model.config.n_kv_head < model.config.n_head  # only then is the K/V head another than the head
    assert (f"reading K/V head {kv}" in step.title) == grouped and ("K/V" in step.title) == grouped


def test_views_of_one_run_link_and_fall_back_to_text(tiny):
    tokens = [tiny.decode([i]) for i in tiny.encode("Mary had a little")]
    a = views.TokenStrip.of(tiny, "Mary had a little")
    b = views.Matrix.of(torch.zeros(len(tokens), 3), tokens)
    c = views.Matrix.of(torch.zeros(len(tokens) - 1, 3), tokens[:-1])
    assert a.link == b.link != c.link
    data, _ = b._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data  # the view itself where widgets work
    assert "' little'" in data["text/plain"] and data["text/html"].startswith("<pre>")


def test_a_view_over_a_megabyte_is_refused(tiny):
    big = torch.randn(500, 500)  # 250,000 numbers, about 7 bytes each as JSON
    with pytest.raises(kvlib.KVLibError, match="shorter prompt"):
        views.Matrix.of(big, [str(i) for i in range(500)])


def test_a_grid_and_a_cache_name_a_cut_characters_bytes(tiny):
    """Chinese text cut inside characters: the grid's and the cache's labels are notebook 2's chips (<0xE8> for a
    part of a character, the character where a token holds it whole), never the "\ufffd" a token decodes to alone."""
    text = "Will will 轩辕养了一只黄色的虎皮鹦鹉"
    chips = [c.text for c in tokenization.chunks(tokenization.for_model(tiny), text)]
    assert any("<0x" in c for c in chips) and any("<0x" not in c for c in chips)  # cut characters and whole words
    assert views.AttentionGrid.of(tiny, text).tokens == chips
    growth = views.CacheGrowth.of(tiny, text, new_tokens=2)
    assert growth.tokens[:len(chips)] == chips and not any("\ufffd" in t for t in growth.tokens)
