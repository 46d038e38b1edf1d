"""The default-model rule and real GPT-2's path through the Hugging Face cache."""

import json
import os
import subprocess
import sys

from kvlib import models


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
