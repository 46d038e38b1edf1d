"""Notebooks: committed without outputs, built as lessons, and run top to bottom (nbclient).

A lesson has a header (outcomes, time, what it assumes), glossary entries, exercise cells
tagged `exercise` that call `exercises.check` with a registered id, a recap and "check
yourself" questions with folded answers. Running it records each cell's time: a cell slower
than SLOW_S here must follow a markdown cell that warns with ⏱.
"""

import json
import re
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from kvlib import exercises

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"
WITHOUT_VIEWS = {"01", "07"}  # the chat and the calculator: text apps, nothing to draw
SLOW_S = 15  # this 2-core machine is slower than a laptop: ~10 s on a laptop is ~15 s here
WARNING = "⏱"


def cells(path):
    return json.loads(path.read_text())["cells"]


def text(cell):
    return "".join(cell["source"])


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS][:6] == ["01", "02", "03", "04", "05", "06"]


def test_notebooks_are_committed_without_outputs():
    for path in NOTEBOOKS:
        for cell in cells(path):
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f"{path.name} carries outputs"


def test_notebooks_open_by_loading_the_model():
    for path in NOTEBOOKS:
        code = [c for c in cells(path) if c["cell_type"] == "code"]
        assert "kvlib.load_model(" in text(code[0]), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_is_a_lesson(path):
    markdown = "\n".join(text(c) for c in cells(path) if c["cell_type"] == "markdown")
    for part in ("## What you will learn", "**Time:**", "**You need:**", "## Recap", "## Check yourself", "<details>"):
        assert part in markdown, f"{path.name} lacks {part!r}"
    assert markdown.count("> 📖 **") >= 3, f"{path.name}: fewer than 3 glossary entries"
    words = len(re.findall(r"[A-Za-z][A-Za-z'-]*", markdown))
    assert 1000 <= words <= 1450, f"{path.name}: {words} words of prose (about a thousand: pictures and widgets carry the rest)"
    tagged = [c for c in cells(path) if "exercise" in c["metadata"].get("tags", [])]
    assert len(tagged) >= 2, f"{path.name}: {len(tagged)} exercise cells"
    for cell in tagged:
        ids = re.findall(r"exercises\.check\(\s*\"([^\"]+)\"", text(cell))
        assert ids and all(i in exercises.REGISTRY and i.startswith(path.name[:2] + ".") for i in ids), text(cell)


def seconds(cell):
    t = cell["metadata"].get("execution", {})
    start, end = t.get("iopub.execute_input"), t.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


def run(path, out):
    """Execute a notebook as a learner does (the kernel inherits this environment); keep the result in out."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, out / path.name)  # kept for a person to look at when a check fails
    return nb


def check_as_a_learner_sees_it(path, nb):
    """No error and nothing on stderr; a slow cell warned of by ⏱ in the markdown before it; each view
    (or app of views) with a text fallback that reads without widgets. Returns how many views it showed."""
    previous, views = "", 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            previous = cell.source
        elif seconds(cell) > SLOW_S:
            assert WARNING in previous, f"{path.name}: a cell took {seconds(cell):.0f} s with no {WARNING} warning " \
                                        f"before it:\n{cell.source[:300]}"
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr", f"{path.name}: stderr output: {out.get('text', '')[:500]}"
            data = out.get("data", {})
            if WIDGET in data and "text/html" in data:  # a view, or an app of views: it reads without widgets too
                views += 1
                text = data["text/plain"]
                assert len(text) > 40 and not text.startswith(("VBox(", "<")), f"{path.name}: fallback {text[:200]!r}"
    return views


# The default path (tiny, or GPT-2 once downloaded, with SmolLM2 for its cells) runs in a real browser in
# test_browser.py; here each notebook runs on the two families on their own: SmolLM2 as the default model,
# and a GPT-2-format directory with SmolLM2 absent.
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_on_smollm2(path, tmp_path, monkeypatch):
    """With SmolLM2 as the default model (a Llama: RoPE, grouped K/V heads, no position table, no biases)
    every cell runs; a cell that only makes sense for GPT-2 says so instead of failing."""
    monkeypatch.setenv("KVLIB_MODEL", "smollm2")
    nb = run(path, tmp_path)
    views = check_as_a_learner_sees_it(path, nb)
    assert views > 0 or path.name[:2] in WITHOUT_VIEWS, f"{path.name}: no view with a text fallback"


@pytest.fixture(scope="session")
def gpt2_format_dir(tmp_path_factory):
    """A GPT-2 checkpoint as `save_pretrained` writes it (what a downloaded GPT-2 is on disk): tiny's
    trained weights, so the lessons' claims about a trained model still hold."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kvlib import models

    out = tmp_path_factory.mktemp("gpt2-format")
    AutoModelForCausalLM.from_pretrained(models.TINY_DIR).save_pretrained(out)
    AutoTokenizer.from_pretrained(models.TINY_DIR).save_pretrained(out)
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_gpt2_format_without_smollm2(path, tmp_path, monkeypatch, gpt2_format_dir):
    """Offline with no SmolLM2, on a model loaded from a directory in GPT-2's format: every notebook
    runs; exactly its `%%needs smollm2` cells say how to get the model instead of running."""
    monkeypatch.setenv("KVLIB_MODEL", str(gpt2_format_dir))
    monkeypatch.setenv("KVLIB_HOME", str(tmp_path / "kvlib-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    nb = run(path, tmp_path)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert str(gpt2_format_dir) in "".join(o.get("text", "") for o in first.outputs)  # it was the model used
    check_as_a_learner_sees_it(path, nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            skipped = any("python -m kvlib download smollm2" in o.get("text", "") for o in cell.outputs)
            assert skipped == cell.source.startswith("%%needs smollm2"), cell.source[:200]
