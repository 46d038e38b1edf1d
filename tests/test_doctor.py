"""python -m kvlib doctor: ready on a set-up machine, and a failure named with its fix."""

import os
import subprocess
import sys

from kvlib import doctor


def doctor_cli(**env):
    return subprocess.run([sys.executable, "-m", "kvlib", "doctor", "--seconds", "1"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_doctor_passes_on_this_machine(smollm2):
    r = doctor_cli()
    assert r.returncode == 0, r.stdout + r.stderr
    for part in ("[ok  ] Python", "[ok  ] packages: torch", "[ok  ] widgets in JupyterLab", "[ok  ] model tiny",
                 "[ok  ] model smollm2", "device: ", "tokens/s decoding tiny", "Ready for the workshop"):
        assert part in r.stdout, part


def test_doctor_names_a_missing_model_and_its_fix(tmp_path):
    r = doctor_cli(KVLIB_HOME=str(tmp_path / "kv"), HF_HUB_CACHE=str(tmp_path / "hub"))
    assert r.returncode == 1
    assert "[FAIL] model smollm2: not on this machine" in r.stdout
    assert "fix: with internet, run `python -m kvlib download smollm2`" in r.stdout
    assert "[note] model gpt2" in r.stdout  # optional: reported, never a failure
    assert "1 problem(s) to fix" in r.stdout


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
