"""Replicas with a cache each, and a router: hash routing hits on every repeat, random routing only when a
request lands where its prefix is, overflow spreads a busy prefix over machines."""

import math
from types import SimpleNamespace

import pytest

from kvlib import KVLibError, i18n
from kvlib.lessons import routing
from kvlib.model.measure import random_ids
from kvlib.server.blocks import block_keys
from kvlib.ui import plots


def test_prefix_hash_routing_hits_on_every_repeat(tiny):
    requests = routing.resend_pairs(tiny, prompts=8, tokens=40)
    run = routing.simulate(tiny, requests, replicas=4, router="prefix hash")
    assert len(run.served) == 16 and len(run.repeats) == 8
    assert run.repeat_hit_rate == 1.0
    assert all(s.cached_tokens == 32 for s in run.repeats)  # 2 full blocks of 16 before the last token
    assert [s.computed for s in run.served] == [40, 8] * 8  # the model's work: all of a new prompt, a resend's tail
    assert not any(s.hit for s in run.served if not s.repeat)  # a new prompt never hits
    assert len({s.replica for s in run.served}) > 1  # the prompts are spread over the machines


def test_random_routing_hits_exactly_when_a_resend_lands_on_its_first_machine(tiny):
    requests = routing.resend_pairs(tiny, prompts=40, tokens=20)
    run = routing.simulate(tiny, requests, replicas=4, router="random", seed=3)
    assert all(s.hit == (s.replica == s.first_replica) for s in run.repeats)
    assert all(s.computed == (4 if s.hit else 20) for s in run.repeats)  # a miss computes all 20 tokens again
    assert any(s.hit for s in run.repeats) and not all(s.hit for s in run.repeats)
    # 40 resends, each on the right machine with chance 1/4: within 3 standard deviations of a quarter
    assert abs(run.repeat_hit_rate - 1 / 4) <= 3 * math.sqrt(1 / 4 * 3 / 4 / 40)
    one = routing.simulate(tiny, requests[:8], replicas=1, router="random")
    assert one.repeat_hit_rate == 1.0  # one machine: nowhere else to go


def test_random_routing_keeps_a_copy_of_a_prefix_on_every_machine_it_reaches(tiny):
    system = random_ids(tiny, 32, 5)
    requests = [(2.0 * i, system + random_ids(tiny, 8, 100 + i)) for i in range(24)]
    by_hash = routing.simulate(tiny, requests, replicas=4, router="prefix hash")
    at_random = routing.simulate(tiny, requests, replicas=4, router="random", seed=1)
    one_copy = max(by_hash.bytes_held)
    assert sorted(by_hash.bytes_held) == [0, 0, 0, one_copy]
    copies = sum(b > 0 for b in at_random.bytes_held)
    assert copies > 1 and sum(not s.hit for s in at_random.served) == copies  # one miss per machine reached
    assert sum(not s.hit for s in by_hash.served) == 1


def test_overflow_sends_a_busy_prefix_to_other_machines(tiny):
    system = random_ids(tiny, 32, 6)
    busy = [(3.0 * i, system + random_ids(tiny, 8, 200 + i)) for i in range(20)]  # 20 a minute
    over = routing.simulate(tiny, busy, replicas=4, router="prefix hash + overflow", per_minute=5, seed=2)
    home = over.served[0].replica
    assert [s.replica for s in over.served[:5]] == [home] * 5  # the first 5 of the minute go home
    assert home not in {s.replica for s in over.served[5:20]}  # the next 15 of that minute do not
    assert {s.first_replica for s in over.served} == {home}
    assert over.repeat_hit_rate < 1 and sum(b > 0 for b in over.bytes_held) > 1
    calm = [(t * 5, p) for t, p in busy]  # 4 a minute: under the limit, overflow routes as the hash does
    assert [s.replica for s in routing.simulate(tiny, calm, 4, "prefix hash + overflow", per_minute=5).served] == \
           [s.replica for s in routing.simulate(tiny, calm, 4, "prefix hash").served]


def test_the_router_reads_only_the_prompts_first_tokens(tiny):
    a, b = random_ids(tiny, 40, 1), random_ids(tiny, 40, 2)
    assert routing.prefix_hash(a, 16) == routing.prefix_hash(a[:16] + b[16:], 16)
    assert routing.prefix_hash(a, 16) != routing.prefix_hash(b[:1] + a[1:], 16)
    # the pool's own key of the prefix (one hash in kvlib), stable across runs (not Python's salted hash())
    assert routing.prefix_hash(list(range(16)), 16) == block_keys(list(range(16)), "any", [(0, 16)], shared=True)[0].hex()


def test_bad_input_says_what_to_do(tiny):
    requests = routing.resend_pairs(tiny, prompts=1, tokens=20)
    with pytest.raises(KVLibError, match="router must be one of"):
        routing.simulate(tiny, requests, 2, router="round robin")
    with pytest.raises(KVLibError, match="at least 1"):
        routing.simulate(tiny, requests, 0)
    with pytest.raises(KVLibError, match="time order"):
        routing.simulate(tiny, requests[::-1], 2)


def test_resend_plot_draws_a_line_per_router_and_the_chance_line():
    runs = [SimpleNamespace(router=r, replicas=n, repeat_hit_rate=rate)  # out of order: each line runs by replicas
            for r, n, rate in (("random", 4, 0.25), ("prefix hash", 1, 1.0), ("random", 1, 1.0), ("prefix hash", 4, 1.0),
                               ("random", 2, 0.5))]
    ax = plots.resend_hits(runs, "resends").axes[0]
    data = [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()]
    # a line per router in the order they first come, then the chance of landing on the right one of n machines
    assert data == [([1, 2, 4], [1.0, 0.5, 0.25]), ([1, 4], [1.0, 1.0]), ([1, 2, 4], [1, 1 / 2, 1 / 4])]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["router: random", "router: prefix hash",
                                                                    "1 / replicas"]
    assert list(ax.get_xticks()) == [1, 2, 4] and ax.get_title() == "resends"
    i18n.set_language("zh")
    try:  # in Chinese the legend names each router in Chinese, as notebook 6's prose does; a name of one's own stays
        legend = plots.resend_hits(runs + [SimpleNamespace(router="mine", replicas=1, repeat_hit_rate=1.0)], "")
        assert [t.get_text() for t in legend.axes[0].get_legend().get_texts()] == [
            "路由：随机", "路由：按前缀哈希", "路由：mine", "1 / 副本数"]
    finally:
        i18n.set_language("en")
    with pytest.raises(ValueError, match="at least one run"):
        plots.resend_hits([], "resends")
