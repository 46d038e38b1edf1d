"""Notebook 4's toy prefill: every number its cells print, checked against arithmetic done here by hand
(small integers worked out in the comments, and softmax from math.exp), never by the code that printed it.

The toy's cells are run as the notebook runs them (from the one that makes the toy to the one before the
real head); each printed matrix is cut out under its title, and each worked sum is redone here."""

import ast
import contextlib
import io
import json
import math
import re
from pathlib import Path

import pytest
import torch

from kvlib.lessons import attention
from kvlib.ui import views

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "04_attention.ipynb"
INF = float("-inf")
R2 = math.sqrt(2)  # √ of the head's size, 2

# the toy's givens: 4 tokens of 3 numbers, W_Q, W_K, W_V of 3 x 2
TOKENS = ["The", " king", " is", " dead"]
E = [[1, 0, 1], [0, 2, 1], [1, 1, 0], [0, 1, 2]]
WQ = [[0, 1], [-1, 0], [0, 0]]
WK = [[1, 1], [-1, 0], [1, 1]]
WV = [[1, 1], [1, 1], [1, -1]]
# by hand, a row of E against each column of W: W_Q's columns are (0, -1, 0) and (1, 0, 0), so a token's query is
# (-its 2nd number, its 1st number)
Q = [[0, 1], [-2, 0], [-1, 1], [-1, 0]]
# W_K's columns (1, -1, 1) and (1, 0, 1): (1st - 2nd + 3rd, 1st + 3rd)
K = [[2, 2], [-1, 1], [0, 1], [1, 2]]
# W_V's columns (1, 1, 1) and (1, 1, -1): (the sum, 1st + 2nd - 3rd)
V = [[2, 0], [3, 1], [2, 2], [3, -1]]
# each query against each key, before dividing by √2; e.g. ' dead' (-1, 0) against ' king' (-1, 1): 1 + 0 = 1
DOTS = [[2, 1, 1, 2],
        [-4, 2, 0, -2],
        [0, 2, 1, 1],
        [-2, 1, 0, -1]]
SCORES = [[d / R2 for d in row] for row in DOTS]
MASKED = [[s if j <= i else INF for j, s in enumerate(row)] for i, row in enumerate(SCORES)]


def softmax(row):  # plain Python: e^x over the total, e^-inf = 0
    e = [math.exp(x) if x != INF else 0.0 for x in row]
    return [x / sum(e) for x in e]


WEIGHTS = [softmax(row) for row in MASKED]  # the last row: 0.065, 0.539, 0.266, 0.131
OUT = [[sum(w * V[j][c] for j, w in enumerate(row)) for c in range(2)] for row in WEIGHTS]
KT = [list(col) for col in zip(*K)]
BLOCKS = {  # a printed block's title starts with ... : (its numbers by hand, decimals printed)
    "E ": (E, 0), "W_Q": (WQ, 0), "W_K": (WK, 0), "W_V": (WV, 0), "Q = ": (Q, 0), "K = ": (K, 0), "V = ": (V, 0),
    "Kᵀ": (KT, 0), "scores": (SCORES, 2), "masked": (MASKED, 2), "weights": (WEIGHTS, 2), "out": (OUT, 2),
}
NUMBER = r"−∞|-?\d+(?:\.\d+)?"


def close(printed, exact, decimals):  # a printed number is the exact one, rounded to what it shows
    if exact == INF:
        return printed == INF
    return abs(printed - exact) <= 0.5 * 10 ** -decimals + 1e-9


def flat(rows):
    return [x for row in rows for x in row]


def value(text):
    return INF if text == "−∞" else float(text)


def test_the_toy_head_is_the_arithmetic_by_hand():
    toy = attention.toy_prefill()
    assert toy.tokens == TOKENS
    for got, want in ((toy.E, E), (toy.WQ, WQ), (toy.WK, WK), (toy.WV, WV), (toy.Q, Q), (toy.K, K), (toy.V, V),
                      (toy.scores, SCORES), (toy.masked, MASKED), (toy.weights, WEIGHTS), (toy.out, OUT)):
        assert flat(got.tolist()) == pytest.approx(flat(want), abs=1e-12)
    assert [round(w, 2) for w in WEIGHTS[3]] == [0.06, 0.54, 0.27, 0.13]  # ' dead' looks most at ' king'


def toy_cells():
    """The notebook's code cells from the one that makes the toy to the last before the real head."""
    code = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    first = next(i for i, s in enumerate(code) if "toy_prefill()" in s)
    last = next(i for i, s in enumerate(code) if "attention.explain(" in s)
    return code[first:last]


def run(cells):  # -> (what the cells printed, the value of each cell's last expression), as Jupyter runs them
    names, printed, shown = {"attention": attention, "torch": torch, "views": views, "math": math}, io.StringIO(), []
    with contextlib.redirect_stdout(printed):
        for source in cells:
            tree = ast.parse(source)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<cell>", "exec"), names)
            shown.append(eval(compile(ast.Expression(last.value), "<cell>", "eval"), names) if last else None)
    return printed.getvalue(), shown


def titles(line):  # -> [(column, title key)] when the line holds only block titles, side by side; else []
    segments = [(m.start(), m.group()) for m in re.finditer(r"\S.*?(?=\s{3,}|$)", line)]
    keys = [(at, next((t for t in BLOCKS if text.startswith(t)), None)) for at, text in segments]
    return keys if keys and all(t for _, t in keys) else []


def blocks(lines):
    """Printed matrices under their titles -> ({title: [[numbers] per row]}, the lines they took). Blocks printed
    side by side share lines: each keeps the columns from its title's start to the next title's."""
    found, used, i = {}, set(), 0
    while i < len(lines):
        starts = titles(lines[i])
        if not starts:
            i += 1
            continue
        used.add(i)
        rows = {t: [] for _, t in starts}
        i += 1
        while i < len(lines) and lines[i].strip() and not titles(lines[i]) and not re.search(r"[=×^]", lines[i]):
            used.add(i)
            for k, (at, t) in enumerate(starts):
                part = lines[i][at:starts[k + 1][0] if k + 1 < len(starts) else None]
                part = re.sub(r"#\d+", "", part)  # Kᵀ's rows are labelled by number: #1, #2
                numbers = [value(x) for x in re.findall(NUMBER, part)]
                if numbers:
                    rows[t].append(numbers)
            i += 1
        assert not set(rows) & set(found), f"{set(rows) & set(found)} printed twice"
        found.update(rows)
    return found, used


def products(side):  # "0×0 + 1×(-1) + 2×0" -> [(0, 0), (1, -1), (2, 0)]
    return [tuple(float(x.strip("()")) for x in term.split("×")) for term in side.split(" + ")]


def test_every_number_the_toy_prints_is_the_arithmetic_by_hand():
    printed, shown = run(toy_cells())
    lines = printed.splitlines()
    found, used = blocks(lines)
    assert sorted(found) == sorted(BLOCKS), found.keys()  # every part of the prefill is printed
    for title, rows in found.items():
        want, decimals = BLOCKS[title]
        assert len(rows) == len(want) and all(len(r) == len(w) for r, w in zip(rows, want)), (title, rows)
        for r, w in zip(rows, want):
            assert all(close(a, b, decimals) for a, b in zip(r, w)), (title, r, w)

    rows_of = [E, Q, [[round(w, 2) for w in row] for row in WEIGHTS]]  # what a worked sum may take its rows from: as printed
    cols_of = [[list(c) for c in zip(*m)] for m in (WQ, WK, WV, KT, V)]
    checked = set()
    for n, line in enumerate(lines):
        if n in used:
            continue
        for sums in re.finditer(r"((?:\(?-?[\d.]+\)?×\(?-?[\d.]+\)?(?: \+ )?)+) = (-?[\d.]+)", line):
            terms = products(sums.group(1))
            a, b = [x for x, _ in terms], [y for _, y in terms]
            assert any(a == row for m in rows_of for row in m), (line, a)
            assert any(b == col for m in cols_of for col in m), (line, b)
            decimals = len(sums.group(2).partition(".")[2])  # the total is the sum of the products as written
            assert abs(sum(x * y for x, y in terms) - float(sums.group(2))) <= 0.5 * 10 ** -decimals + 1e-9, line
            checked.add(n)
        if m := re.search(r"the grid's (-?[\d.]+) and (-?[\d.]+) come from the weights unrounded", line):
            assert close(float(m.group(1)), OUT[3][0], 2) and close(float(m.group(2)), OUT[3][1], 2), line
        if m := re.search(r"= (-?\d+), / √2 = (-?[\d.]+)", line):  # a score: its dot product over √2
            assert any(int(m.group(1)) == d for row in DOTS for d in row)
            assert close(float(m.group(2)), int(m.group(1)) / R2, 2), line
        if line.startswith("e^"):  # softmax of ' dead''s row, worked out, and the weight of ' king'
            exps, rest = line.split(" = ", 1)
            assert [float(x) for x in re.findall(r"e\^(-?[\d.]+)", exps)] == [round(s, 2) for s in SCORES[3]]
            terms, total, share = rest.split(" = ", 1)[0], rest.split(" = ")[1].split(";")[0], rest.rsplit(" = ", 1)[1]
            assert [float(x) for x in terms.split(" + ")] == [round(math.exp(s), 2) for s in SCORES[3]]
            assert close(float(total), sum(math.exp(s) for s in SCORES[3]), 2)
            assert "' king' gets" in rest and close(float(share), WEIGHTS[3][1], 2)
            checked.add(n)
        if line.startswith("Adding 0 in place of −∞"):  # 'The' with its scores all kept: 2, 1, 1, 2 over √2
            leak, kept = re.findall(r"\d\.\d\d", line)
            kept_scores = [math.exp(d / R2) for d in DOTS[0]]
            assert close(float(leak), sum(kept_scores[1:]) / sum(kept_scores), 2) and float(kept) == 0
            checked.add(n)
        if line.startswith("What you should see"):  # ' dead' takes 54 % from ' king'
            assert f"{WEIGHTS[3][1]:.0%} of its output from ' king'" in line
            checked.add(n)
    unchecked = [line for n, line in enumerate(lines) if n not in used | checked and re.search(r"\d", line)
                 and not re.fullmatch(r"[^\d]*(\[\d+ × \d+\][^\d]*)*", line)]
    assert not unchecked, unchecked

    step = next(v for v in shown if isinstance(v, views.DecodeStep))  # the view of the last row, part by part
    assert step.tokens == TOKENS and step.prefill and step.toy
    last = {"q": [Q[3]], "K": K, "V": V, "scores": [SCORES[3]], "weights": [WEIGHTS[3]], "out": [OUT[3]]}
    for part, want in last.items():
        assert flat(step.parts[part]) == pytest.approx(flat(want), abs=1e-4), part


def test_show_refuses_a_part_it_does_not_know():
    with pytest.raises(ValueError, match="show takes parts among E, WQ"):
        attention.show(attention.toy_prefill(), "Z")
