"""python -m kvlib doctor: ready on a set-up machine, and a failure named with its fix."""

import collections
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kvlib.model import models
from kvlib.tools import doctor


def doctor_cli(**env):
    return subprocess.run([sys.executable, "-m", "kvlib", "doctor", "--seconds", "1"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_doctor_passes_on_this_machine(smollm2):
    r = doctor_cli()
    assert r.returncode == 0, r.stdout + r.stderr
    for part in ("[ok  ] Python", "[ok  ] packages: torch", "[ok  ] widgets in JupyterLab", "[ok  ] model tiny",
                 "[ok  ] model smollm2", "device: ", "tokens/s decoding tiny", "Ready for the workshop"):
        assert part in r.stdout, part


@pytest.mark.slow
def test_doctor_names_a_missing_model_and_its_fix(tmp_path):
    r = doctor_cli(KVLIB_HOME=str(tmp_path / "kv"), HF_HUB_CACHE=str(tmp_path / "hub"))
    assert r.returncode == 1
    assert "[FAIL] model smollm2: not on this machine" in r.stdout
    # the command names the Python the doctor ran in (the one kvlib is installed in) from here, by no absolute path
    python, *rest = shlex.split(re.search(r"fix: with internet, run `([^`]+)`", r.stdout).group(1))
    assert rest == ["-m", "kvlib", "download", "smollm2"] and not os.path.isabs(python)
    assert python == "python" or Path(python).resolve() == Path(sys.executable).resolve()
    assert "[note] model gpt2" in r.stdout  # optional: reported, never a failure
    assert "1 problem(s) to fix" in r.stdout


def test_the_download_hint_shows_no_folder_of_this_machine(tmp_path, monkeypatch):
    """A printed hint ends up in shared notebooks and on the published site: it names this Python by a path from
    the current directory (a venv beside it, as `make lab` makes), else as `python`; never by an absolute path."""
    project = tmp_path / "project"
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / "notebooks" / "zh").mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(project / ".venv"))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setattr(sys, "executable", str(project / ".venv" / "bin" / "python"))
    hints = {}
    for where in (project, project / "notebooks", project / "notebooks" / "zh", tmp_path):
        monkeypatch.chdir(where)
        hints[where.name] = models.download_hint("gpt2")
    if os.name != "nt":
        assert hints == {"project": ".venv/bin/python -m kvlib download gpt2",
                         "notebooks": "../.venv/bin/python -m kvlib download gpt2",
                         "zh": "../../.venv/bin/python -m kvlib download gpt2",
                         tmp_path.name: "python -m kvlib download gpt2"}  # outside the venv's folder
    assert all(str(tmp_path) not in hint for hint in hints.values())
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)  # no venv (conda, the system's Python): its own `python`
    monkeypatch.chdir(project)
    assert models.download_hint("smollm2", "--gguf") == "python -m kvlib download smollm2 --gguf"


def test_widgets_check_fails_without_the_extension(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    found = doctor.widgets_render()
    assert not found.ok and "jupyterlab_widgets" in found.fix
    manager = tmp_path / "share" / "jupyter" / "labextensions" / "@jupyter-widgets" / "jupyterlab-manager"
    manager.mkdir(parents=True)
    (manager / "package.json").write_text("{}")
    found = doctor.widgets_render()  # ipywidgets' extension alone: the views would not draw
    assert not found.ok and "reinstall anywidget" in found.fix


def test_slow_machine_is_reported(tiny, monkeypatch):
    monkeypatch.setattr(doctor.time, "perf_counter", iter(range(0, 10**6, 10)).__next__)  # 10 s per call
    found = doctor.speed(tiny, seconds=1)
    assert not found.ok and not found.required and "tokens/s" in found.detail  # a note, never a failure


def test_a_missing_package_is_named_with_its_fix(monkeypatch):
    real = doctor.importlib.metadata.version

    def version(name):  # gguf and scipy are not installed
        if name in ("gguf", "scipy"):
            raise doctor.importlib.metadata.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(doctor.importlib.metadata, "version", version)
    found = doctor.packages()
    assert not found.ok and found.required
    assert found.detail == "missing: scipy, gguf" and "make install" in found.fix


@pytest.mark.slow
def test_a_missing_package_fails_the_command_without_a_traceback():
    """The whole command with matplotlib uninstalled (its metadata gone and its import failing): a report, not a crash."""
    code = ("import importlib.metadata as md, runpy, sys\n"
            "real = md.version\n"
            "def version(name):\n"
            "    if name == 'matplotlib':\n"
            "        raise md.PackageNotFoundError(name)\n"
            "    return real(name)\n"
            "md.version = version\n"
            "sys.modules['matplotlib'] = None  # import matplotlib now fails, as when it is not installed\n"
            "sys.argv = ['kvlib', 'doctor', '--seconds', '1']\n"
            "runpy.run_module('kvlib', run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "[FAIL] packages: missing: matplotlib" in r.stdout and "fix: run `make install`" in r.stdout


def test_an_old_python_fails_with_its_fix(monkeypatch):
    version = collections.namedtuple("version_info", "major minor micro releaselevel serial")
    monkeypatch.setattr(doctor, "sys", types.SimpleNamespace(version_info=version(3, 9, 18, "final", 0),
                                                              executable="/usr/bin/python3.9"))
    found = doctor.python_version()
    assert not found.ok and found.required and found.detail == "3.9.18 at /usr/bin/python3.9"
    assert "3.10 or newer" in found.fix
    monkeypatch.setattr(doctor, "sys", types.SimpleNamespace(version_info=version(3, 10, 0, "final", 0),
                                                              executable="/usr/bin/python3.10"))
    assert doctor.python_version().ok  # the oldest Python pyproject.toml accepts


def test_tiny_failing_to_load_is_one_problem_with_its_fix(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise OSError("model.safetensors: unexpected end of file")
    monkeypatch.setattr(doctor.models, "load_model", broken)
    # SmolLM2 on disk or not is the machine's state, not the code's: pin it so only tiny's failure counts
    monkeypatch.setattr(doctor.models, "local_dir", lambda name: f"/models/{name}")
    findings = {f.what: f for f in doctor.run(seconds=1)}
    tiny = findings["model tiny (bundled)"]
    assert not tiny.ok and tiny.required and "unexpected end of file" in tiny.detail and "make install" in tiny.fix
    assert not findings["speed"].ok and not findings["speed"].required  # skipped, and not counted twice
    assert doctor.report(findings.values()) == 1
    out = capsys.readouterr().out
    assert "[FAIL] model tiny (bundled): does not load: model.safetensors: unexpected end of file" in out
    assert "[note] speed: skipped" in out and "1 problem(s) to fix" in out
