"""Notebooks: committed without outputs, built as lessons, and run top to bottom (nbclient).

A lesson has a header (outcomes, time, what it assumes), glossary entries, exercise cells
tagged `exercise` that call `exercises.check` with a registered id, a recap and "check
yourself" questions with folded answers. Its core, what a teacher cannot skip, is 400-1,000 words (notebooks 1-6: 6,000 in all); depth goes
in "Going further" sections, counted apart, that no core cell depends on. A cell a learner waits on is tagged `slow` and the
markdown before it warns with ⏱: that pair is checked here, from the notebook's text alone; how long
each cell took is measured on every run and reported at the end of the suite (conftest's timing
table), never asserted, because it is the machine's.

The translations (notebooks/zh/..., kept in step with the English by tools/translation.py and
test_translation.py) are lessons and runs here like the English ones, with their language's headings and a
core counted in Han characters; each is one more notebook in each set-up below, run once there, not twice.

Each notebook must run on three set-ups: a GPT-2-family default (tiny, or a GPT-2 on disk), SmolLM2
(the Llama family) as the default, and no SmolLM2 at all. Each cell is executed once per set-up it can
tell apart, no more:

1. In the browser (test_browser.py) the default model is a GPT-2-format directory holding tiny's
   weights, as a downloaded GPT-2 sits on disk, and SmolLM2 is there: every cell runs, the
   `%%needs smollm2` ones on SmolLM2 beside a GPT-2-family default (a learner's usual path). tiny by
   its own name is that model under another name: the same config, weights and tokenizer, and no
   notebook tests for the name (test_browser.py::test_the_labs_model_is_tiny_in_gpt2s_format).
2. Here, by nbclient: SmolLM2 as the default model, every cell but the `%%needs` ones. Those load
   SmolLM2 (or llama.cpp's server) by name, whatever the default is, so they would repeat the browser's
   run of them; left out, the rest is exactly what a learner without SmolLM2 runs (set-up 3).
3. Without SmolLM2 the `%%needs smollm2` cells print how to get it instead of running (test_magics.py
   runs that in a kernel), so the notebook is the browser's run minus those cells. It runs if no other
   cell reads a name only they bind, loads SmolLM2 or checks an exercise computed on it: read from
   the cells' syntax (test_notebook_runs_without_smollm2), and run here by set-up 2. The same reading
   covers every `%%needs` cell, so a notebook also runs without llama.cpp's server (`%%needs engine`),
   which a learner may go without too; CI builds it, so the browser's run runs those cells.
"""

import ast
import builtins
import json
import re
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from kvlib.lessons import exercises

ENGLISH = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
# the translations (notebooks/zh/...: tools/translation.py keeps them in step): each a lesson, run once per set-up
NOTEBOOKS = ENGLISH + sorted((Path(__file__).parent.parent / "notebooks").glob("*/*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"
WITHOUT_VIEWS = {"01", "07"}  # the chat and the calculator: text apps, nothing to draw
WARNING, SLOW = "⏱", "slow"  # the warning a learner reads, and the tag on the cell it warns of


def language(path):  # notebooks/02_tokens.ipynb -> "en", notebooks/zh/02_tokens.ipynb -> "zh"
    return "en" if path.parent.name == "notebooks" else path.parent.name


def name(path):  # a test id: "02_tokens", "zh/02_tokens"
    return path.stem if language(path) == "en" else f"{language(path)}/{path.stem}"


def cells(path):
    return json.loads(path.read_text())["cells"]


def text(cell):
    return "".join(cell["source"])


def test_there_are_notebooks():
    assert [p.name[:2] for p in ENGLISH][:6] == ["01", "02", "03", "04", "05", "06"]


COURSE_WORDS = 6000  # the core of notebooks 1-6: 6,000 words, whatever each lesson's own band allows
# Per language: the headings a lesson has, and its core's band. Chinese has no spaces to count words by, so its
# core counts Han characters and Latin words, about 1.8 of them per English word (notebook 2: 1,414 against 773).
LESSON = {
    "en": {"going further": "## Going further", "core": (400, 1000),
           "parts": ("## What you will learn", "**Time:**", "**You need:**", "## Recap", "## Check yourself")},
    "zh": {"going further": "## 深入一步", "core": (720, 1850),
           "parts": ("## 你将学到", "**时间：**", "**预备知识：**", "## 小结", "## 自测")},
}


def going_further(path):
    """Each cell -> True inside a "Going further" section: from a markdown cell that opens with that heading
    to the next level-2 heading that does not. A teacher may skip these; the core is the rest."""
    inside, marks = False, []
    for cell in cells(path):
        source = text(cell).lstrip()
        if cell["cell_type"] == "markdown" and source.startswith("## "):
            inside = source.startswith(LESSON[language(path)]["going further"])
        marks.append(inside)
    return marks


def words(path):
    """(core, going further): words of a notebook's markdown, counted apart (and Han characters, in Chinese)."""
    count = {False: 0, True: 0}
    for cell, further in zip(cells(path), going_further(path)):
        if cell["cell_type"] == "markdown":
            count[further] += len(re.findall(r"[A-Za-z][A-Za-z'-]*|[\u4e00-\u9fff]", text(cell)))
    return count[False], count[True]


def test_the_course_core_is_short():
    """Notebooks 1-6, the three-hour workshop, in about the words of the essay it grew from, twice over."""
    core = {p.stem: words(p)[0] for p in ENGLISH[:6]}
    assert sum(core.values()) <= COURSE_WORDS, f"{sum(core.values())} core words in notebooks 1-6: {core}"


def header_minutes(path):
    """A lesson's "**Time:** about N minutes" (and the M more its Going further sections take, 0 if it says none)."""
    header = text(cells(path)[0])
    core = int(re.search(r"\*\*Time:\*\* about (\d+) minutes", header).group(1))
    more = re.search(r"(\d+) more", header)
    return core, int(more.group(1)) if more else 0


def test_the_teachers_guide_gives_the_lessons_own_times():
    """The guide's sums and times are the notebooks' headers', so a header that changes fails here until the guide does."""
    guide = (ENGLISH[0].parent / "README.md").read_text(encoding="utf-8")
    workshop = [header_minutes(p)[0] for p in ENGLISH[:6]]
    hours, minutes = map(int, re.search(r"add up to about (\d+) h (\d+) min", guide).groups())
    assert 60 * hours + minutes == sum(workshop) and f"({' + '.join(map(str, workshop))} min)" in guide
    for path, title in zip(ENGLISH[6:8], ("Long context", "Serving")):
        core, more = header_minutes(path)
        assert f"**{title}** ({core} min, {core + more} with its Going further sections" in guide, title


def skipping_breaks(sources, further):
    """Code cells in order and whether each is going further -> core cells that read a name only a going-further
    cell binds (a teacher who skips the section would see them fail)."""
    plain, only_further, problems = set(dir(builtins)), set(), []
    for source, skip in zip(sources, further):
        tree = python(source)
        if skip:
            only_further |= binds(tree) - plain
            continue
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - binds(tree)
        problems += [f"reads {name!r}, bound only going further: {source[:200]}" for name in sorted(read & only_further)]
        plain |= binds(tree)
        only_further -= binds(tree)
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_a_teacher_can_skip_going_further(path):
    code = [(text(c), f) for c, f in zip(cells(path), going_further(path)) if c["cell_type"] == "code"]
    problems = skipping_breaks([s for s, _ in code], [f for _, f in code])
    assert not problems, f"{path.name}: " + "\n".join(problems)


def test_the_reading_finds_what_skipping_would_break():
    assert skipping_breaks(["x = 1", "print(x)"], [True, False]) == ["reads 'x', bound only going further: print(x)"]
    assert skipping_breaks(["x = 1", "x = 2", "print(x)"], [True, False, False]) == []
    assert skipping_breaks(["x = 1", "print(x)"], [False, True]) == []


def test_notebooks_are_committed_without_outputs():
    for path in NOTEBOOKS:
        for cell in cells(path):
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f"{path.name} carries outputs"


def test_notebooks_open_by_loading_the_model():
    for path in NOTEBOOKS:
        code = [c for c in cells(path) if c["cell_type"] == "code"]
        assert "kvlib.load_model(" in text(code[0]), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_each_notebook_is_a_lesson(path):
    markdown = "\n".join(text(c) for c in cells(path) if c["cell_type"] == "markdown")
    lesson = LESSON[language(path)]
    for part in (*lesson["parts"], "<details>"):
        assert part in markdown, f"{name(path)} lacks {part!r}"
    assert markdown.count("> 📖 **") >= 3, f"{name(path)}: fewer than 3 glossary entries"
    (least, most), (core, further) = lesson["core"], words(path)
    assert least <= core <= most, f"{name(path)}: {core} words in its core, {further} going further (the core: {least}-{most})"
    tagged = [c for c in cells(path) if "exercise" in c["metadata"].get("tags", [])]
    assert len(tagged) >= 2, f"{path.name}: {len(tagged)} exercise cells"
    for cell in tagged:
        ids = re.findall(r"exercises\.check\(\s*\"([^\"]+)\"", text(cell))
        assert ids and all(i in exercises.REGISTRY and i.startswith(path.name[:2] + ".") for i in ids), text(cell)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_a_slow_cell_is_warned_of_just_before_it(path):
    """A code cell is tagged slow exactly when the markdown cell just before it warns with ⏱: the reader
    sees the warning where the tag is (a tag alone is invisible in a notebook)."""
    previous = ""
    for i, cell in enumerate(cells(path)):
        if cell["cell_type"] == "code":
            tagged = SLOW in cell["metadata"].get("tags", [])
            assert tagged == (WARNING in previous), \
                f"{path.name} cell {i}: tagged {SLOW} {tagged}, {WARNING} before it {WARNING in previous}:\n{text(cell)[:200]}"
        previous = text(cell) if cell["cell_type"] == "markdown" else ""


def seconds(cell):
    t = cell["metadata"].get("execution", {})
    start, end = t.get("iopub.execute_input"), t.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


def run(path, out, keep=lambda cell: True):
    """Execute a notebook's cells that `keep` keeps, as a learner does (the kernel inherits this environment);
    keep the result in out."""
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if keep(c)]
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, out / path.name)  # kept for a person to look at when a check fails
    return nb


def cell_times(path, nb):
    """(notebook, cell's first line, seconds, tagged slow) for each code cell: for the suite's timing table."""
    return [(name(path), c.source.splitlines()[0][:60] if c.source else "", seconds(c),
             SLOW in c.metadata.get("tags", [])) for c in nb.cells if c.cell_type == "code"]


def check_as_a_learner_sees_it(path, nb):
    """No error and nothing on stderr; each view (or app of views) with a text fallback that reads without
    widgets. Returns how many views it showed."""
    views = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr", f"{path.name}: stderr output: {out.get('text', '')[:500]}"
            data = out.get("data", {})
            if WIDGET in data and "text/html" in data:  # a view, or an app of views: it reads without widgets too
                views += 1
                text = data["text/plain"]
                assert len(text) > 40 and not text.startswith(("VBox(", "<")), f"{path.name}: fallback {text[:200]!r}"
    return views


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_notebook_runs_on_smollm2(path, tmp_path, monkeypatch, record_property):
    """With SmolLM2 as the default model (a Llama: RoPE, grouped K/V heads, no position table, no biases)
    every cell runs but the `%%needs` ones, which the browser runs (set-up 2 in the module's docstring); a
    cell that only makes sense for GPT-2 says so instead of failing."""
    monkeypatch.setenv("KVLIB_MODEL", "smollm2")
    nb = run(path, tmp_path, keep=lambda cell: not (cell.cell_type == "code" and cell.source.startswith(ANY_NEEDS)))
    record_property("cell_times", cell_times(path, nb))
    views = check_as_a_learner_sees_it(path, nb)
    assert views > 0 or path.name[:2] in WITHOUT_VIEWS, f"{path.name}: no view with a text fallback"
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "Model('smollm2', llama family" in "".join(o.get("text", "") for o in first.outputs)  # the model used


NEEDS = "%%needs smollm2"
ANY_NEEDS = "%%needs "  # %%needs smollm2, %%needs engine, %%needs smollm2 engine: each may be skipped


def python(source):
    """A cell's source as the Python IPython runs (magics and shell escapes as calls) -> its syntax tree."""
    from IPython.core.inputtransformer2 import TransformerManager

    return ast.parse(TransformerManager().transform_cell(source))


def binds(tree):
    """Names a cell binds: assigned, imported, defined, a function's arguments (inner scopes too)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def smollm2_uses(tree):
    """What in a cell needs SmolLM2 on disk: a call naming it (load_model("smollm2")) or an exercise computed on it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if "smollm2" in args:
                found.append(ast.unparse(node))
            if args and args[0] in exercises.REGISTRY and "smollm2" in exercises.REGISTRY[args[0]].uses:
                found.append(f"exercise {args[0]}")
    return found


def without_smollm2(sources):
    """Code cells in order -> what would fail in them without SmolLM2, where `%%needs smollm2` cells only print
    how to get it: a later cell reading a name only those cells bind, loading SmolLM2, checking an exercise on it."""
    plain, only_needed, problems = set(dir(builtins)), set(), []  # names bound by cells that always run; by the others
    for source in sources:
        if source.startswith(ANY_NEEDS):
            first, _, body = source.partition("\n")
            tree = python(body)
            if "smollm2" not in first.split():  # skipped only without what it names, so it needs SmolLM2 named too
                problems += [f"{use} without `{NEEDS}`: {source[:200]}" for use in smollm2_uses(tree)]
            only_needed |= binds(tree) - plain
            continue
        tree = python(source)
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - binds(tree)
        problems += [f"reads {name!r}, bound only in `%%needs` cells: {source[:200]}" for name in sorted(read & only_needed)]
        problems += [f"{use} without `{NEEDS}`: {source[:200]}" for use in smollm2_uses(tree)]
        plain |= binds(tree)
        only_needed -= binds(tree)
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_notebook_runs_without_smollm2(path):
    """Every cell but the `%%needs smollm2` ones stands without them (set-up 3 in the module's docstring)."""
    sources = [text(c) for c in cells(path) if c["cell_type"] == "code"]
    assert not without_smollm2(sources), f"{path.name}: " + "\n".join(without_smollm2(sources))


def test_the_reading_finds_what_would_fail_without_smollm2():
    """The reading fails where a run without SmolLM2 would, and passes a cell that rebinds the name first."""
    needs = f"{NEEDS}\nsmol = kvlib.load_model('smollm2')\nfrom kvlib.lessons import leak as lk"
    assert without_smollm2([needs, "print(smol.name)"]) == ["reads 'smol', bound only in `%%needs` cells: print(smol.name)"]
    assert len(without_smollm2([needs, "lk.run()"])) == 1  # an import is a binding too
    assert without_smollm2([needs, "smol = model", "print(smol.name)"]) == []
    assert without_smollm2([needs, "smol = model\nprint(smol.name)", "print([smol for smol in 'ab'])"]) == []
    assert without_smollm2(["smol = kvlib.load_model('smollm2')"]) == \
        [f"kvlib.load_model('smollm2') without `{NEEDS}`: smol = kvlib.load_model('smollm2')"]
    assert without_smollm2(['exercises.check("03.king_queen_or_table", "a", smol)']) == \
        [f'exercise 03.king_queen_or_table without `{NEEDS}`: exercises.check("03.king_queen_or_table", "a", smol)']
    engine = "%%needs engine\nserver = kvlib.server.llamacpp.Engine().start()"  # skipped without llama.cpp's server
    assert without_smollm2([engine, "server.stop()"]) == ["reads 'server', bound only in `%%needs` cells: server.stop()"]
    assert without_smollm2([f"{NEEDS} engine\nserver = kvlib.server.llamacpp.Engine().start()", "server.stop()"]) != []
    assert without_smollm2(["%%needs engine\nsmol = kvlib.load_model('smollm2')"]) == \
        [f"kvlib.load_model('smollm2') without `{NEEDS}`: %%needs engine\nsmol = kvlib.load_model('smollm2')"]
    assert without_smollm2([f"{NEEDS} engine\nsmol = kvlib.load_model('smollm2')"]) == []
    assert without_smollm2([f'{NEEDS}\nexercises.check("03.king_queen_or_table", "a", smol)',
                            'exercises.check("03.table_numbers", 1, model)']) == []
