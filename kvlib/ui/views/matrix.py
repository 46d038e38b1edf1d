"""View 2, a matrix: rows labelled with their tokens, columns with their dimension.

Each number is printed on its colour; a wide matrix is folded ("dims 0–5 … 62–63 of 64") with
every value on hover. A row just appended slides in and stays marked."""

import reprlib

import traitlets as T

from ...errors import KVLibError, is_count
from .base import View, link_for, module, numbers, rounded

HOVER_DIGITS = 4  # what a hover shows; the cells print `digits`


class Matrix(View):
    _esm = module("matrix.js")
    title = T.Unicode("").tag(sync=True)
    rows = T.List().tag(sync=True)     # one token string per row
    values = T.List().tag(sync=True)   # [rows][columns], to HOVER_DIGITS
    digits = T.Int(2).tag(sync=True)   # decimals printed in the cells
    new_row = T.Int(-1).tag(sync=True)  # the row just appended (-1: none)

    @classmethod
    def of(cls, matrix, tokens, title="", digits=2, new_row=-1, link=None):
        """matrix: [T, n] tensor (or nested list), tokens: T strings."""
        m = numbers(matrix, "Matrix.of's matrix")
        if m.dim() != 2 or 0 in m.shape:
            raise KVLibError(f"Matrix.of takes a 2-D matrix [tokens, dims], got shape {tuple(m.shape)}: pass one row "
                             "(of at least one number) per token")
        if not (isinstance(tokens, (list, tuple)) and all(isinstance(t, str) for t in tokens)) or len(tokens) != len(m):
            raise KVLibError(f"{len(m)} rows labelled by {reprlib.repr(tokens)}: pass a list of strings, one label "
                             "per row")
        if not (is_count(new_row) and -1 <= new_row < len(m) and is_count(digits) and 0 <= digits <= HOVER_DIGITS):
            raise KVLibError(f"new_row is a row of the {len(m)} (or -1, none) and digits 0 to {HOVER_DIGITS}; got "
                             f"new_row {new_row!r}, digits {digits!r}")
        return cls(title=title, rows=list(tokens), values=rounded(m, HOVER_DIGITS), digits=int(digits),
                   new_row=int(new_row), link=link or link_for(list(tokens))).check_size()

    def summary(self):
        n = len(self.values[0]) if self.values else 0
        lines = [f"{self.title} ({len(self.values)} × {n})"]
        for t, row in zip(self.rows, self.values):
            shown = " ".join(f"{x:.{self.digits}f}" for x in row[:8]) + (" …" if n > 8 else "")
            lines.append(f"{t!r:>14} {shown}")
        return "\n".join(lines)
