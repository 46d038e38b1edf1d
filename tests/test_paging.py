"""The paging simulation: exact slot counts on hand-made requests, and the vLLM paper's picture on a stream."""

import pytest

from kvlib import KVLibError
from kvlib.lessons import paging
from kvlib.model import measure


def test_one_request_counted_step_by_step():
    # a 3-token prompt and 2 output tokens: it holds 3, 4, 5 tokens over 3 steps
    r = paging.simulate([(3, 2)], block_size=4, reserve=8)
    assert r["contiguous"] == {"allocated": 3 * 8, "used": 3 + 4 + 5, "waste": 0.5}
    assert r["paged"] == {"allocated": 4 + 4 + 8, "used": 12, "waste": 0.25}  # a second block at the 5th token


def test_finished_sequences_and_the_default_reserve():
    r = paging.simulate([16, 17], block_size=16)  # bare ints: finished sequences; reserve = the longest, 17
    assert (r["contiguous"]["allocated"], r["contiguous"]["used"]) == (34, 33)
    assert r["paged"]["allocated"] == 16 + 32 and r["paged"]["waste"] == pytest.approx(15 / 48)
    r = paging.simulate([(3, 2), (1, 0)], block_size=4)
    assert r["contiguous"]["allocated"] == 4 * 5 and r["paged"]["allocated"] == 16 + 4 and r["paged"]["used"] == 13
    assert paging.simulate([(5, 3)], block_size=1)["paged"]["waste"] == 0  # blocks of one token waste nothing


def test_a_stream_wastes_what_the_paper_measured():
    lengths = measure.request_lengths(500, seed=1)
    r = paging.simulate(lengths, block_size=16, reserve=2048)
    assert r["contiguous"]["used"] == r["paged"]["used"]
    assert r["contiguous"]["waste"] > 0.5  # Kwon et al. 2023: 20.4-38.2 % of the memory held tokens
    assert r["paged"]["waste"] < 0.04  # and under 4 % is wasted with paging
    # at most one partly empty block per sequence per step
    steps = sum(o + 1 for _, o in lengths)
    assert r["paged"]["allocated"] - r["paged"]["used"] <= 15 * steps


def test_request_lengths_are_reproducible_and_bounded():
    a = measure.request_lengths(200, seed=3, max_len=300)
    assert a == measure.request_lengths(200, seed=3, max_len=300) != measure.request_lengths(200, seed=4, max_len=300)
    assert len(a) == 200 and all(p >= 1 and o >= 1 and p + o <= 300 for p, o in a)


def test_block_tables_take_any_free_blocks():
    free = [7, 2, 9, 4, 0]
    assert paging.block_table(20, free, block_size=16) == [7, 2]  # 2 blocks, not neighbours
    assert paging.block_table(16, free, block_size=16) == [9] and free == [4, 0]
    with pytest.raises(KVLibError, match="free"):
        paging.block_table(40, free, block_size=16)


def test_bad_input():
    with pytest.raises(KVLibError, match="reserve at least 9"):
        paging.simulate([(4, 5)], reserve=8)
    with pytest.raises(KVLibError, match="at least one request"):
        paging.simulate([])
    with pytest.raises(KVLibError, match="block_size"):
        paging.simulate([3], block_size=0)
    with pytest.raises(KVLibError, match=r"n \(requests\) must be a whole number, at least 1, not 0"):
        measure.request_lengths(0)
    with pytest.raises(KVLibError, match="max_len .* at least 2, not 0"):
        measure.request_lengths(3, max_len=0)
