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
