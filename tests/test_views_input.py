"""Bad input to every view in kvlib.ui.views: a wrong type, mismatched lengths or shapes, an empty list, an index out of
range, NaN. Each is refused with a KVLibError whose message says what to pass instead, before anything is sent to the
browser; ServingTimeline shows data it cannot draw in place, as its page does. Only tiny and hand-made tensors."""

import numpy as np
import pytest
import torch

import kvlib
from kvlib import KVLibError
from kvlib.lessons import tokenization
from kvlib.server import serving
from kvlib.server.prompt_cache import ManualClock
from kvlib.ui import views
from kvlib.ui.views import AttentionGrid, CacheGrowth, DecodeStep, EmbeddingMap, Matrix, PromptBlocks, ServingTimeline, \
    TokenStrip

NAN, INF = float("nan"), float("inf")
TOKENS = ["Mary", " had", " a"]


def test_every_view_has_its_bad_input_here():
    assert set(views.__all__) - {"View", "link_for"} == {
        "AttentionGrid", "CacheGrowth", "DecodeStep", "EmbeddingMap", "Matrix", "PromptBlocks", "ServingTimeline",
        "TokenStrip"}, "a new view: add its bad input to this file"


@pytest.mark.parametrize("matrix, tokens, kwargs, says", [
    ("abc", TOKENS, {}, "must be numbers"),                       # a string for a tensor
    ([[1, 2], [3]], ["a", "b"], {}, "nested lists of equal lengths"),
    ([["a", "b"]], ["x"], {}, "must be numbers"),
    (torch.zeros(3, 2, 2), TOKENS, {}, r"2-D matrix \[tokens, dims\], got shape \(3, 2, 2\)"),
    ([], [], {}, "2-D matrix"),                                   # an empty list
    ([[], [], []], TOKENS, {}, r"got shape \(3, 0\): pass one row \(of at least one number\)"),
    ([[1.0, NAN]], ["a"], {}, "NaN or infinity"),
    ([[1.0], [-INF]], ["a", "b"], {}, "pass finite numbers"),
    (torch.zeros(3, 2), "abc", {}, "pass a list of strings, one label per row"),  # one string, not three
    (torch.zeros(3, 2), [1, 2, 3], {}, "pass a list of strings"),
    (torch.zeros(3, 2), ["a"], {}, "one label per row"),
    (torch.zeros(3, 2), TOKENS, {"new_row": 3}, r"new_row is a row of the 3 \(or -1, none\)"),
    (torch.zeros(3, 2), TOKENS, {"new_row": 1.0}, "new_row is a row"),
    (torch.zeros(3, 2), TOKENS, {"digits": -1}, "digits 0 to 4"),
    (torch.zeros(3, 2), TOKENS, {"title": 5}, "'title' trait .* expected a unicode string"),
])
def test_matrix_refuses(matrix, tokens, kwargs, says):
    with pytest.raises(KVLibError, match=says):
        Matrix.of(matrix, tokens, **kwargs)


def test_matrix_refuses_a_model(tiny):
    with pytest.raises(KVLibError, match="must be numbers: a tensor"):
        Matrix.of(tiny, TOKENS)


@pytest.mark.parametrize("text, says", [
    (5, "the text to cut, a str"),
    (["Mary", "had"], "the text to cut, a str"),
    (None, "a str; got .* and None"),
    ("", "the text is empty: type something"),
])
def test_tokens_refuses_what_is_no_text(tiny, text, says):
    for tokenizer in (tiny, tokenization.gpt2()):  # the model's own tokenizer, and any other
        with pytest.raises(KVLibError, match=says):
            TokenStrip.of(tokenizer, text)


def test_tokens_refuses_a_name_for_a_tokenizer():
    with pytest.raises(KVLibError, match=r"takes a tokenizer \(tokenization.gpt2\(\), or a loaded model for its own\)"):
        TokenStrip.of("tiny", "Mary")


def trace_of(model, ids):
    trace = kvlib.Trace()
    model.forward(ids, trace=trace)
    return trace


IDS = [45, 1452, 591, 259, 1008]  # 5 tokens of tiny's: "Mary had a little"
LAYERS = r"tiny has layers 0-3 and heads 0-3 \(or head='mean'\): pass whole numbers"


@pytest.mark.parametrize("kwargs, says", [
    ({"layer": -1}, LAYERS), ({"layer": 4}, LAYERS), ({"layer": 1.0}, LAYERS), ({"layer": "1"}, LAYERS),
    ({"head": 4}, LAYERS), ({"head": True}, LAYERS), ({"head": "all"}, LAYERS), ({"head": 2.5}, LAYERS),
    ({"prompt_len": 0}, r"whole number 1 <= prompt_len <= the tokens"),
    ({"prompt_len": 6}, "1 <= prompt_len"),  # of 5 tokens
    ({"prompt_len": 2.0}, "1 <= prompt_len"), ({"prompt_len": "2"}, "1 <= prompt_len"),
    ({"prompt_len": 3, "notes": ["one"]}, "a list of one note per step"),  # 3 steps: 3 notes
    ({"prompt_len": 5, "notes": "x"}, "a list of one note per step"),    # one string is not a list of one
    ({"title": ["a"]}, "'title' trait"),
])
def test_attention_grid_refuses_indices_and_lengths(tiny, kwargs, says):
    with pytest.raises(KVLibError, match=says):
        AttentionGrid.of(tiny, IDS, **kwargs)


def test_attention_grid_takes_numpys_whole_numbers(tiny):
    view = AttentionGrid.of(tiny, IDS, prompt_len=np.int64(3), layer=np.int64(2), head=np.int32(1))
    assert (view.prompt_len, view.layer, view.head) == (3, 2, 1) and type(view.head) is int


@pytest.mark.parametrize("prompt, says", [
    ([1.5, 2.5], r"as text or a flat list of token ids \(whole numbers\)"),
    (["Mary", "had"], "flat list of token ids"),
    ([[1, 2], [3]], "flat list of token ids"),
    (torch.tensor([1.0, 2.0]), "flat list of token ids"),
    (None, "flat list of token ids"),
    ([], "the prompt is empty"),
    ([5, 4096], r"token ids must be in 0\.\.4095"),  # tiny's vocabulary holds 4,096
])
def test_views_of_a_prompt_refuse_what_is_no_prompt(tiny, prompt, says):
    assert tiny.config.vocab_size == 4096
    for make in (lambda: AttentionGrid.of(tiny, prompt), lambda: CacheGrowth.of(tiny, prompt, new_tokens=2),
                 lambda: DecodeStep.of(tiny, prompt)):
        with pytest.raises(KVLibError, match=says):
            make()


def test_a_prompt_as_a_tensor_of_ids_is_a_prompt(tiny):
    ids = tiny.encode("Mary had a little lamb")
    view = AttentionGrid.of(tiny, torch.tensor(ids))
    assert view.tokens == [tiny.decode([i]) for i in ids]


@pytest.mark.parametrize("model", ["tiny", "trace", "tokenizer"])
def test_views_of_a_model_refuse_anything_else(tiny, model):
    wrong = {"tiny": "tiny", "trace": trace_of(tiny, [1, 2]), "tokenizer": tokenization.for_model(tiny)}[model]
    for make in (lambda: AttentionGrid.of(wrong, "Mary"), lambda: CacheGrowth.of(wrong, "Mary"),
                 lambda: DecodeStep.of(wrong, "Mary"), lambda: EmbeddingMap.of(wrong)):
        with pytest.raises(KVLibError, match=r"takes a loaded model, as kvlib.load_model\('tiny'\) returns"):
            make()


def test_attention_grid_refuses_a_trace_of_another_run(tiny):
    assert (tiny.config.n_layer, tiny.config.n_head) == (4, 4)
    want = r"trace= takes the Trace of this very run: 4 layers of weights \(4, 5, 5\) .* for these 5 tokens; got "
    with pytest.raises(KVLibError, match=want + r"4 layers of weights \(4, 7, 7\)"):
        AttentionGrid.of(tiny, IDS, trace=trace_of(tiny, IDS + [11, 12]))
    with pytest.raises(KVLibError, match=want + "a Model"):  # a model where a trace is expected
        AttentionGrid.of(tiny, IDS, trace=tiny)
    with pytest.raises(KVLibError, match=want + "a Tensor"):
        AttentionGrid.of(tiny, IDS, trace=torch.zeros(4, 5, 5))
    with pytest.raises(KVLibError, match=want + r"0 layers of weights \(none\)"):  # a Trace no model has filled
        AttentionGrid.of(tiny, IDS, trace=kvlib.Trace())
    cache = tiny.new_cache()  # a cached step's trace: one new row over 5 keys, not the 5 x 5 grid
    tiny.forward(IDS[:4], cache=cache)
    step = kvlib.Trace()
    tiny.forward(IDS[4:], cache=cache, trace=step)
    with pytest.raises(KVLibError, match=want + r"4 layers of weights \(4, 1, 5\)"):
        AttentionGrid.of(tiny, IDS, trace=step)


@pytest.mark.parametrize("new_tokens", [0, -1, 2.5, "3"])
def test_cache_growth_refuses_a_count_that_is_not_one(tiny, new_tokens):
    with pytest.raises(KVLibError, match="max_new_tokens must be a whole number, at least 1"):
        CacheGrowth.of(tiny, "Mary had", new_tokens=new_tokens)


STEP = r"tiny has layers 0-3 and heads 0-3: pass whole numbers in those ranges"


@pytest.mark.parametrize("layer, head", [(4, 0), (-1, 0), ("0", 0), (0.0, 0), (0, 4), (0, -1), (0, 1.0), (0, "mean")])
def test_decode_step_refuses_a_layer_or_head_the_model_lacks(tiny, layer, head):
    with pytest.raises(KVLibError, match=STEP + f"; got layer {layer!r}, head {head!r}"):
        DecodeStep.of(tiny, "Mary had", layer=layer, head=head)


Q, K = [[0.4, -0.2]], [[0.5, 0.1], [-0.2, 0.4], [0.1, -0.5]]  # 3 tokens, head size 2


@pytest.mark.parametrize("tokens, q, k, v, says", [
    ("abc", Q, K, K, "a step's tokens are a list of strings"),  # a string for a list of three
    ([], torch.zeros(1, 2), torch.zeros(0, 2), torch.zeros(0, 2), "a step's tokens are a list of strings"),
    (TOKENS, "q", K, K, "q must be numbers"),
    (TOKENS, Q, [[0.5, 0.1], [-0.2], [0.1, -0.5]], K, "K must be numbers: .* nested lists of equal lengths"),
    (TOKENS, Q, K, tokenization, "V must be numbers"),
    (TOKENS, [0.4, -0.2], K, K, r"q \[1, hs\] and K, V \[S, hs\] for S = 3 tokens .*got \(2,\), \(3, 2\), \(3, 2\)"),
    (TOKENS, [[0.4, -0.2, 0.1]], K, K, r"got \(1, 3\), \(3, 2\), \(3, 2\)"),
    (TOKENS, Q, K, K[:2], r"got \(1, 2\), \(3, 2\), \(2, 2\)"),
    (TOKENS[:2], Q, K, K, "for S = 2 tokens"),
    (TOKENS, torch.zeros(1, 0), torch.zeros(3, 0), torch.zeros(3, 0), r"\(hs at least 1\)"),
    (TOKENS, Q, K, [[0.5, NAN], [-0.2, 0.4], [0.1, -0.5]], "V holds NaN or infinity"),
    (TOKENS, [[INF, 0.0]], K, K, "q holds NaN or infinity"),
])
def test_decode_step_from_tensors_refuses(tokens, q, k, v, says):
    with pytest.raises(KVLibError, match=says):
        DecodeStep.from_tensors(tokens, q, k, v, "t")


FAMILIES = "families maps each family's name to 2 or more \\(word, token id\\) pairs"


@pytest.mark.parametrize("kwargs, says", [
    ({"dims": 0}, "1, 2 or 3 dimensions, not 0"), ({"dims": 4}, "1, 2 or 3"), ({"dims": "2"}, "1, 2 or 3"),
    ({"dims": True}, "not True"), ({"dims": 2.0}, "not 2.0"),
    ({"digits": -1}, "digits must be a whole number, at least 0"), ({"digits": 1.5}, "digits must be a whole number"),
    ({"families": {}}, FAMILIES),                                   # an empty dict is not the default families
    ({"families": ["king", "queen"]}, FAMILIES),
    ({"families": {"a": ["king", "queen"], "b": ["dog", "cat"]}}, FAMILIES),  # words without their ids
    ({"families": {"a": "king"}}, FAMILIES),
    ({"families": {"a": [("king", 5)], "b": [("dog", 6), ("cat", 7)]}}, FAMILIES),  # a family of one word
    ({"families": {"a": [("king", 5), ("queen", 6)]}}, "3 words in all"),
    ({"families": {"a": [("king", 5), ("queen", 4096)], "b": [("dog", 6), ("cat", 7)]}}, FAMILIES),  # past the vocab
    ({"families": {"a": [("king", 5), ("queen", -1)], "b": [("dog", 6), ("cat", 7)]}}, FAMILIES),
])
def test_embedding_map_refuses(tiny, kwargs, says):
    with pytest.raises(KVLibError, match=says):
        EmbeddingMap.of(tiny, **kwargs)


def test_embedding_map_of_hand_picked_families(tiny):
    fams = {"a": [("x", 5), ("y", 6)], "b": [("z", 7), ("w", 8)]}  # the smallest map: 2 families of 2 words
    view = EmbeddingMap.of(tiny, families=fams, dims=1)
    assert view.ids == [5, 6, 7, 8] and view.labels == ["a", "a", "b", "b"] and view.dims == 1
    assert [len(c) for c in view.coords] == [3] * 4  # the three components, whatever dims shows first


SYSTEM = "You are Puck, a helpful sprite. Answer in verse, briefly, as Shakespeare would. "


@pytest.fixture
def sent(tiny):  # a cache, its view, and one request sent: (pc, view, prompt, Prefill)
    pc = kvlib.PromptCache(tiny, block_size=8, clock=ManualClock())
    view = PromptBlocks(pc)
    prompt = SYSTEM + "Who?"
    return pc, view, prompt, pc.prefill(prompt, tenant="acme")


NOT_OF_THIS = "this Prefill is not of this prompt on this cache: pass the prompt, tenant and cache_control"
ARGS = r"add takes a label \(a str\), what pc.prefill returned, its cost \(a finite number\)"


@pytest.mark.parametrize("change, says", [
    ({"label": 5}, ARGS), ({"result": "res"}, ARGS + ".*got 'one', str"), ({"result": "receipt"}, "got 'one', Receipt"),
    ({"cost": "free"}, ARGS), ({"cost": NAN}, ARGS), ({"cost": INF}, ARGS), ({"gone": -1}, ARGS), ({"gone": "a"}, ARGS),
    ({"prompt": SYSTEM + "Who? And why?"}, NOT_OF_THIS),   # another prompt, longer
    ({"prompt": SYSTEM[:40]}, NOT_OF_THIS),                # shorter
    ({"prompt": SYSTEM.replace("Puck", "Ariel") + "Who?"}, NOT_OF_THIS),
    ({"tenant": "other"}, NOT_OF_THIS),                    # the same prompt, another tenant's keys
    ({"tenant": None}, "a tenant is named by a string"),
    ({"prompt": ""}, "the prompt is empty"),
    ({"prompt": [1.5, 2.5]}, "flat list of token ids"),
    ({"cache_control": 8}, "cache_control marks prefixes in mode='explicit'"),
])
def test_prompt_blocks_refuse_a_request_that_is_not_the_one_sent(sent, change, says):
    pc, view, prompt, res = sent
    args = dict(label="one", tenant="acme", prompt=prompt, result=res, cost=1.0) | change
    if change.get("result") == "receipt":
        args["result"] = res.receipt
    with pytest.raises(KVLibError, match=says):
        view.add(**args)
    assert view.requests == []  # nothing half-added
    view.add("one", "acme", prompt, res, 1.0)  # and the right one still goes in
    assert len(pc.model.encode(prompt)) == 32  # blocks of 8, none reaching the last token: 3 written
    assert [(b["state"], b["start"], b["end"]) for b in view.requests[0]["blocks"]] == [
        ("written", 0, 8), ("written", 8, 16), ("written", 16, 24)]


def test_prompt_blocks_refuse_a_prefill_of_another_cache(tiny, sent):
    pc, view, prompt, _ = sent
    other, prompt = kvlib.PromptCache(tiny, block_size=8, clock=ManualClock()), "Speak, Ariel, of the storm upon the isle. " * 2
    with pytest.raises(KVLibError, match=NOT_OF_THIS):  # its blocks written elsewhere, none in this view's cache
        view.add("two", "acme", prompt, other.prefill(prompt, tenant="acme"), 1.0)


@pytest.mark.parametrize("cache", ["model", "name", "receipt"])
def test_prompt_blocks_show_a_prompt_cache_only(tiny, sent, cache):
    wrong = {"model": tiny, "name": "pc", "receipt": sent[3].receipt}[cache]
    with pytest.raises(KVLibError, match=r"PromptBlocks shows a PromptCache \(kvlib.PromptCache\(model\)\)"):
        PromptBlocks(wrong)


@pytest.fixture(scope="module")
def run(tiny):  # a stream of two requests, served: A's prompt 3 tokens and answer 2, B's 4 and 3
    requests = [serving.Request("A", [5, 6, 7], 2), serving.Request("B", [8, 9, 10, 11], 3)]
    return serving.serve(tiny, requests, max_batch=2)


@pytest.mark.parametrize("runs", ["runs", None, 7, ["a"], "model", "empty run", "dict of names"])
def test_the_timeline_refuses_what_is_no_run(tiny, runs):
    named = {"model": tiny, "empty run": [serving.ServingRun("static", 2, 16, 8)], "dict of names": {"static": "a"}}
    runs = named[runs] if isinstance(runs, str) and runs in named else runs
    with pytest.raises(KVLibError, match="ServingTimeline.of takes runs that served requests: what "
                                         "serving.side_by_side returns, or a list of serving.serve's runs"):
        ServingTimeline.of(runs)


def test_the_timeline_takes_one_run_as_a_list_of_one(run):
    view = ServingTimeline.of(run)
    assert view.requests == [{"label": "A", "prompt": 3, "answer": 2}, {"label": "B", "prompt": 4, "answer": 3}]
    assert [r["policy"] for r in view.runs] == ["continuous"] and view.runs == ServingTimeline.of([run]).runs


def test_the_timeline_says_in_place_what_it_cannot_draw(run):
    empty = ServingTimeline.of([])
    assert empty.summary().startswith("No runs to show: give ServingTimeline.of the runs of serving.side_by_side")
    broken = ServingTimeline.of([run])
    broken.runs = [{"policy": "static"}]  # no cells: as the page, the text says so where it would draw
    data, _ = broken._repr_mimebundle_()
    assert data["text/plain"] == "This view could not draw its data: KeyError('name')"
    assert data["text/html"].startswith("<pre>This view could not draw its data")

