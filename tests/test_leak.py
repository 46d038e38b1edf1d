"""The timing attack on a shared prompt cache, and the plots of notebook 6."""

import matplotlib
import numpy as np
from matplotlib.figure import Figure
import pytest

from kvlib import leak, plots

matplotlib.use("Agg")


@pytest.mark.slow
def test_a_shared_cache_leaks_and_a_per_tenant_one_does_not(tiny):
    n, tokens = leak.sized_for(tiny)
    shared = leak.attack(tiny, True, n=n, prompt_tokens=tokens)
    assert len(shared.sent) == len(shared.unsent) == n // 2
    assert shared.medians[0] < shared.medians[1] and shared.pvalue < 1e-3  # hits are faster, detectably
    apart = leak.attack(tiny, False, n=n, prompt_tokens=tokens)
    assert apart.pvalue > 1e-4  # per-tenant: nothing to see (fails by chance about once in 10,000 runs)


def test_the_attack_is_sized_to_the_model(tiny, random_gpt2):
    assert leak.sized_for(tiny) == (60, 448)  # 1.6 billion multiply-adds for 448 tokens
    assert leak.sized_for(random_gpt2) == (30, 64)  # GPT-2 small: 5.6 billion even for 64 tokens
    assert leak.sized_for(tiny, gmacs=0.5) == (60, 128)


def test_plots_return_figures():
    fig = plots.time_to_first_token([64, 128], [10, 20], [2, 2], "ttft")
    assert isinstance(fig, Figure) and len(fig.axes[0].lines) == 2
    rng = np.random.default_rng(0)
    fig = plots.timing_leak([("shared", rng.random(10), rng.random(10) + 1, 1e-5),
                             ("per tenant", rng.random(10), rng.random(10), 0.5)])
    assert isinstance(fig, Figure) and len(fig.axes) == 2 and "p = 1.0e-05" in fig.axes[0].get_title()
    import pytest
    with pytest.raises(ValueError, match="one time of each"):
        plots.time_to_first_token([64, 128], [10], [2, 2], "ttft")
