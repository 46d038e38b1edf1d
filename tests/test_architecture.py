"""ARCHITECTURE.md is the map of the code, kept true: it names every module, names no path that is
not there, and its import rules hold in the code. Imports are read with `ast`, so nothing is
imported or loaded here and the file runs in well under a second.

The layers come from ARCHITECTURE.md's own table (one source): move a module there and the rules
follow it. The rules that are not plain layering are written out below, each beside the sentence
of ARCHITECTURE.md it checks."""

import ast
import json
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
KVLIB = ROOT / "kvlib"
MAP = ROOT / "ARCHITECTURE.md"
SCREEN = {"ipywidgets", "anywidget", "traitlets", "matplotlib", "IPython"}  # packages that draw or run widgets
NETWORK = {"socket", "urllib", "http", "requests", "httpx", "aiohttp", "subprocess"}  # subprocess: pip fetches
FETCHES = {"hf_hub_download", "snapshot_download"}  # huggingface_hub's functions that go to the hub


def text():
    return MAP.read_text()


@cache
def modules():  # {"gpt2": Path, "views.base": Path, "views": views/__init__.py, "__init__": kvlib/__init__.py}
    found = {}
    for path in sorted(KVLIB.rglob("*.py")):
        rel = path.relative_to(KVLIB)
        if rel.parts[0] == "assets":
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()  # a package is named by its folder
        found[".".join(parts)] = path
    return found


@cache
def parsed(name):
    return ast.parse(modules()[name].read_text())


@cache
def imports(name):
    """(kvlib modules it imports, by the names of modules(); top-level names of other packages)."""
    parts = [] if name == "__init__" else name.split(".")
    package = parts if modules()[name].name == "__init__.py" else parts[:-1]  # where `from .` starts
    inner, outer = set(), set()

    def resolve(dotted, names):
        parts = [p for p in dotted.split(".") if p]
        for alias in names:  # `from . import gpt2` names a module; `from .models import Config` a name in one
            sub = ".".join(parts + [alias])
            if sub in modules():
                inner.add(sub)
                continue
            inner.add(".".join(parts) or "__init__")

    for node in ast.walk(parsed(name)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "kvlib" or alias.name.startswith("kvlib."):
                    inner.add(alias.name.removeprefix("kvlib").removeprefix(".") or "__init__")
                else:
                    outer.add(alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                resolve(".".join(base + ([node.module] if node.module else [])), [a.name for a in node.names])
            elif node.module == "kvlib" or node.module.startswith("kvlib."):
                resolve(node.module.removeprefix("kvlib"), [a.name for a in node.names])
            else:
                outer.add(node.module.split(".")[0])
                if node.module.split(".")[0] == "huggingface_hub":
                    outer.update(a.name for a in node.names if a.name in FETCHES)
    return frozenset(inner), frozenset(outer)


@cache
def layers():
    """[(number, name, {modules})] from the table under '## Layers' in ARCHITECTURE.md."""
    section = text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    out = []
    for number, title, cell in re.findall(r"^\|\s*(\d+)\s+([a-z ]+?)\s*\|\s*([^|]+?)\s*\|", section, re.M):
        names = set()
        for entry in (e.strip().strip("`") for e in cell.split(",")):
            if entry.endswith("/*"):
                package = entry[:-2]
                names |= {m for m in modules() if m == package or m.startswith(package + ".")}
            else:
                names.add(entry)
        out.append((int(number), title, names))
    return out


def layer(title):
    [names] = [names for _, t, names in layers() if t == title]
    assert names, f"ARCHITECTURE.md's layer {title!r} lists no module"
    return names


def layer_of(name):
    [number] = [n for n, _, names in layers() if name in names]
    return number


def on_the_map():  # every file ARCHITECTURE.md must name, as a path from the project root
    files = [p for p in modules().values()] + sorted((KVLIB / "views").glob("*.js"))
    files += sorted((KVLIB / "views").glob("*.css")) + [ROOT / "tests" / "browser.py", ROOT / "tests" / "conftest.py"]
    return [str(p.relative_to(ROOT)) for p in files]


def test_every_module_is_on_the_map():
    missing = [path for path in on_the_map() if f"`{path}`" not in text()]
    assert not missing, f"ARCHITECTURE.md does not name {missing}: add each to the code map, in backticks"


def test_every_path_on_the_map_exists():
    named = {m.rstrip(".") for m in re.findall(r"(?<![\w./-])((?:kvlib|tests|notebooks|etc)/[\w./*-]*\w)", text())}
    named = {n for n in named if "*" not in n}  # `views/*` in the layer table is a pattern, checked below
    assert len(named) > 40, "the map should name kvlib's modules by path"
    gone = sorted(n for n in named if not (ROOT / n).exists())
    assert not gone, f"ARCHITECTURE.md names paths that do not exist: {gone} (renamed or removed?)"


def test_every_module_has_one_layer():
    placed = [name for _, _, names in layers() for name in names]
    assert [n for n, _, _ in layers()] == list(range(len(layers()))) and len(layers()) > 5, "layers 0, 1, 2..."
    unknown = sorted(set(placed) - set(modules()))
    assert not unknown, f"ARCHITECTURE.md's layer table names modules that do not exist: {unknown}"
    twice = sorted({n for n in placed if placed.count(n) > 1})
    assert not twice, f"modules in two layers: {twice}"
    unplaced = sorted(set(modules()) - set(placed))
    assert not unplaced, f"put {unplaced} in a layer of ARCHITECTURE.md's table"


def test_imports_only_go_down_the_layers():
    upward = [f"{name} (layer {layer_of(name)}) imports {dep} (layer {layer_of(dep)})"
              for name in modules() for dep in imports(name)[0] if layer_of(dep) > layer_of(name)]
    assert not upward, "imports that go up ARCHITECTURE.md's layers:\n" + "\n".join(upward)


def test_base_modules_import_no_kvlib_module():
    wrong = {name: sorted(imports(name)[0]) for name in layer("base") if imports(name)[0]}
    assert not wrong, f"layer 0 imports no kvlib module: {wrong}"


def test_the_core_knows_no_screen():
    wrong = {name: sorted(imports(name)[1] & SCREEN) for name in layer("core") if imports(name)[1] & SCREEN}
    assert not wrong, f"core modules import screen packages: {wrong}"


def test_the_forward_passes_and_the_cache_import_only_each_other():
    trio = {"gpt2", "llama", "kv_cache"}
    for name in trio:
        inner, outer = imports(name)
        assert inner <= trio | {"errors"}, f"{name} imports {sorted(inner - trio - {'errors'})}"
        assert outer <= {"torch", "math"}, f"{name} imports {sorted(outer - {'torch', 'math'})}"


def test_lessons_compute_never_draw():
    wrong = {name: sorted(imports(name)[1] & SCREEN) for name in layer("lessons") if imports(name)[1] & SCREEN}
    assert not wrong, f"lesson modules import drawing packages: {wrong}"


def test_plots_take_tensors_never_a_model():
    assert imports("plots")[0] <= {"i18n"}, f"plots imports {sorted(imports('plots')[0] - {'i18n'})}"  # words only
    takes_model = [f.name for f in ast.walk(parsed("plots")) if isinstance(f, ast.FunctionDef)
                   and {"model", "models"} & {a.arg for a in f.args.args + f.args.kwonlyargs}]
    assert not takes_model, f"plots functions that take a model: {takes_model}"


def test_a_view_imports_no_other_view():
    views = {name for name in modules() if name.startswith("views.")}
    assert len(views) > 5
    wrong = {name: sorted(imports(name)[0] & (views - {"views.base"})) for name in views - {"views.base"}
             if imports(name)[0] & (views - {"views.base"})}
    assert not wrong, f"views import other views: {wrong}"


def test_exercises_never_import_widgets():
    exercises = [name for name in modules() if name.split(".")[0] == "exercises"]
    assert len(exercises) > 1
    wrong = [name for name in exercises if "widgets" in imports(name)[0]]
    assert not wrong, f"exercise modules import kvlib.widgets: {wrong}"


def notebook_imports(path):
    """The kvlib modules (and names from kvlib) a notebook's code cells import, IPython's magics left out."""
    names = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            code = "\n".join(line for line in "".join(cell["source"]).splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Import):
                    names |= {a.name.removeprefix("kvlib.") for a in node.names if a.name.startswith("kvlib.")}
                elif isinstance(node, ast.ImportFrom) and node.module == "kvlib":
                    names |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvlib."):
                    names.add(node.module.removeprefix("kvlib."))
    return names


def test_only_the_command_line_imports_bench():
    importers = sorted(name for name in modules() if "bench" in imports(name)[0])
    assert importers == ["__main__"], f"bench is imported by {importers}; take timed and random_ids from measure"
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 8
    wrong = [nb.name for nb in notebooks if "bench" in notebook_imports(nb)]
    assert not wrong, f"{wrong} import bench; take the measurements the lessons share with it from speed"


@pytest.mark.parametrize("source", ["%%needs smollm2\nfrom kvlib import (plots,\n    bench)", "import kvlib.bench",
                                    "from kvlib.bench import prompt_caching"])
def test_a_notebooks_imports_are_read_past_its_magics(tmp_path, source):
    cell = {"cell_type": "code", "source": source.splitlines(keepends=True)}
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["bench"]}, cell]}))
    assert "bench" in notebook_imports(tmp_path / "nb.ipynb")


def test_only_download_uses_the_network():
    assert "download" in modules()
    wrong = {name: sorted(imports(name)[1] & NETWORK) for name in modules()
             if imports(name)[1] & NETWORK and name not in ("download", "train_tiny", "engine", "endpoint", "course")}
    assert not wrong, (f"modules that can reach the network: {wrong}; only download.py (and train_tiny.py) may, "
                       f"besides engine.py (a server on 127.0.0.1), endpoint.py (the URL a user names) and course.py "
                       f"(JupyterLab, on its default: this machine only)")
    assert "--ip" not in ast.unparse(parsed("course"))  # course.py's JupyterLab listens on its default, localhost
    # "engine.py starts llama.cpp's server listening on 127.0.0.1 only"
    hosts = [node.value.value for node in ast.walk(parsed("engine")) if isinstance(node, ast.Assign)
             and [getattr(t, "id", None) for t in node.targets] == ["HOST"]]
    assert hosts == ["127.0.0.1"], f"engine.py's HOST is {hosts}, not 127.0.0.1 alone"
    fetchers = sorted(name for name in modules() if imports(name)[1] & FETCHES)
    assert set(fetchers) <= {"download"}, f"hub downloads outside download.py: {fetchers}"
    online = []
    for name in modules():
        if name in ("download", "train_tiny"):
            continue
        for call in ast.walk(parsed(name)):
            if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "from_pretrained" and not any(
                    k.arg == "local_files_only" and getattr(k.value, "value", None) is True for k in call.keywords):
                online.append(f"{name}:{call.lineno}")
    assert not online, f"from_pretrained without local_files_only=True: {online}"


@pytest.mark.parametrize("source, expected", [
    ("from .kv_cache import KVCache", {"kv_cache"}),
    ("from . import gpt2, llama", {"gpt2", "llama"}),
    ("from .views import base, Tokens", {"views.base", "views"}),
    ("import kvlib.bench", {"bench"}),
    ("def f():\n    from kvlib import plots", {"plots"}),
])
def test_imports_are_read_as_python_resolves_them(tmp_path, monkeypatch, source, expected):
    # a module written to the side, parsed as if it were kvlib/widgets.py: the checks above rest on this
    fake = tmp_path / "widgets.py"
    fake.write_text(source + "\n")
    monkeypatch.setitem(modules(), "widgets", fake)
    parsed.cache_clear(), imports.cache_clear()
    try:
        assert imports("widgets")[0] == expected
    finally:
        parsed.cache_clear(), imports.cache_clear()
