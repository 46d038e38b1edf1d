"""plots.py's computed parts: what a figure states, checked against numbers worked out by hand."""

from kvlib import plots


def test_step_trend_is_theil_sen_one_slow_point_does_not_tilt_it():
    lengths = [0, 1000, 2000, 3000, 4000]
    ms = [1 + 0.002 * n for n in lengths]  # 1 ms + 2 ms per 1,000 tokens
    ms[3] = 50  # a busy moment of the machine
    fig = plots.step_seconds_by_context(lengths, ms, "t")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "trend: 1.00 ms + 2.00 ms per 1,000 cached tokens" in labels
