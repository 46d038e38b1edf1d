"""The page's model (kvlib/tools/webmodel.py): tiny's ONNX graph equals kvlib's forward pass within the bound the
module states, for a prefill and for cached steps fed the graph's own K and V, on held-out English, Chinese
and emoji text; SmolLM2's quantized graph agrees with kvlib as stated (slow)."""

import numpy as np
import onnx
import pytest
import torch

from kvlib import KVLibError, Trace, generate
from kvlib.model import weights_file
from kvlib.tools import webmodel
from kvlib.tools.webmodel import OUTPUTS


@pytest.fixture(scope="module")
def tiny_onnx(tiny, tmp_path_factory):
    path, size = webmodel.export(tiny, tmp_path_factory.mktemp("web") / "tiny.onnx")
    assert size == path.stat().st_size
    return path


@pytest.fixture(scope="module")
def report(tiny, tiny_onnx):
    return webmodel.check(webmodel.stored(tiny), tiny_onnx, steps=4)


def test_prefill_and_cached_steps_within_the_bound(tiny, report):
    assert list(report) == list(webmodel.HELD_OUT)
    for text, r in report.items():
        calls = r["calls"]
        assert [c["tokens"] for c in calls] == [len(tiny.encode(text))] + [1] * 4  # the prefill, then 4 steps
        for name in OUTPUTS:
            worst = max(c[name] for c in calls)
            assert worst <= r["tolerance"][name], (text, name, worst, r["tolerance"][name])
        assert r["within"]
        assert all(c["token_agrees"] for c in calls)
        # the bound is fp32's, not a loose one: a few ulps of the outputs' scale (logits reach about 17)
        assert r["tolerance"]["logits"] < 1e-4 and r["tolerance"]["weights"] < 1e-5


def test_the_cache_the_graph_builds_is_kvlibs(tiny, tiny_onnx, report):
    """The page's cache: every call's k and v concatenated equal every layer's K and V in kvlib's KVCache after
    the same calls, and the last step's weights equal a Trace of kvlib's same step (its [nh, 1, P + 1] row)."""
    model, sess, text = webmodel.stored(tiny), webmodel.session(tiny_onnx), webmodel.HELD_OUT[1]
    cache, new, c = model.new_cache(), model.encode(text), model.config
    past = webmodel.empty_past(c)
    for _ in range(4):
        trace = Trace()
        logits = model.forward(new, cache=cache, trace=trace)
        graph = webmodel.run(sess, new, past)
        past = webmodel.grown(past, graph)
        new = [int(logits[-1].argmax())]
    past_k, past_v = past
    tol = report[text]["tolerance"]
    assert past_k.shape == (c.n_layer, c.n_kv_head, len(cache), c.head_dim) == past_v.shape
    for i, layer in enumerate(cache.layers):
        assert np.abs(past_k[i] - layer.keys.numpy()).max() <= tol["k"]
        assert np.abs(past_v[i] - layer.values.numpy()).max() <= tol["v"]
    weights = np.stack([t.weights.numpy() for t in trace.layers])  # [L, nh, 1, P + 1]
    assert graph["weights"].shape == weights.shape == (c.n_layer, c.n_head, 1, len(cache))
    assert np.abs(graph["weights"] - weights).max() <= tol["weights"]
    assert np.abs(graph["logits"] - logits.numpy()).max() <= tol["logits"]


def test_the_graph_alone_decodes_as_kvlib(tiny, tiny_onnx):
    """The page runs the graph alone, feeding its own tokens and K/V: its greedy answer is kvlib's."""
    sess = webmodel.session(tiny_onnx)
    for text in webmodel.HELD_OUT:
        assert webmodel.greedy(sess, tiny, text, 8) == generate(tiny, text, 8, stop_at_eos=False).ids


def test_weights_are_stored_fp16_and_computed_in_fp32(tiny, tiny_onnx):
    graph = onnx.load(str(tiny_onnx))
    inits = {t.name: t for t in graph.graph.initializer}
    floats = [t for t in inits.values() if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)]
    assert floats and all(t.data_type == onnx.TensorProto.FLOAT16 for t in floats)
    stored = sum(np.prod(t.dims) for t in floats)
    params = weights_file.flatten(tiny.params)
    assert stored == sum(t.numel() for t in params.values()) - params["lm_head.weight"].numel()  # tied: once
    casts = {n.input[0]: n for n in graph.graph.node if n.op_type == "Cast"}
    for t in floats:  # each read through a Cast to fp32, so every multiply is fp32
        assert casts[t.name].attribute[0].i == onnx.TensorProto.FLOAT
    assert tiny_onnx.stat().st_size < 15 * 2 ** 20


def test_the_file_declares_the_contract(tiny, tiny_onnx):
    """Names, dtypes and shapes as describe() gives them to the page; T, P and S are dynamic."""
    described = webmodel.describe(tiny)
    graph = onnx.load(str(tiny_onnx)).graph
    assert [v.name for v in graph.input] == described["inputs"] == ["ids", "positions", "past_k", "past_v"]
    assert [v.name for v in graph.output] == described["outputs"] == ["logits", "k", "v", "weights"]
    for v in list(graph.input) + list(graph.output):
        dims = [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        assert dims == described["shapes"][v.name]
        assert v.type.tensor_type.elem_type == (onnx.TensorProto.INT64 if v.name in ("ids", "positions")
                                                else onnx.TensorProto.FLOAT)
    c = tiny.config
    assert described == {**described, "n_layer": c.n_layer, "n_head": c.n_head, "n_kv_head": c.n_kv_head,
                         "head_dim": c.head_dim, "n_ctx": c.n_ctx, "vocab": c.vocab_size,
                         "eos": tiny.eos_token_id, "name": "tiny", "bytes_per_number": 4}


def test_a_prefill_split_in_two_equals_it_whole(tiny, tiny_onnx, report):
    """T > 1 with P > 0 (the page's second request, reusing a cached prefix): the second part's rows equal the
    whole prefill's same rows."""
    sess, ids = webmodel.session(tiny_onnx), tiny.encode(webmodel.HELD_OUT[2])
    whole = webmodel.run(sess, ids, webmodel.empty_past(tiny.config))
    head = webmodel.run(sess, ids[:5], webmodel.empty_past(tiny.config))
    tail = webmodel.run(sess, ids[5:], (head["k"], head["v"]))  # positions 5.. follow the 5 held
    tol = report[webmodel.HELD_OUT[2]]["tolerance"]  # each within it of kvlib, so within twice it of each other
    assert np.abs(tail["logits"] - whole["logits"][5:]).max() <= 2 * tol["logits"]
    assert np.abs(tail["weights"] - whole["weights"][:, :, 5:]).max() <= 2 * tol["weights"]
    assert np.abs(tail["k"] - whole["k"][:, :, 5:]).max() <= 2 * tol["k"]
    assert np.abs(tail["v"] - whole["v"][:, :, 5:]).max() <= 2 * tol["v"]


def test_bad_input_says_what_to_do(tiny, tmp_path):
    with pytest.raises(KVLibError, match="fp16, fp32 or int8"):
        webmodel.export(tiny, tmp_path / "x.onnx", storage="fp8")
    with pytest.raises(KVLibError, match="python -m kvlib.tools.webmodel"):
        webmodel.check(tiny, tmp_path / "missing.onnx")
    with pytest.raises(KVLibError, match="agreement"):
        webmodel.stored(tiny, "int8")


def test_smollm2_int8_agrees_with_kvlib(smollm2, tmp_path):
    path, size = webmodel.export(smollm2, tmp_path / "smollm2.onnx")
    report = webmodel.agreement(smollm2, path, webmodel.PROMPTS)
    next_tokens = sum(r["next_token"] for r in report.values())
    answers = sum(r["answer"] for r in report.values())
    print(f"SmolLM2 {webmodel.STORAGE['smollm2']}: {size:,} bytes; greedy next token equal on {next_tokens} of "
          f"{len(report)} prompts, 8-token answers on {answers}")
    assert next_tokens >= webmodel.AGREES["next_token"] and answers >= webmodel.AGREES["answer"]


def test_the_llama_family_exports_within_the_bound(small_llama, tmp_path):
    """llama.llama's path (RMSNorm, RoPE, grouped K/V heads, an untied output head) on a small random Llama:
    the same bound, prefill and cached steps, and the cache the page gets has its nkv heads, not nh."""
    path, _ = webmodel.export(small_llama, tmp_path / "llama.onnx")
    report = webmodel.check(webmodel.stored(small_llama), path, steps=3)
    assert all(r["within"] for r in report.values()), report
    graph = webmodel.run(webmodel.session(path), small_llama.encode("a b c"), webmodel.empty_past(small_llama.config))
    c = small_llama.config
    assert c.n_kv_head < c.n_head and graph["k"].shape[1] == c.n_kv_head and graph["weights"].shape[1] == c.n_head
