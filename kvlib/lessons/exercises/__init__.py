"""Exercises: predict, run, check. The notebooks' `exercise` cells call `check`.

Each exercise is registered under an id such as "02.gpt2_tokens" (notebook, name) with a
function that computes its answer live from the model the notebook passes in, so an
answer is never typed in and stays right on tiny, SmolLM2 or GPT-2. `check` says right
or wrong, gives the hint when wrong, and shows the answer and its explanation only when
the learner presses "Show the answer". Where the learner writes a function (notebook 5's
cached loop), the exercise's `run` calls it, watching how it reaches its result, and may
refuse a right result reached the wrong way (a loop that recomputes instead of using its cache). Definitions live beside this file, one module
per notebook (n01.py ...), and are checked by tests with a right and a wrong answer.
"""

import html
import importlib
import math
import pkgutil
from dataclasses import dataclass

import ipywidgets as W

from ...i18n import local, t
from ...model.models import KVLibError


@dataclass(frozen=True)
class Exercise:
    id: str
    question: str
    answer: object       # callable(*models) -> the right answer, computed live
    hint: object         # a str, or one per language ({"en": ..., "zh": ...}: kvlib.i18n)
    explain: object      # why; may use {answer}; a str or one per language
    uses: tuple          # what the notebook passes, for the tests: "model" (its default), "smollm2", ...
    tolerance: float     # numbers: relative tolerance (0: exact)
    run: object = None   # where the guess is a function the learner wrote: run(fn, *args) -> (what it returned,
                         # None, or why that is wrong however right it looks: a str or one per language)

    def matches(self, guess, right):
        if isinstance(right, bool):  # True/False only: 0 and 1 are numbers, not a yes or a no
            return isinstance(guess, bool) and guess == right
        if isinstance(right, str):  # a word: case and spaces do not count (" Paris", "paris")
            return isinstance(guess, str) and words(guess) == words(right)
        if isinstance(right, (list, tuple)):  # ids: a list, a tuple or a tensor of them
            guess = guess.tolist() if hasattr(guess, "tolist") else guess
            return isinstance(guess, (list, tuple)) and list(guess) == list(right)
        if not isinstance(right, (int, float)):
            return guess == right
        if isinstance(guess, bool):
            return False
        try:
            return math.isclose(float(guess), float(right), rel_tol=self.tolerance, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False


def words(text):
    return " ".join(text.split()).casefold()


# GiB are 7.4 % bigger than GB (2**30 against 10**9 bytes), and a unit mistake must not pass as a
# rounding difference: no tolerance reaches half that gap
MAX_TOLERANCE = 0.03


REGISTRY = {}


def exercise(id, hint, explain, uses=("model",), tolerance=0.0, run=None):
    """Register the decorated function as the live answer of exercise `id`; its docstring is the question.
    run: for an exercise whose guess is the learner's function (see Exercise.run)."""
    if not 0 <= tolerance <= MAX_TOLERANCE:
        raise ValueError(f"exercise {id!r}: tolerance {tolerance} is outside 0..{MAX_TOLERANCE}")

    def register(fn):
        if id in REGISTRY:
            raise ValueError(f"exercise {id!r} is defined twice")
        REGISTRY[id] = Exercise(id, (fn.__doc__ or "").strip(), fn, hint, explain, tuple(uses), tolerance, run)
        return fn
    return register


class Check(W.VBox):
    """The verdict on one guess, with the answer behind a button."""

    def __init__(self, ex, guess, args):
        self.exercise, self.args, self.correct = ex, args, None
        self.verdict, self.answer = W.HTML(), W.HTML()
        self.reveal = W.Button(description=t("check.reveal"), icon="eye", layout=W.Layout(width="auto"))
        self.reveal.on_click(lambda _: self.show_answer())
        fault = None
        if guess is not Ellipsis and ex.run is not None:
            guess, fault = ex.run(guess, *args)  # the learner's function, run and watched: what it returned
        if guess is Ellipsis:
            self.verdict.value = t("check.pending")
        else:
            self.correct = fault is None and ex.matches(guess, ex.answer(*args))
            hint = local(ex.hint if fault is None else fault)  # what the run saw, when it saw something wrong
            self.verdict.value = (t("check.right") if self.correct else
                                  t("check.wrong", guess=html.escape(repr(guess)), hint=html.escape(hint)))
            if self.correct:
                self.show_answer()
        super().__init__([self.verdict, self.reveal, self.answer])

    def show_answer(self):
        right = self.exercise.answer(*self.args)
        why = local(self.exercise.explain).format(answer=right)
        self.answer.value = t("check.answer", answer=html.escape(repr(right)), why=html.escape(why))
        self.reveal.layout.display = "none"


def check(id, guess, *args):
    """Check a prediction for exercise `id`; args are what its answer is computed from (usually the model)."""
    if id not in REGISTRY:
        raise KVLibError(f"no exercise {id!r}: the ids are {', '.join(sorted(REGISTRY))}")
    return Check(REGISTRY[id], guess, args)


for _module in pkgutil.iter_modules(__path__):  # register every notebook's exercises
    importlib.import_module(f"{__name__}.{_module.name}")
