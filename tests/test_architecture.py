"""ARCHITECTURE.md is the map of the code, kept true: it names every module, names no path that is not there,
every `module.name` it names exists, and its import rules hold in the code. Imports and names are read with
`ast`, so nothing is imported or loaded here and the file runs in well under a second.

The layers come from ARCHITECTURE.md's own table (one source): each row names folders of kvlib/ (or single
modules), and a module's layer is its folder's. Move a module, or a folder, there and the rules follow it.
The rules that are not plain layering are written out below, each beside the sentence of ARCHITECTURE.md it
checks."""

import ast
import json
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
KVLIB = ROOT / "kvlib"
MAP = ROOT / "ARCHITECTURE.md"
SCREEN = {"ipywidgets", "anywidget", "traitlets", "matplotlib", "IPython"}  # packages that draw or run widgets
NETWORK = {"socket", "urllib", "http", "requests", "httpx", "aiohttp", "subprocess"}  # subprocess: pip fetches
FETCHES = {"hf_hub_download", "snapshot_download"}  # huggingface_hub's functions that go to the hub
FILES = {"js", "css", "json", "py", "md", "onnx", "ipynb", "txt", "toml", "gguf", "safetensors"}  # `site.js` is a file


def text():
    return MAP.read_text()


@cache
def modules():  # {"model.gpt2": Path, "ui.views.base": Path, "ui.views": ui/views/__init__.py, "__init__": kvlib/__init__.py}
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


def in_folder(module, folder):  # "model.gpt2" is in "model"; "ui.views.base" in "ui" and in "ui.views"
    return module == folder or module.startswith(folder + ".")


@cache
def layers():
    """[(number, name, {modules})] from the table under '## Layers' in ARCHITECTURE.md: each cell names folders
    (`kvlib/model/`: every module in it, at any depth) or modules (`kvlib/errors.py`)."""
    section = text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    out = []
    for number, title, cell in re.findall(r"^\|\s*(\d+)\s+([a-z ]+?)\s*\|\s*([^|]+?)\s*\|", section, re.M):
        names = set()
        for path in re.findall(r"`kvlib/([^`]*)`", cell):
            if path.endswith("/"):
                folder = path.rstrip("/").replace("/", ".")
                names |= {m for m in modules() if in_folder(m, folder)}
            else:
                names.add(path.removesuffix(".py").replace("/", "."))
        out.append((int(number), title, names))
    return out


def layer(title):
    [names] = [names for _, t, names in layers() if t == title]
    assert names, f"ARCHITECTURE.md's layer {title!r} lists no module"
    return names


def layer_of(name):
    [number] = [n for n, _, names in layers() if name in names]
    return number


def upward_imports():
    return [f"{name} (layer {layer_of(name)}) imports {dep} (layer {layer_of(dep)})"
            for name in modules() for dep in imports(name)[0] if layer_of(dep) > layer_of(name)]


def on_the_map():  # every file ARCHITECTURE.md must name, as a path from the project root
    files = list(modules().values())
    files += [p for folder in ("ui/views", "tools") for ext in ("js", "css") for p in sorted((KVLIB / folder).glob(f"*.{ext}"))]
    files += [ROOT / "tests" / "browser.py", ROOT / "tests" / "conftest.py"]
    return [str(p.relative_to(ROOT)) for p in files]


def test_every_module_is_on_the_map():
    missing = [path for path in on_the_map() if f"`{path}`" not in text()]
    assert not missing, f"ARCHITECTURE.md does not name {missing}: add each to the code map, in backticks"


def test_every_path_on_the_map_exists():
    named = {m.rstrip(".") for m in re.findall(r"(?<![\w./-])((?:kvlib|tests|notebooks|etc)/[\w./*-]*[\w/])", text())}
    named = {n for n in named if "*" not in n}
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


def test_a_folder_is_one_layer():
    """The folders are the layers: every module of a sub-package of kvlib/ sits in its folder's layer."""
    folders = {name.split(".")[0] for name in modules() if "." in name}
    assert folders >= {"model", "server", "lessons", "ui", "tools"}
    split = {f: sorted({layer_of(m) for m in modules() if in_folder(m, f)}) for f in folders}
    assert all(len(numbers) == 1 for numbers in split.values()), f"folders across layers: {split}"


def test_imports_only_go_down_the_layers():
    upward = upward_imports()
    assert not upward, "imports that go up ARCHITECTURE.md's layers:\n" + "\n".join(upward)


@pytest.mark.parametrize("where, source", [
    ("model.kv_cache", "from ..server import blocks"),             # the model reaching up into the server
    ("server.serving", "from ..lessons.memory import kv_bytes"),   # the server reaching up into a lesson
    ("lessons.paging", "def f():\n    from ..ui import plots"),   # a lesson reaching up into the pictures, late
    ("ui.plots", "import kvlib.tools.bench"),                      # a picture reaching up into the tools
])
def test_an_import_that_runs_back_up_is_caught(tmp_path, monkeypatch, where, source):
    # a module written to the side, parsed as if it were `where`: the import-direction test above rests on this
    fake = tmp_path / "fake.py"
    fake.write_text(source + "\n")
    monkeypatch.setitem(modules(), where, fake)
    parsed.cache_clear(), imports.cache_clear()
    try:
        assert [line for line in upward_imports() if line.startswith(f"{where} ")], f"{source!r} in {where} passed"
    finally:
        parsed.cache_clear(), imports.cache_clear()


def test_base_modules_import_no_kvlib_module():
    wrong = {name: sorted(imports(name)[0]) for name in layer("base") if imports(name)[0]}
    assert not wrong, f"layer 0 imports no kvlib module: {wrong}"


def test_the_model_and_the_server_know_no_screen():
    wrong = {name: sorted(imports(name)[1] & SCREEN) for name in layer("model") | layer("server")
             if imports(name)[1] & SCREEN}
    assert not wrong, f"model and server modules import screen packages: {wrong}"


def test_the_forward_passes_and_the_cache_import_only_each_other():
    trio = {"model.gpt2", "model.llama", "model.kv_cache"}
    for name in trio:
        inner, outer = imports(name)
        assert inner <= trio | {"errors"}, f"{name} imports {sorted(inner - trio - {'errors'})}"
        assert outer <= {"torch", "math"}, f"{name} imports {sorted(outer - {'torch', 'math'})}"


def test_lessons_compute_never_draw():
    # exercises/ shows its verdict in an ipywidgets box; every other lesson module only computes
    computing = {name for name in layer("lessons") if not in_folder(name, "lessons.exercises")}
    wrong = {name: sorted(imports(name)[1] & SCREEN) for name in computing if imports(name)[1] & SCREEN}
    assert not wrong, f"lesson modules import drawing packages: {wrong}"


def test_plots_take_tensors_never_a_model():
    assert imports("ui.plots")[0] <= {"i18n"}, f"plots imports {sorted(imports('ui.plots')[0] - {'i18n'})}"  # words only
    takes_model = [f.name for f in ast.walk(parsed("ui.plots")) if isinstance(f, ast.FunctionDef)
                   and {"model", "models"} & {a.arg for a in f.args.args + f.args.kwonlyargs}]
    assert not takes_model, f"plots functions that take a model: {takes_model}"


def test_a_view_imports_no_other_view():
    views = {name for name in modules() if name.startswith("ui.views.")}
    assert len(views) > 5
    others = views - {"ui.views.base"}
    wrong = {name: sorted(imports(name)[0] & others) for name in others if imports(name)[0] & others}
    assert not wrong, f"views import other views: {wrong}"


def test_exercises_never_import_widgets():
    exercises = [name for name in modules() if in_folder(name, "lessons.exercises")]
    assert len(exercises) > 1
    wrong = [name for name in exercises if "ui.widgets" in imports(name)[0]]
    assert not wrong, f"exercise modules import kvlib.ui.widgets: {wrong}"


def notebook_imports(path):
    """The kvlib modules (by the names of modules()) a notebook's code cells import, IPython's magics left out."""
    names = set()

    def module(dotted, alias):  # `from kvlib.tools import bench` imports the module tools.bench
        sub = ".".join(p for p in (dotted, alias) if p)
        return sub if sub in modules() else dotted or "__init__"

    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            code = "\n".join(line for line in "".join(cell["source"]).splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Import):
                    names |= {a.name.removeprefix("kvlib.") for a in node.names if a.name.startswith("kvlib.")}
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kvlib":
                    names |= {module(node.module.removeprefix("kvlib").removeprefix("."), a.name) for a in node.names}
    return names


def test_only_the_command_line_imports_bench():
    importers = sorted(name for name in modules() if "tools.bench" in imports(name)[0])
    assert importers == ["__main__"], f"bench is imported by {importers}; take timed and random_ids from measure"
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 8
    wrong = [nb.name for nb in notebooks if "tools.bench" in notebook_imports(nb)]
    assert not wrong, f"{wrong} import bench; take the measurements the lessons share with it from speed"


@pytest.mark.parametrize("source", ["%%needs smollm2\nfrom kvlib.ui import plots\nfrom kvlib.tools import (views,\n    bench)",
                                    "import kvlib.tools.bench", "from kvlib.tools.bench import prompt_caching"])
def test_a_notebooks_imports_are_read_past_its_magics(tmp_path, source):
    cell = {"cell_type": "code", "source": source.splitlines(keepends=True)}
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["bench"]}, cell]}))
    assert "tools.bench" in notebook_imports(tmp_path / "nb.ipynb")


def test_only_download_uses_the_network():
    allowed = ("tools.download", "tools.train_tiny", "server.llamacpp", "server.endpoint", "tools.course")
    assert set(allowed) <= set(modules())
    wrong = {name: sorted(imports(name)[1] & NETWORK) for name in modules()
             if imports(name)[1] & NETWORK and name not in allowed}
    assert not wrong, (f"modules that can reach the network: {wrong}; only download.py (and train_tiny.py) may, "
                       f"besides llamacpp.py (a server on 127.0.0.1), endpoint.py (the URL a user names) and course.py "
                       f"(JupyterLab, on its default: this machine only)")
    assert "--ip" not in ast.unparse(parsed("tools.course"))  # course.py's JupyterLab listens on its default, localhost
    # "llamacpp.py starts llama.cpp's server listening on 127.0.0.1 only"
    hosts = [node.value.value for node in ast.walk(parsed("server.llamacpp")) if isinstance(node, ast.Assign)
             and [getattr(t, "id", None) for t in node.targets] == ["HOST"]]
    assert hosts == ["127.0.0.1"], f"llamacpp.py's HOST is {hosts}, not 127.0.0.1 alone"
    fetchers = sorted(name for name in modules() if imports(name)[1] & FETCHES)
    assert set(fetchers) <= {"tools.download"}, f"hub downloads outside download.py: {fetchers}"
    online = []
    for name in modules():
        if name in ("tools.download", "tools.train_tiny"):
            continue
        for call in ast.walk(parsed(name)):
            if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "from_pretrained" and not any(
                    k.arg == "local_files_only" and getattr(k.value, "value", None) is True for k in call.keywords):
                online.append(f"{name}:{call.lineno}")
    assert not online, f"from_pretrained without local_files_only=True: {online}"


@pytest.mark.parametrize("source, expected", [
    ("from ..model.kv_cache import KVCache", {"model.kv_cache"}),
    ("from ..model import gpt2, llama", {"model.gpt2", "model.llama"}),
    ("from .views import base, Tokens", {"ui.views.base", "ui.views"}),
    ("from .. import i18n", {"i18n"}),
    ("import kvlib.tools.bench", {"tools.bench"}),
    ("def f():\n    from kvlib.ui import plots", {"ui.plots"}),
])
def test_imports_are_read_as_python_resolves_them(tmp_path, monkeypatch, source, expected):
    # a module written to the side, parsed as if it were kvlib/ui/widgets.py: the checks above rest on this
    fake = tmp_path / "widgets.py"
    fake.write_text(source + "\n")
    monkeypatch.setitem(modules(), "ui.widgets", fake)
    parsed.cache_clear(), imports.cache_clear()
    try:
        assert imports("ui.widgets")[0] == expected
    finally:
        parsed.cache_clear(), imports.cache_clear()


def test_pyproject_ships_every_folder():
    """pyproject lists kvlib's packages (setuptools' finder cannot also take kvlib.course, mapped from notebooks/):
    the list is every folder of kvlib/ with an __init__.py, and the course."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"kvlib." + name if name != "__init__" else "kvlib" for name, path in modules().items()
               if path.name == "__init__.py"}
    assert set(setuptools["packages"]) == folders | {"kvlib.course"}, "pyproject's packages are not kvlib's folders"
    assert setuptools["package-dir"] == {"kvlib.course": "notebooks"}


# ---- every `module.name` on the map exists --------------------------------------------------------------

def defined(body):
    """The names a module's (or a class's) own body defines or imports."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@cache
def classes():  # {class name: [(module, ClassDef)]} across kvlib
    found = {}
    for name in modules():
        for node in ast.walk(parsed(name)):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((name, node))
    return found


def members(node, seen=()):
    """A class's methods and attributes, what its methods set on `self`, and the same of its kvlib bases."""
    names = defined(node.body) | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                                  and isinstance(n.ctx, ast.Store) and getattr(n.value, "id", None) == "self"}
    for base in node.bases:
        for _, parent in classes().get(getattr(base, "id", getattr(base, "attr", None)), []):
            if parent not in seen:
                names |= members(parent, (*seen, node))
    return names


@cache
def by_name():
    """{a name the map may give a module: [modules]}: its full name ('model.gpt2'), its name within its folder
    ('gpt2', 'views.step', 'exercises.n05'), with kvlib. in front ('kvlib.model.gpt2'), and 'kvlib' itself."""
    out = {"kvlib": ["__init__"]}
    for name in modules():
        if name == "__init__":
            continue
        short = name.split(".", 1)[1] if "." in name else name
        for alias in {name, short, "kvlib." + name}:
            out.setdefault(alias, []).append(name)
    return out


def has(module, rest):
    if not rest:
        return True
    sub = f"{module}.{rest[0]}" if module != "__init__" else rest[0]
    if modules()[module].name == "__init__.py" and sub in modules():
        return has(sub, rest[1:])
    if rest[0] not in defined(parsed(module).body):
        return False
    if len(rest) > 1 and rest[0] in {c.name for c in parsed(module).body if isinstance(c, ast.ClassDef)}:
        return any(rest[1] in members(c) for m, c in classes()[rest[0]] if m == module)
    return True  # a function's or an imported module's own attributes are past what the map pins


def exists(dotted):
    """True or False for a name whose head is a kvlib module or class; None for any other (torch.argmax)."""
    if dotted in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]:
        return True  # kvlib.course: the wheel's copy of notebooks/
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in by_name():
            return any(has(m, parts[k:]) for m in by_name()[".".join(parts[:k])])
    if parts[0] in classes():
        return any(parts[1] in members(c) for _, c in classes()[parts[0]])
    return None


def named_on_the_map():  # every `a.b` (or `a.b.c`) in backticks: dotted names, no call, no path, no file
    spans = re.findall(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)`", text())
    return sorted({s for s in spans if s.rsplit(".", 1)[1] not in FILES})


def test_every_name_on_the_map_exists():
    named = [n for n in named_on_the_map() if exists(n) is not None]
    assert len(named) > 40, f"the map should name kvlib's functions and classes as module.name: {named}"
    gone = [n for n in named if not exists(n)]
    assert not gone, f"ARCHITECTURE.md names what the code does not have: {gone} (renamed or removed?)"


@pytest.mark.parametrize("dotted, found", [
    ("sampling.pick", True), ("generate.pick", False), ("kvlib.server.blocks.BlockPool", True), ("PagedKVCache.add", True),
    ("Config.arch", True), ("views.step", True), ("kvlib.set_language", True), ("models.FAMILIES", True),
    ("prompt_cache.Run", False), ("PagedKVCache.file_all", False), ("gpt2.rope", False), ("views.nothing", False),
    ("torch.argmax", None), ("lm_head.weight", None),
])
def test_names_are_resolved_as_the_code_defines_them(dotted, found):
    assert exists(dotted) is found
