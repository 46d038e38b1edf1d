"""The course travels with kvlib: a wheel carries the notebooks, `kvlib lab` copies them into a learner's folder
without ever overwriting their edits, and the copied notebooks run where only the wheel is installed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvlib import course

REPO = Path(__file__).parent.parent


def test_the_course_is_every_notebook_in_both_languages():
    files = {p.as_posix() for p in course.course_files(course.course_dir())}
    english = {p.name for p in (REPO / "notebooks").glob("*.ipynb")}
    assert len(english) == 8 and english <= files and {f"zh/{n}" for n in english} <= files


def test_a_copy_never_overwrites_the_learners_edits(tmp_path):
    source, dest = tmp_path / "course", tmp_path / "mine"
    (source / "zh").mkdir(parents=True)
    for rel, text in (("01_a.ipynb", "one"), ("02_b.ipynb", "two"), ("zh/01_a.ipynb", "一")):
        (source / rel).write_text(text)
    assert course.copy_course(dest, source)["copied"] == ["01_a.ipynb", "02_b.ipynb", "zh/01_a.ipynb"]
    (dest / "01_a.ipynb").write_text("one, and my notes")  # the learner's work
    assert course.copy_course(dest, source) == {"copied": [], "updated": [], "kept": []}  # nothing new: nothing said
    (source / "01_a.ipynb").write_text("one, revised")  # a newer course
    (source / "02_b.ipynb").write_text("two, revised")
    done = course.copy_course(dest, source)
    assert done == {"copied": [], "updated": ["02_b.ipynb"], "kept": ["01_a.ipynb"]}
    assert (dest / "01_a.ipynb").read_text() == "one, and my notes"  # kept as the learner left it
    assert (dest / "01_a.new.ipynb").read_text() == "one, revised"  # the new version beside it
    assert (dest / "02_b.ipynb").read_text() == "two, revised"  # untouched by the learner: brought up to date
    (dest / "zh" / "01_a.ipynb").unlink()
    assert course.copy_course(dest, source)["copied"] == ["zh/01_a.ipynb"]  # a deleted file comes back
    assert "01_a.ipynb" in json.loads((dest / course.MANIFEST).read_text())


@pytest.mark.slow  # builds a wheel, makes a virtual environment, runs two notebooks
def test_the_wheel_alone_runs_the_course(tmp_path):
    """Build the wheel; in a new virtual environment without kvlib, each notebook's first cell says the command that
    installs it; install the wheel (without its dependencies: they come from this environment, read as plain
    folders, so no checkout and no editable install is on the path) into a new virtual environment, copy the
    course with `kvlib lab --copy-only`, and run notebooks 01 and 05 there as a learner's Run All does."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, cwd=tmp_path)
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]  # this environment's packages, as plain folders:
    Path(site, "deps.pth").write_text("\n".join(ours) + "\n")  # their .pth files (the editable kvlib) stay unread
    for notebook in sorted(REPO.glob("notebooks/**/*.ipynb")):  # before kvlib is there: each first cell says how
        first = next(c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code")
        missing = subprocess.run([str(python), "-c", "".join(first["source"])], capture_output=True, text=True,
                                 cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1] == (
            "ModuleNotFoundError: kvlib is not installed in this kernel: run  %pip install kvlib  in a cell (or "
            "%pip install the kvlib wheel your teacher gives), then restart the kernel"), (notebook, missing.stderr)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(next(wheels.iterdir()))],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVLIB_MODEL")}
    env |= {"KVLIB_HOME": str(tmp_path / "home"), "MPLBACKEND": "Agg"}  # no SmolLM2 there: its cells say how to get it
    where = subprocess.run([str(env_dir / "bin" / "kvlib"), "lab", str(tmp_path / "mine"), "--copy-only"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert where.returncode == 0 and "18 files copied" in where.stdout, where.stderr
    run = """
import sys, kvlib, nbformat
from nbclient import NotebookClient
assert kvlib.__file__.startswith(sys.prefix), kvlib.__file__  # the wheel's kvlib, not the checkout's
for name in sys.argv[1:]:
    nb = nbformat.read(name, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3").execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    print(name, sum(c.cell_type == "code" for c in nb.cells), "code cells ran", flush=True)
"""
    done = subprocess.run([str(python), "-c", run, "01_generation_loop.ipynb", "05_kv_cache.ipynb"],
                          capture_output=True, text=True, env=env, cwd=tmp_path / "mine", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("code cells ran") == 2


def test_the_image_definition_installs_what_make_does():
    """environment.yml (read by conda, repo2docker and Binder to build a hub's image): kvlib from this checkout
    with its test tools, on a Python pyproject allows, beside the torch make pins; and the hub's Kubernetes
    configuration (untested here: no cluster) opens a notebook the image holds."""
    import re

    import yaml

    env = yaml.safe_load((REPO / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    least = re.search(r'requires-python = ">=(\d+)\.(\d+)"', (REPO / "pyproject.toml").read_text()).groups()
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, least))
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    torch_pin = re.search(r"^TORCH\s+\?= (\S+)", (REPO / "Makefile").read_text(), re.M).group(1)
    assert torch_pin in pip and "-e .[test]" in pip
    z2jh = yaml.safe_load((REPO / "etc" / "hub" / "z2jh-config.yaml").read_text())
    assert z2jh["singleuser"]["defaultUrl"].endswith("notebooks/01_generation_loop.ipynb")
    assert (REPO / z2jh["singleuser"]["defaultUrl"].removeprefix("/lab/tree/")).exists()
