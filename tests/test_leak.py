"""The timing attack on a shared prompt cache, and the plots of notebook 6."""

from types import SimpleNamespace

import matplotlib
import pytest

from kvlib.lessons import leak, longcontext
from kvlib.model.measure import Fed
from kvlib.ui import plots

matplotlib.use("Agg")


def test_a_shared_cache_serves_the_attacker_what_the_victim_sent_and_a_per_tenant_one_does_not(tiny):
    """The attack's times are a lesson's measurement, read by a person: what decides here is what a clock
    cannot change, which of the attacker's requests the cache served, and the work the model did for each."""
    fed = Fed(tiny)
    shared, per_tenant = leak.attacks(fed, n=8, prompt_tokens=64, warmup=2)
    assert (shared.shared, per_tenant.shared) == (True, False)
    assert len(shared.sent) == len(shared.unsent) == len(per_tenant.sent) == 4 and shared.prompt_tokens == 64
    assert shared.hits == (4, 0)  # every secret the victim sent, none that nobody sent
    assert per_tenant.hits == (0, 0)  # the victim's blocks are not the attacker's
    setup = [64] * (4 + 2)  # per cache: the victim's 4 prompts, 2 warm-ups, all computed
    # then the attacker, the caches taking turns, the first alternating every two secrets: a hit computes only the
    # 16 tokens after its 3 cached blocks
    turns = [16, 64, 64, 64, 64, 16, 64, 64] * 2
    assert fed.rows == setup + setup + turns


def test_the_attack_is_sized_to_the_model(tiny):
    gpt2_small = SimpleNamespace(config=longcontext.SHAPES["GPT-2 small"])  # sized from the shape alone: nothing to load
    assert leak.sized_for(tiny) == (40, 256)  # 1.6 billion multiply-adds for 448 tokens: too many
    assert leak.sized_for(tiny, gmacs=2.0) == (40, 448)
    assert leak.sized_for(gpt2_small) == (24, 64)  # GPT-2 small: 5.6 billion even for 64 tokens
    assert leak.sized_for(tiny, gmacs=0.5) == (40, 128)


def test_the_plots_draw_the_times_they_are_given():
    fig = plots.time_to_first_token([64, 128], [10, 20], [2, 3], "ttft")
    (cold, warm), = [fig.axes[0].lines]
    assert (list(cold.get_xdata()), list(cold.get_ydata()), list(warm.get_ydata())) == ([64, 128], [10, 20], [2, 3])
    assert fig.axes[0].get_title() == "ttft" and fig.axes[0].get_ylim()[0] == 0
    sent, unsent = [1.0, 1.1, 1.2, 5.0], [3.0, 3.5, 4.0, 4.5]
    fig = plots.timing_leak([("shared", sent, unsent, 1e-5), ("per tenant", unsent, unsent, 0.5)], bins=4)
    assert len(fig.axes) == 2 and fig.axes[0].get_title() == "shared: Mann-Whitney p = 1e-05"
    # the same 4 bins of 1.0 from 1.0 to 5.0 for both samples (the last one closed): sent falls 3, 0, 0, 1 into
    # them, unsent 0, 0, 2, 2
    heights = [[bar.get_height() for bar in c] for c in fig.axes[0].containers]
    assert heights == [[3, 0, 0, 1], [0, 0, 2, 2]]
    with pytest.raises(ValueError, match="one time of each"):
        plots.time_to_first_token([64, 128], [10], [2, 2], "ttft")
