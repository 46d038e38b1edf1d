import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow  # subprocesses and whole-model runs: make test only



def kvlib_cli(*args):
    return subprocess.run([sys.executable, "-m", "kvlib", *args], capture_output=True, text=True, timeout=600)


def test_generate_streams_then_shows_the_cache_per_layer(tiny):
    r = kvlib_cli("generate", "To be, or not", "--model", "tiny", "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("To be, or not")
    n = len(tiny.encode("To be, or not")) + 7
    for i in range(tiny.config.n_layer):
        assert f"layer  {i}: K (4, {n}, 64)  V (4, {n}, 64)  {n * 4 * 64 * 4 * 2:,} bytes" in r.stdout
    assert f"{8192:,} bytes per token" in r.stdout


def test_generate_reports_bad_input_without_a_traceback():
    r = kvlib_cli("generate", "", "--model", "tiny")
    assert r.returncode != 0 and "empty" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("model", ["random-gpt2", "smollm2"])
def test_bench_runs_all_four_side_by_side(model):
    r = kvlib_cli("bench", "--model", model, "--prompt-tokens", "4", "--new-tokens", "3", "--cache-prompt-tokens", "40")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Model({model!r}")
    for label in ("kvlib, cached", "transformers, cached", "kvlib, uncached", "transformers, uncached"):
        assert label in r.stdout
    assert "same tokens in all four runs: True" in r.stdout
    assert "bandwidth floor" in r.stdout and "bare weight matmuls" in r.stdout
    assert "warm receipt: 40 input, 16 cached, 16 written" in r.stdout  # 24 shared -> one 16-token block hit
    assert "4-token prompts, 3 new tokens each" in r.stdout and "batch  32:" in r.stdout and "(1.0x batch 1)" in r.stdout


def test_bench_out_runs_the_whole_suite_on_the_device_asked(monkeypatch, tmp_path):
    from kvlib import __main__
    from kvlib.tools import bench

    calls = []
    monkeypatch.setattr(bench, "suite", lambda out, device: calls.append((out, device)))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # so that --threads 1 has something to change
    try:
        __main__.main(["bench", "--out", str(tmp_path), "--device", "cpu", "--threads", "1"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert calls == [(str(tmp_path), "cpu")]  # tests/test_bench.py runs the suite itself, at tiny sizes
