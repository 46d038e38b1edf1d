"""The one text-table helper: columns as wide as their widest cell, aligned, a rule under the header."""

import pytest

from kvlib.texttable import text_table


def test_columns_fit_their_widest_cell_labels_left_numbers_right():
    assert text_table(["model", "bytes"], [["tiny", "1,024"], ["GPT-2 small", 9]]).splitlines() == [
        "model        bytes",
        "------------------",
        "tiny         1,024",
        "GPT-2 small      9"]


def test_a_name_over_two_lines_stands_above_the_columns_after_it():
    lines = text_table(["part", "32 tokens\ncached", "uncached"], [["logits", "38.6", "39"]], align="<>>").splitlines()
    assert lines == ["        32 tokens          ",
                     "part       cached  uncached",
                     "---------------------------",
                     "logits       38.6        39"]


def test_rows_must_match_the_header():
    with pytest.raises(ValueError, match="one entry per column"):
        text_table(["a", "b"], [["only one"]])
    with pytest.raises(ValueError, match="one entry per column"):
        text_table(["a", "b"], [], align="<")
