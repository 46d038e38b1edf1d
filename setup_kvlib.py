"""Set kvlib up without make (Windows, macOS, Linux): the steps `make lab` and `make test` run.

    python setup_kvlib.py          # create .venv, install kvlib and its tools, fetch SmolLM2
    python setup_kvlib.py lab      # the same if needed, then open JupyterLab on the notebooks
    python setup_kvlib.py test     # the same if needed, then run the tests
    python setup_kvlib.py check    # the same if needed, then the fast tests (no notebook runs)

On Windows use `py setup_kvlib.py`. Only the standard library is used, so any Python 3.10+
runs it. The Makefile calls this script too, so both paths install the same things.
"""

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".installed"
INPUTS = [ROOT / "pyproject.toml", ROOT / "etc" / "jupyterlab-overrides.json", Path(__file__).resolve()]


def venv_bin(name):
    return VENV / ("Scripts" if os.name == "nt" else "bin") / (name + (".exe" if os.name == "nt" else ""))


def run(*cmd, check=True):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=check, cwd=ROOT).returncode


def up_to_date():
    return STAMP.exists() and all(STAMP.stat().st_mtime >= p.stat().st_mtime for p in INPUTS)


def install(torch, torch_index=None):
    if sys.version_info < (3, 10):
        sys.exit(f"kvlib needs Python 3.10 or newer; this is {sys.version.split()[0]}")
    if not venv_bin("python").exists():
        run(sys.executable, "-m", "venv", VENV)
    py = venv_bin("python")
    # torch first, on its own: where a CPU wheel is at hand pip takes it instead of a multi-GB CUDA build
    run(py, "-m", "pip", "install", "-q", torch, *(["--index-url", torch_index] if torch_index else []))
    run(py, "-m", "pip", "install", "-q", "-e", ".[test]")
    # JupyterLab without news and update pop-ups (they need the internet), every cell kept in the page
    settings = VENV / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "etc" / "jupyterlab-overrides.json", settings / "overrides.json")
    STAMP.touch()


def models():
    """SmolLM2 for the lessons that need a real model; without a network, set-up goes on and says so."""
    if run(venv_bin("python"), "-m", "kvlib", "download", "smollm2", check=False):
        print("kvlib: going on without SmolLM2; the notebooks run on the bundled tiny model", flush=True)


def lab():
    root_flag = ["--allow-root"] if hasattr(os, "getuid") and os.getuid() == 0 else []
    run(venv_bin("jupyter"), "lab", "notebooks", *root_flag)


def test():
    sys.exit(run(venv_bin("python"), "-m", "pytest", "-q", "--durations=10", "tests", check=False))


def check():
    sys.exit(run(venv_bin("python"), "-m", "pytest", "-q", "-m", "not slow", "--durations=5", "tests", check=False))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", nargs="?", default="setup", choices=["setup", "install", "models", "lab", "test", "check"])
    p.add_argument("--torch", default=os.environ.get("TORCH", "torch==2.13.0"), help="the torch requirement")
    p.add_argument("--torch-index", default=os.environ.get("TORCH_INDEX") or None,
                   help="e.g. https://download.pytorch.org/whl/cpu for the small CPU-only build")
    args = p.parse_args()
    if args.step == "install" or (args.step != "models" and not up_to_date()):
        install(args.torch, args.torch_index)
    if args.step in ("setup", "models", "lab", "test", "check"):
        models()
    {"lab": lab, "test": test, "check": check}.get(args.step, lambda: None)()


if __name__ == "__main__":
    main()
