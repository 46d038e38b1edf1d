"""Tables printed as text, one way for every module: each column as wide as its widest cell,
labels left-aligned and numbers right-aligned, a rule under the header. A Chinese character takes
two columns of a fixed-width font, so widths count it twice."""

from unicodedata import east_asian_width


def width(text):  # columns a monospaced font gives text: a Chinese character takes two
    return sum(2 if east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text, align, columns):  # text filled with spaces to `columns`, on the right ("<") or the left (">")
    fill = " " * max(0, columns - width(text))
    return text + fill if align == "<" else fill + text


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
    widths = [max(width(cell) for cell in column + [row[i] for row in rows]) for i, column in enumerate(names)]

    def line(cells):
        return "  ".join(pad(cell, a, w) for cell, a, w in zip(cells, align, widths))

    head = [line(cells) for cells in zip(*names)]
    return "\n".join(head + ["-" * width(head[0])] + [line(row) for row in rows])
