"""Every exercise's check says right to its live answer and wrong to another, with a hint,
and shows the answer only when asked."""

import html

import pytest

import kvlib
from kvlib import exercises

MODELS = {"model": "tiny", "smollm2": "smollm2", "random-gpt2": "random-gpt2"}  # what the notebooks pass, offline


def wrong_like(right):
    if isinstance(right, bool):
        return not right
    if isinstance(right, (int, float)):
        return right * 3 + 7
    if isinstance(right, str):
        return "z" if len(right.strip()) == 1 and right.strip().lower() != "z" else right + " and more"
    if isinstance(right, (list, tuple)):
        return type(right)(list(right) + [-1])
    raise TypeError(f"no wrong answer for {right!r}")


@pytest.fixture(scope="module")
def models():
    loaded = {}
    return lambda name: loaded.setdefault(name, kvlib.load_model(MODELS[name], device="cpu"))


@pytest.mark.parametrize("ex", list(exercises.REGISTRY.values()), ids=lambda e: e.id)
def test_right_and_wrong_answers(ex, models):
    args = [models(name) for name in ex.uses]
    right = ex.answer(*args)
    assert ex.question and ex.hint
    good = exercises.check(ex.id, right, *args)
    assert good.correct is True and "Right" in good.verdict.value and html.escape(repr(right)) in good.answer.value
    bad = exercises.check(ex.id, wrong_like(right), *args)
    assert bad.correct is False and "Hint" in bad.verdict.value
    assert bad.answer.value == ""  # not shown until asked
    bad.reveal.click()
    assert "Answer" in bad.answer.value
    pending = exercises.check(ex.id, ..., *args)
    assert pending.correct is None and "Replace" in pending.verdict.value and pending.answer.value == ""


def test_unknown_exercise_names_the_ids():
    with pytest.raises(ValueError, match="no exercise"):
        exercises.check("99.nothing", 1)


def test_words_match_whatever_their_case_and_spaces():
    ex = exercises.Exercise("00.w", "q", None, "h", "e", (), 0.0)
    assert ex.matches(" paris ", "Paris") and ex.matches("A  little bit", " a little bit")
    assert not ex.matches("Pari", "Paris") and not ex.matches("alittle bit", "a little bit")


def test_ids_match_as_a_list_a_tuple_or_a_tensor():
    import torch

    ex = exercises.Exercise("00.ids", "q", None, "h", "e", (), 0.0)
    assert ex.matches([1, 2, 3], [1, 2, 3]) and ex.matches((1, 2, 3), [1, 2, 3])
    assert ex.matches(torch.tensor([1, 2, 3]), [1, 2, 3])  # a learner's loop may return a tensor
    assert not ex.matches(torch.tensor([1, 2]), [1, 2, 3]) and not ex.matches([1, 2, 4], [1, 2, 3])
    assert not ex.matches("1 2 3", [1, 2, 3]) and not ex.matches(None, [1, 2, 3])


def test_a_number_is_not_a_yes_or_a_no():
    ex = exercises.Exercise("00.b", "q", None, "h", "e", (), 0.0)
    assert ex.matches(False, False) and ex.matches(True, True)
    assert not ex.matches(0, False) and not ex.matches(1, True) and not ex.matches("False", False)
    assert not ex.matches(True, 1)  # and a yes is not the number 1


@pytest.mark.parametrize("ex", [e for e in exercises.REGISTRY.values() if e.tolerance > 0], ids=lambda e: e.id)
def test_a_tolerance_takes_rounding_but_not_another_unit(ex, models):
    right = ex.answer(*[models(name) for name in ex.uses])
    inside, outside = right * (1 + 0.9 * ex.tolerance), right * (1 + 1.1 * ex.tolerance) + 1e-9
    assert ex.matches(inside, right) and not ex.matches(outside, right)
    gib = 2**30 / 1e9
    assert not ex.matches(right / gib, right) and not ex.matches(right * gib, right)  # GiB for GB, or back


def test_07_llama3_8b_128k_gb_refuses_gib(models):
    ex = exercises.REGISTRY["07.llama3_8b_128k_gb"]
    bytes_ = 2 * 32 * 8 * 128 * 2 * 131072  # K and V x layers x KV heads x head size x bf16 bytes x tokens
    assert ex.matches(round(bytes_ / 1e9, 1), ex.answer(models("model")))
    assert not ex.matches(bytes_ / 2**30, ex.answer(models("model")))


def test_no_exercise_may_be_tolerant_enough_to_take_a_wrong_unit():
    with pytest.raises(ValueError, match="tolerance"):
        exercises.exercise("00.loose", hint="h", explain="e", tolerance=0.1)
