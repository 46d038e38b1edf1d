"""plots.py's computed parts: what a figure states, checked against numbers worked out by hand."""

import pytest

from kvlib.ui import plots


def test_step_trend_is_theil_sen_one_slow_point_does_not_tilt_it():
    lengths = [0, 1000, 2000, 3000, 4000]
    ms = [1 + 0.002 * n for n in lengths]  # 1 ms + 2 ms per 1,000 tokens
    ms[3] = 50  # a busy moment of the machine
    ax = plots.step_seconds_by_context(lengths, ms, "t").axes[0]
    measured, trend = ax.get_lines()
    assert (list(measured.get_xdata()), list(measured.get_ydata())) == (lengths, ms)  # every point, the slow one too
    assert list(trend.get_ydata()) == pytest.approx([1 + 0.002 * n for n in lengths])  # through the other four
    assert ax.get_legend_handles_labels()[1] == ["measured (fastest of several repeats)",
                                                 "trend: 1.00 ms + 2.00 ms per 1,000 cached tokens"]
    assert ax.get_title() == "t" and ax.get_ylabel() == "milliseconds per step"


def test_throughput_by_batch_draws_each_series_beside_b_times_its_batch_1():
    fig = plots.throughput_by_batch([1, 8, 32], {"whole steps": [10, 50, 120], "bare matmuls": [40, 300, 1000]}, "t")
    ax = fig.axes[0]
    lines = {tuple(line.get_ydata()) for line in ax.get_lines()}
    assert {(10, 50, 120), (40, 300, 1000), (10, 80, 320), (40, 320, 1280)} <= lines  # measured, and b x batch 1
    assert {t.get_text() for t in ax.texts} == {"12.0x", "25.0x"}  # the largest batch over batch 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "8", "32"]


def test_throughput_by_batch_wants_one_rate_per_batch():
    with pytest.raises(ValueError, match="2 rates for 3 batch sizes"):
        plots.throughput_by_batch([1, 8, 32], {"whole steps": [10, 50]}, "t")


@pytest.mark.slow  # listing the machine's fonts starts fc-list
def test_fonts_installed_after_matplotlib_listed_the_machines_are_found(monkeypatch, tmp_path):
    """matplotlib lists the machine's fonts once and caches the list; make test installs fonts-noto-cjk, maybe
    after a first plot. Given a list holding only matplotlib's own fonts (no CJK family), plots finds every font a
    list made now finds (fonts-noto-cjk's among them where it is installed, so Chinese labels are not boxes), and
    saves the list where matplotlib reads it, so the next import finds them without looking at the disk again."""
    import matplotlib
    from matplotlib import font_manager

    now = {f.name for f in font_manager.FontManager().ttflist}  # what a list made on this machine now holds
    own = [f for f in font_manager.fontManager.ttflist if f.fname.startswith(matplotlib.get_data_path())]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", own)  # as if cached before the others were installed
    monkeypatch.setattr(matplotlib, "get_cachedir", lambda: str(tmp_path))  # the user's own cache left alone
    assert not {f.name for f in own} & set(plots.CJK_FONTS)
    assert plots._installed() >= now
    saved, = tmp_path.glob("fontlist-v*.json")  # the name matplotlib's import reads
    assert {f.name for f in font_manager.json_load(saved).ttflist} >= now
