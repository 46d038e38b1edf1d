import json
import time

import pytest
import torch

import kvlib
from kvlib.model import measure, models
from kvlib.server.generate import generate
from kvlib.server.prompt_cache import PromptCache
from kvlib.tools import bench


@pytest.fixture
def events(monkeypatch):
    """Records "sync" for every device synchronisation and "clock" for every perf_counter read, in order."""
    log = []
    real_clock = time.perf_counter

    def clock():
        log.append("clock")
        return real_clock()

    monkeypatch.setattr(models, "synchronize", lambda device: log.append("sync"))
    monkeypatch.setattr(time, "perf_counter", clock)
    return log


def every_clock_read_follows_a_sync(log):
    reads = [i for i, e in enumerate(log) if e == "clock"]
    return bool(reads) and all(i > 0 and log[i - 1] == "sync" for i in reads)


def test_synchronize_waits_for_the_device_it_is_given(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append(("mps", None)))
    models.synchronize("cpu")
    assert calls == []  # the CPU runs each call as it is made: nothing to wait for
    models.synchronize("cuda:1")
    models.synchronize(torch.device("mps"))
    assert calls == [("cuda", torch.device("cuda:1")), ("mps", None)]


def test_generate_reads_the_clock_only_after_the_device_is_done(tiny, events):
    gen = generate(tiny, "To be", 3, stop_at_eos=False)
    assert len(gen.step_seconds) == 3
    assert events == ["sync", "clock"] * 6  # before and after each of the 3 steps


def test_prefill_seconds_wait_for_the_device(tiny, events):
    PromptCache(tiny, block_size=4).prefill("To be, or not to be")
    assert events.count("clock") >= 2 and every_clock_read_follows_a_sync(events)


def test_timed_waits_on_both_sides_of_the_work(events):
    out, seconds = measure.timed(lambda: events.append("work") or 7, "cpu")
    assert out == 7 and isinstance(seconds, float)
    assert events == ["sync", "clock", "work", "sync", "clock"]


def test_one_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # not 1, which a context that never restored would leave too
    try:
        with measure.one_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_transformers_arrivals_wait_for_the_device(events):
    arrivals = bench.Arrivals("cpu")
    arrivals.put(torch.tensor([1]))
    assert events == ["sync", "clock"] and len(arrivals.times) == 1


def test_read_bandwidth_reads_the_memory_of_the_device_it_measures(monkeypatch):
    devices = []
    real_ones = torch.ones
    monkeypatch.setattr(torch, "ones", lambda *a, device=None, **k: devices.append(device) or real_ones(*a, **k))
    assert isinstance(measure.read_bandwidth("cpu", nbytes=2**20, repeats=1), float)
    assert devices == ["cpu"]


def test_gpt2_head_is_a_contiguous_copy_of_its_token_table(tiny):
    head, table = tiny.params["lm_head.weight"], tiny.params["wte.weight"]
    assert head.is_contiguous() and head.shape == (tiny.config.n_embd, tiny.config.vocab_size)
    assert torch.equal(head, table.T)
    # a decode step reads the head whole but only one row of each lookup table
    every = sum(t.numel() for k, t in tiny.params.items() if k != "h") + \
        sum(t.numel() for layer in tiny.params["h"] for t in layer.values())
    lookups = table.numel() + tiny.params["wpe.weight"].numel()
    assert measure.step_weight_bytes(tiny) == (every - lookups) * 4


@pytest.mark.parametrize("batch", [1, 32])
def test_bare_matmuls_are_one_token_times_every_matrix_of_the_step(tiny, monkeypatch, batch):
    """What is timed, pinned without timing it (seconds on a shared machine say nothing): each run multiplies
    one token's vector per sequence of the batch by every weight matrix of every layer and by the output head,
    each once."""
    real, seen = torch.mm, []

    def spy(x, w):
        seen.append((tuple(x.shape), w.data_ptr()))
        return real(x, w)
    monkeypatch.setattr(torch, "mm", spy)
    seconds = measure.bare_matmul_seconds(tiny, repeats=3, batch=batch)
    matrices = [w for layer in tiny.params["h"] for w in layer.values() if w.ndim == 2] + [tiny.params["lm_head.weight"]]
    assert len(matrices) == 4 * 4 + 1  # per layer: QKV, output, two feed-forward; then the head
    one_run = [((batch, w.shape[0]), w.data_ptr()) for w in matrices]
    assert seen == one_run * 4 and isinstance(seconds, float)  # a warm-up run, then 3 timed


def test_decode_needs_two_tokens_to_time_between(tiny):
    with pytest.raises(kvlib.KVLibError, match="at least 2 new tokens"):
        bench.decode_rates(tiny, None, 4, 1)


def test_suite_writes_json_table_and_plots(tmp_path):
    lines = []
    r = bench.suite(tmp_path, names=("tiny",), prompts=(4, 8), cached_tokens=3, cache_prompt_tokens=40,
                    say=lines.append)
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["models"].keys() == {"tiny"} and saved["seconds"] == pytest.approx(r["seconds"])
    assert {"machine", "bandwidth_bytes_per_second", "models", "seconds", "plots"}.issubset(saved)  # the format
    assert saved["machine"]["device"] == "cpu" and saved["machine"]["gpu"] is None
    t = saved["models"]["tiny"]
    assert {"weight_bytes", "floor_seconds", "bare_matmul_seconds", "decode", "time_to_first_token",
            "kv_bytes"} <= t.keys()
    assert [d["prompt_len"] for d in t["decode"]] == [4, 8]
    for d in t["decode"]:
        assert d["tokens_per_second"].keys() == set(bench.LABELS) == d["fraction_of_floor"].keys()
        assert all(isinstance(v, float) for v in d["tokens_per_second"].values())  # the format; a rate is the machine's
        assert d["same_tokens"] and d["new_tokens"] == {"cached": 3, "uncached": 3}
        assert d["fraction_of_floor"]["kvlib, cached"] == pytest.approx(
            t["floor_seconds"] * d["tokens_per_second"]["kvlib, cached"])
    assert t["time_to_first_token"]["seconds"].keys() == {"none", "cold", "warm"}
    p = t["prefill"]  # kvlib against transformers on the same 40-token prompt
    assert p["prompt_len"] == 40 and p["seconds"].keys() == {"kvlib", "transformers"}
    assert p["kvlib_over_transformers"] == pytest.approx(p["seconds"]["transformers"] / p["seconds"]["kvlib"])
    assert t["time_to_first_token"]["warm_cached_tokens"] == 16  # 24 shared tokens: one 16-token block
    kv = t["kv_bytes"]
    assert kv["tokens"] == [4 + 2, 8 + 2]  # the prompt and every new token but the last, which is never fed
    assert kv["measured"] == kv["formula"] == [n * 4 * 2 * 4 * 64 * 4 for n in kv["tokens"]]
    for name in saved["plots"]:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert len(saved["plots"]) == 4
    table = (tmp_path / "bench.md").read_text()
    assert "| tiny | 8 |" in table and "| tiny | 40 tokens |" in table and table in lines
    b = t["batches"]  # JSON keys are strings
    assert b["tokens_per_second"].keys() == b["over_batch_1"].keys() == {"1", "8", "32"}
    assert b["over_batch_1"]["1"] == 1 and b["over_batch_1"]["32"] == pytest.approx(
        b["tokens_per_second"]["32"] / b["tokens_per_second"]["1"])
    assert f"| tiny | 32 | {b['tokens_per_second']['32']:.1f} |" in table
    assert any("prompt 8:" in line for line in lines)  # progress as it goes
