"""Tables printed as text, one way for every module: each column as wide as its widest cell,
labels left-aligned and numbers right-aligned, a rule under the header."""


def text_table(header, rows, align=None):
    """The lines of a table, joined.

    header: a name per column; a name with "\\n" in it takes several header lines (shorter names
    sit on the last), so a name on the first line can stand over the columns after it.
    rows: a cell per column, each already text (format numbers first, e.g. f"{x:,.1f}").
    align: "<" (left) or ">" (right) per column; by default the first column (the labels) left,
    the others right."""
    align = align or "<" + ">" * (len(header) - 1)
    rows = [[str(cell) for cell in row] for row in rows]
    if len(align) != len(header) or any(len(row) != len(header) for row in rows):
        raise ValueError(f"{len(header)} columns in the header: give each row (and align) one entry per column")
    names = [name.split("\n") for name in header]
    depth = max(map(len, names))
    names = [[""] * (depth - len(lines)) + lines for lines in names]
    widths = [max(len(cell) for cell in column + [row[i] for row in rows]) for i, column in enumerate(names)]

    def line(cells):
        return "  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(cells, align, widths))

    head = [line(cells) for cells in zip(*names)]
    return "\n".join(head + ["-" * len(head[0])] + [line(row) for row in rows])
