"""Every bad input fails early with a message that says what to do."""

import os
import subprocess
import sys
import time

import pytest

import kvlib


@pytest.mark.parametrize("call, words", [
    (lambda m: kvlib.generate(m, ""), "empty"),
    (lambda m: kvlib.generate(m, []), "empty"),
    (lambda m: m.forward([]), "empty"),
    (lambda m: kvlib.generate(m, "to be " * 400), "context"),
    (lambda m: m.forward([1] * (m.config.n_ctx + 1)), "shorten the prompt"),
    (lambda m: kvlib.generate(m, "hi", max_new_tokens=0), "max_new_tokens"),
    (lambda m: kvlib.generate(m, "hi", max_new_tokens=-5), "max_new_tokens"),
    (lambda m: kvlib.generate(m, "hi", temperature=-1), "temperature"),
    (lambda m: kvlib.generate(m, "hi", top_p=1.5), "top_p"),
    (lambda m: m.forward([m.config.vocab_size]), "token ids"),
])
def test_bad_input_raises_a_clear_value_error(tiny, call, words):
    with pytest.raises(ValueError, match=words):
        call(tiny)


def test_full_cache_refuses_more(tiny):
    cache = tiny.new_cache()
    tiny.forward([1] * tiny.config.n_ctx, cache=cache)
    with pytest.raises(kvlib.KVLibError, match="start a new cache"):
        tiny.forward([1], cache=cache)


def test_unknown_model_names_the_choices():
    with pytest.raises(ValueError, match="tiny.*random-gpt2"):
        kvlib.load_model("gpt-5")


def test_device_that_is_not_there():
    with pytest.raises(ValueError, match="not available.*device='cpu'"):
        kvlib.load_model("tiny", device="cuda:99")


def run_fresh(code, **env):
    """Run in a fresh interpreter so the Hugging Face cache location is read anew."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_offline_gpt2_fails_fast_and_names_the_way_out(tmp_path):
    t0 = time.monotonic()
    r = run_fresh("import kvlib; kvlib.load_model('gpt2')", HF_HUB_CACHE=str(tmp_path), HF_HOME=str(tmp_path))
    assert time.monotonic() - t0 < 30  # seconds, not a network timeout
    assert "'tiny'" in r.stderr and "python -m kvlib download gpt2" in r.stderr
    assert "KVLibError" in r.stderr


def test_download_offline_says_what_to_do():
    r = subprocess.run([sys.executable, "-m", "kvlib", "download", "gpt2"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode != 0 and "cannot reach" in r.stderr and "tiny" in r.stderr
