"""View 2, a matrix: rows labelled with their tokens, columns with their dimension.

Each number is printed on its colour; a wide matrix is folded ("dims 0–5 … 62–63 of 64") with
every value on hover. A row just appended slides in and stays marked."""

import traitlets as T

from ..errors import KVLibError
from .base import View, link_for, module, rounded

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
        values = rounded(matrix, HOVER_DIGITS)
        if not values or not isinstance(values[0], list):
            raise KVLibError("Matrix.of takes a 2-D matrix [tokens, dims]; pass one row per token")
        if len(values) != len(tokens):
            raise KVLibError(f"{len(tokens)} token labels for {len(values)} rows: pass one label per row")
        return cls(title=title, rows=list(tokens), values=values, digits=digits,
                   new_row=new_row if new_row >= 0 else -1, link=link or link_for(list(tokens))).check_size()

    def summary(self):
        n = len(self.values[0]) if self.values else 0
        lines = [f"{self.title} ({len(self.values)} × {n})"]
        for t, row in zip(self.rows, self.values):
            shown = " ".join(f"{x:.{self.digits}f}" for x in row[:8]) + (" …" if n > 8 else "")
            lines.append(f"{t!r:>14} {shown}")
        return "\n".join(lines)
