"""The course as a static site: each notebook executed, then written as one HTML page whose views still move
with no kernel.

    python -m kvlib.site                      # execute notebooks/*.ipynb, write site/ (make site does this)
    python -m kvlib.site --executed DIR       # write the pages of the copies already executed in DIR (no kernel)

An executed notebook stores what every widget showed: each model's last state under its metadata
(application/vnd.jupyter.widget-state+json), each output naming its model (widget-view+json). A kvlib view
is an anywidget, plain data plus an ES module (`_esm`), so a page can carry it whole: site.js gives each view
a `model` over its stored state and calls the module's `render`, as anywidget's front-end does in
JupyterLab. ipywidgets' boxes, HTML and controls are written here as plain HTML with their last values: a
control (a text box, a button) needs the kernel, so the page says so and names the command that opens the
live notebook. Nothing is fetched: each page holds its prose, code, outputs, pictures, views' data and
modules, and opens from file:// as from any static host.
"""

import argparse
import hashlib
import html
import json
import os
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
STATE = "application/vnd.jupyter.widget-state+json"
VIEW = "application/vnd.jupyter.widget-view+json"
ANYWIDGET = "AnyModel"
BOXES = {"VBoxModel": "kv-site-vbox", "BoxModel": "kv-site-vbox", "HBoxModel": "kv-site-hbox"}
READ_ONLY = {"HTMLModel", "HTMLMathModel", "LabelModel", "OutputModel"}  # what shows, takes no input
LIVE = "<code>make lab</code> in a clone of kvlib, then open <code>{name}</code>"  # what opens the live notebook


def execute(path, out):
    """Run a notebook top to bottom as a learner's Run All does (the kernel inherits this environment:
    KVLIB_MODEL, or the default model); the executed copy, widget state included, goes to out."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    out.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / path.name)
    return out / path.name


def text(x):  # nbformat keeps long strings as lists of lines
    return "".join(x) if isinstance(x, list) else x


def markdown(source):
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(source)


def code(source):
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight(source, PythonLexer(), HtmlFormatter(cssclass="kv-site-code"))


def code_style():
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".kv-site-code") + "\n.kv-site-code .err{border:none}"


class Page:
    """One notebook's page being written: its widget models and the views it mounts."""

    def __init__(self, nb, name):
        self.name, self.models, self.mounted = name, nb.metadata.get("widgets", {}).get(STATE, {}).get("state", {}), {}

    def state(self, ref):  # "IPY_MODEL_<id>" or an id -> the model's stored state, or None
        model = self.models.get(ref.removeprefix("IPY_MODEL_"))
        return model and model["state"]

    def needs_kernel(self, ref):  # does this widget, or one inside it, take input only a kernel can answer
        s = self.state(ref)
        if s is None:
            return False
        if s["_model_name"] in BOXES:
            return any(self.needs_kernel(c) for c in s["children"])
        return s["_model_name"] not in READ_ONLY and s["_model_name"] != ANYWIDGET

    def widget(self, ref):
        """A widget as HTML: boxes and read-only widgets as they look, a control with its last value (disabled),
        a view as a mount point site.js fills."""
        s = self.state(ref)
        if s is None:  # closed before the run ended: nothing stored
            return ""
        kind, label = s["_model_name"], s.get("description") or ""
        if kind == ANYWIDGET:
            self.mounted[ref.removeprefix("IPY_MODEL_")] = s
            return f'<div class="kv-site-view" data-kv-model="{ref.removeprefix("IPY_MODEL_")}"></div>'
        if kind in BOXES:
            return f'<div class="{BOXES[kind]}">' + "".join(self.widget(c) for c in s["children"]) + "</div>"
        if kind in ("HTMLModel", "HTMLMathModel"):
            return f'<div class="kv-site-html">{s["value"]}</div>'
        if kind == "OutputModel":
            return "".join(self.output(o) for o in s["outputs"])
        if kind in ("ButtonModel", "ToggleButtonModel"):
            return f'<button class="kv-site-control" disabled>{html.escape(label)}</button>'
        prefix = f'<label class="kv-site-label">{html.escape(label)}</label>' if label else ""
        if "_options_labels" in s:  # dropdowns, toggle buttons, selection sliders: the options, the one chosen
            chosen = s.get("index")
            options = "".join(f"<option{' selected' if i == chosen else ''}>{html.escape(o)}</option>"
                              for i, o in enumerate(s["_options_labels"]))
            return (f'<span class="kv-site-field">{prefix}<select class="kv-site-control" disabled>{options}</select>'
                    '</span>')
        if kind == "TextareaModel":
            return (f'<span class="kv-site-field">{prefix}<textarea class="kv-site-control" readonly rows="3">'
                    f'{html.escape(str(s.get("value", "")))}</textarea></span>')
        return (f'<span class="kv-site-field">{prefix}<input class="kv-site-control" readonly '
                f'value="{html.escape(str(s.get("value", "")))}"></span>')

    def output(self, out, live=True):  # live: say under an app that the live notebook takes input there
        kind = out["output_type"]
        if kind in ("stream", "error"):  # a notebook that ran through shows no error, but a page says what it got
            from nbconvert.filters import strip_ansi

            said = text(out["text"]) if kind == "stream" else strip_ansi("\n".join(out["traceback"]))
            err = " kv-site-err" if kind == "error" or out["name"] == "stderr" else ""
            return f'<pre class="kv-site-out{err}">{html.escape(said)}</pre>'
        data = out.get("data", {})
        if VIEW in data and self.state(data[VIEW]["model_id"]) is not None:
            ref = data[VIEW]["model_id"]
            note = (f'<div class="kv-site-live">Recorded output. The live notebook takes input here (type, press, '
                    f'check an answer): {LIVE.format(name=html.escape(self.name))}.</div>'
                    if live and self.needs_kernel(ref) else "")
            return f'<div class="kv-site-widget">{self.widget(ref)}{note}</div>'
        if "image/png" in data:
            png = text(data["image/png"]).strip()
            return f'<img class="kv-site-img" alt="a figure" src="data:image/png;base64,{png}">'
        if "image/svg+xml" in data:
            return f'<div class="kv-site-img">{text(data["image/svg+xml"])}</div>'
        if "text/html" in data:
            return f'<div class="kv-site-html">{text(data["text/html"])}</div>'
        if "text/markdown" in data:
            return f'<div class="kv-site-md">{markdown(text(data["text/markdown"]))}</div>'
        if "text/plain" in data:
            return f'<pre class="kv-site-out">{html.escape(text(data["text/plain"]))}</pre>'
        return ""

    def cell(self, cell):
        if cell.cell_type == "markdown":
            return f'<div class="kv-site-md">{markdown(cell.source)}</div>'
        if cell.cell_type != "code":
            return ""
        exercise = "exercise" in cell.metadata.get("tags", [])  # its check's buttons: said once, for the exercise
        outputs = "".join(self.output(o, live=not exercise) for o in cell.outputs)
        if exercise:
            outputs += (f'<div class="kv-site-live">An exercise: in the live notebook you type your answer in the cell '
                        f'and it is checked there ({LIVE.format(name=html.escape(self.name))}).</div>')
        return f'<div class="kv-site-cell"><div class="kv-site-input">{code(cell.source)}</div>{outputs}</div>'

    def views(self):
        """The mounted views' data for site.js: each view's state without its module and style, which are
        kept once per page however many views share them."""
        modules, styles, views = {}, {}, {}
        for mid, s in self.mounted.items():
            m, c = _key(s["_esm"]), _key(s.get("_css", ""))
            modules[m], styles[c] = s["_esm"], s.get("_css", "")
            views[mid] = {"module": m, "css": c,
                          "state": {k: v for k, v in s.items() if k not in ("_esm", "_css")}}
        return {"modules": modules, "styles": styles, "views": views}


def _key(source):
    return hashlib.blake2b(source.encode(), digest_size=8).hexdigest()


def _script_json(data):  # JSON inside <script>: a "</script>" in a string must not end the element
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/")


def title_of(nb):
    """(title, first paragraph, time) from the notebook's opening markdown cell: its # heading, the paragraph
    after it, and its **Time:** line."""
    first = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
    heading = re.search(r"^# (.+)$", first, re.M)
    paragraphs = [p.strip() for p in first.split("\n\n") if p.strip() and not p.lstrip().startswith(("#", ">", "-", "**"))]
    t = re.search(r"\*\*Time:\*\*\s*(.+)", first)
    return heading.group(1).strip() if heading else "", paragraphs[0] if paragraphs else "", t.group(1).strip() if t else ""


def shell(title, body):
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>'
            f'<style>{(HERE / "site.css").read_text(encoding="utf-8")}\n{code_style()}</style></head>\n<body>{body}</body></html>\n')


def page(nb, name, nav):
    """One executed notebook -> its page's HTML. nav: the links above and below (index, previous, next)."""
    p = Page(nb, name)
    cells = "\n".join(p.cell(c) for c in nb.cells)
    title = title_of(nb)[0] or name
    moves = " Its pictures still move here: hover them, press Play, switch layers and heads, turn the 3D map." \
        if p.mounted else ""
    intro = (f'<p class="kv-site-live">A static copy of <code>{html.escape(name)}</code>, run once when this site was '
             f'built.{moves} Typing your own text, pressing an app\'s buttons and checking your answers need the live '
             f'notebook: {LIVE.format(name=html.escape(name))}.</p>')
    data = f'<script type="application/json" id="kv-site-views">{_script_json(p.views())}</script>'
    script = f'<script>{(HERE / "site.js").read_text(encoding="utf-8")}</script>'
    return shell(title, f'<nav class="kv-site-nav">{nav}<button type="button" class="kv-site-toggle" '
                        f'onclick="document.body.classList.toggle(\'kv-site-nocode\')">Hide / show code</button></nav>'
                        f'<main>{intro}{cells}</main><nav class="kv-site-nav">{nav}</nav>{data}{script}')


def index(entries):
    """The course outline, in reading order: entries are (page file, title, first paragraph, time)."""
    items = "".join(f'<li><a href="{f}">{html.escape(t)}</a>{" · " + html.escape(tm) if tm else ""}'
                    f'<div class="kv-site-md">{markdown(p)}</div></li>' for f, t, p, tm in entries)
    body = (f'<main><h1>kvlib — the KV cache, visually</h1>'
            f'<p>A course in eight notebooks on how a language model reads a prompt and writes an answer, and on '
            f'what the KV cache and prompt caching keep and save, on real models whose every multiply is readable '
            f'Python. These pages are the notebooks as one run computed them: the views move here with no Python '
            f'(hover, Play, layers and heads, the 3D map); to type your own text, {LIVE.format(name="notebooks/")}.</p>'
            f'<ol class="kv-site-outline">{items}</ol></main>')
    return shell("kvlib — the KV cache, visually", body)


def export(executed, out):
    """Executed notebooks, in reading order -> out/index.html and one page each. Returns {file: bytes}."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    nbs = [(p, nbformat.read(p, as_version=4)) for p in executed]
    files = [p.with_suffix(".html").name for p, _ in nbs]
    weights, entries = {}, []
    for i, (path, nb) in enumerate(nbs):
        links = ['<a href="index.html">Contents</a>']
        links += [f'<a href="{files[i - 1]}">◀ {html.escape(title_of(nbs[i - 1][1])[0])}</a>'] if i else []
        links += [f'<a href="{files[i + 1]}">{html.escape(title_of(nbs[i + 1][1])[0])} ▶</a>'] if i + 1 < len(nbs) else []
        (out / files[i]).write_text(page(nb, path.name, " · ".join(links)), encoding="utf-8")
        weights[files[i]] = (out / files[i]).stat().st_size
        entries.append((files[i], *title_of(nb)))
    (out / "index.html").write_text(index(entries), encoding="utf-8")
    weights["index.html"] = (out / "index.html").stat().st_size
    return weights


def build(notebooks, out, executed=None):
    """Execute the notebooks (unless executed names a folder of executed copies), then export them to out.
    -> {file: bytes}, printing each step's time."""
    t0 = time.perf_counter()
    if executed is None:
        executed = out / "_executed"
        for path in notebooks:
            t = time.perf_counter()
            execute(path, executed)
            print(f"kvlib site: ran {path.name} in {time.perf_counter() - t:.0f} s", flush=True)
    t = time.perf_counter()
    weights = export([Path(executed) / p.name for p in notebooks], out)
    print(f"kvlib site: wrote {len(weights)} pages in {time.perf_counter() - t:.1f} s; "
          f"{time.perf_counter() - t0:.0f} s in all", flush=True)
    for f, n in weights.items():
        print(f"  {n / 1e3:8,.0f} kB  {f}")
    return weights


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="by default notebooks/*.ipynb, in reading order")
    p.add_argument("--out", type=Path, default=Path("site"))
    p.add_argument("--executed", type=Path, help="a folder of these notebooks already executed: export only")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # the kernel's threads wait without spinning
    build(sorted(args.notebooks or Path("notebooks").glob("*.ipynb")), args.out, args.executed)


if __name__ == "__main__":
    sys.exit(main())
