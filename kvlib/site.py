"""The course as a static site: each notebook executed, then written as one HTML page whose views still move
with no kernel.

    python -m kvlib.site                      # execute notebooks/*.ipynb and zh/*.ipynb, write site/ (make site)
    python -m kvlib.site --executed DIR       # write the pages of the copies already executed in DIR (no kernel)

Each edition is a language: the English notebooks' pages at the site's root, a translation's
(notebooks/zh/*.ipynb) under site/zh/ with an index of its own; each page links to its counterpart in the
other editions where there is one (the same file name), and each index to the other indexes.

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
# The pages' own words per edition (the notebooks' words are their own). site imports no kvlib module, so they
# are here, not in kvlib/i18n.py. live: what opens the live notebook.
WORDS = {
    "en": {"name": "English", "time": "**Time:**", "contents": "Contents", "code": "Hide / show code",
           "live": "<code>make lab</code> in a clone of kvlib, then open <code>{name}</code>",
           "recorded": "Recorded output. The live notebook takes input here (type, press, check an answer): {live}.",
           "exercise": "An exercise: in the live notebook you type your answer in the cell and it is checked there "
                       "({live}).",
           "asked": "This asks Python for more, which a static page has not got: the live notebook computes it "
                    "(make lab in a clone of kvlib).",
           "intro": "A static copy of <code>{name}</code>, run once when this site was built.{moves} Typing your own "
                    "text, pressing an app's buttons and checking your answers need the live notebook: {live}.",
           "moves": " Its pictures still move here: hover them, press Play, switch layers and heads, turn the 3D map.",
           "title": "kvlib — the KV cache, visually",
           "about": "A course in eight notebooks on how a language model reads a prompt and writes an answer, and on "
                    "what the KV cache and prompt caching keep and save, on real models whose every multiply is "
                    "readable Python. These pages are the notebooks as one run computed them: the views move here "
                    "with no Python (hover, Play, layers and heads, the 3D map); to type your own text, {live}."},
    "zh": {"name": "中文", "time": "**时间：**", "contents": "目录", "code": "隐藏 / 显示代码",
           "live": "在 kvlib 的克隆里运行 <code>make lab</code>，再打开 <code>{name}</code>",
           "recorded": "这是录下来的输出。可运行的 notebook 在这里接受输入（打字、按按钮、检查答案）：{live}。",
           "exercise": "练习：在可运行的 notebook 里，你在单元格中写下答案，当场检查（{live}）。",
           "asked": "这一步要 Python 再算一些数据，静态页面做不到：可运行的 notebook 会算出来"
                    "（在 kvlib 的克隆里运行 make lab）。",
           "intro": "这是 <code>{name}</code> 的静态副本，在生成本站时运行过一次。{moves}输入自己的文本、按小工具的按钮、"
                    "检查答案，要用可运行的 notebook：{live}。",
           "moves": "这里的图依然能动：把鼠标停在上面，按 Play，切换层和注意力头，转动 3D 图。",
           "title": "kvlib：看得见的 KV 缓存",
           "about": "这门课讲语言模型怎样读提示词、写回答，以及 KV 缓存和提示词缓存存了什么、省了什么；用的是真模型，"
                    "每一次乘法都是看得懂的 Python。中文版目前有 {count} 课。这些页面是 notebook "
                    "运行一次算出的结果：图在这里不用 Python 也能动（悬停、Play、层和注意力头、3D 图）；"
                    "要输入你自己的文本，{live}。"},
}


def edition(path):
    """A notebook's language: the name of its folder when that is a translation's (notebooks/zh/...), else English."""
    return Path(path).parent.name if Path(path).parent.name in WORDS else "en"


def within(path):  # where a notebook sits in its course: 01_x.ipynb, or zh/01_x.ipynb for a translation's
    return Path(path.name) if edition(path) == "en" else Path(edition(path), path.name)


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

    def __init__(self, nb, name, words):
        self.name, self.models, self.mounted = name, nb.metadata.get("widgets", {}).get(STATE, {}).get("state", {}), {}
        self.words, self.live = words, words["live"].format(name=html.escape(name))

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
            note = (f'<div class="kv-site-live">{self.words["recorded"].format(live=self.live)}</div>'
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
            outputs += f'<div class="kv-site-live">{self.words["exercise"].format(live=self.live)}</div>'
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
        return {"modules": modules, "styles": styles, "views": views, "asked": self.words["asked"]}


def _key(source):
    return hashlib.blake2b(source.encode(), digest_size=8).hexdigest()


def _script_json(data):  # JSON inside <script>: a "</script>" in a string must not end the element
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/")


def title_of(nb, words=WORDS["en"]):
    """(title, first paragraph, time) from the notebook's opening markdown cell: its # heading, the paragraph
    after it, and its **Time:** line (in its language: words["time"])."""
    first = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
    heading = re.search(r"^# (.+)$", first, re.M)
    paragraphs = [p.strip() for p in first.split("\n\n") if p.strip() and not p.lstrip().startswith(("#", ">", "-", "**"))]
    t = re.search(re.escape(words["time"]) + r"\s*(.+)", first)
    return heading.group(1).strip() if heading else "", paragraphs[0] if paragraphs else "", t.group(1).strip() if t else ""


def shell(title, body, lang="en"):
    return (f'<!doctype html>\n<html lang="{lang}"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>'
            f'<style>{(HERE / "site.css").read_text(encoding="utf-8")}\n{code_style()}</style></head>\n<body>{body}</body></html>\n')


def page(nb, name, nav, lang="en"):
    """One executed notebook -> its page's HTML. nav: the links above and below (index, previous, next, the
    other editions'); name: where the notebook sits in the course (zh/01_x.ipynb)."""
    words = WORDS[lang]
    p = Page(nb, name, words)
    cells = "\n".join(p.cell(c) for c in nb.cells)
    title = title_of(nb, words)[0] or name
    intro = words["intro"].format(name=html.escape(name), moves=words["moves"] if p.mounted else "", live=p.live)
    data = f'<script type="application/json" id="kv-site-views">{_script_json(p.views())}</script>'
    script = f'<script>{(HERE / "site.js").read_text(encoding="utf-8")}</script>'
    return shell(title, f'<nav class="kv-site-nav">{nav}<button type="button" class="kv-site-toggle" '
                        f'onclick="document.body.classList.toggle(\'kv-site-nocode\')">{words["code"]}</button></nav>'
                        f'<main><p class="kv-site-live">{intro}</p>{cells}</main><nav class="kv-site-nav">{nav}</nav>'
                        f'{data}{script}', lang)


def index(entries, lang="en", switch=""):
    """The course outline, in reading order: entries are (page file, title, first paragraph, time); switch: the
    links to the other editions' indexes."""
    words = WORDS[lang]
    items = "".join(f'<li><a href="{f}">{html.escape(t)}</a>{" · " + html.escape(tm) if tm else ""}'
                    f'<div class="kv-site-md">{markdown(p)}</div></li>' for f, t, p, tm in entries)
    about = words["about"].format(count=len(entries), live=words["live"].format(name="notebooks/"))
    nav = f'<nav class="kv-site-nav">{switch}</nav>' if switch else ""
    body = (f'{nav}<main><h1>{words["title"]}</h1><p>{about}</p><ol class="kv-site-outline">{items}</ol></main>')
    return shell(words["title"], body, lang)


def href(here, there, file):  # a link from a page of edition `here` to `file` of edition `there`
    return ("../" if here != "en" else "") + ("" if there == "en" else f"{there}/") + file


def switch(here, files, file):
    """Links from `file` of edition `here` to its counterparts: {edition: its page files} -> HTML, "" if none."""
    return " · ".join(f'<a class="kv-site-lang" lang="{there}" hreflang="{there}" href="{href(here, there, file)}">'
                      f'{WORDS[there]["name"]}</a>' for there, have in files.items() if there != here and file in have)


def export(executed, out):
    """Executed notebooks, in reading order, of one edition or more (a translation's in a folder named by its
    language: zh/01_x.ipynb) -> per edition an index and one page each: English in out, a translation in
    out/LANG. Returns {file (relative to out): bytes}."""
    import nbformat

    books = {}  # edition -> [(page file, executed notebook, where it sits in the course)]
    for p in map(Path, executed):
        books.setdefault(edition(p), []).append((p.with_suffix(".html").name, nbformat.read(p, as_version=4),
                                                 within(p).as_posix()))
    files = {lang: {f for f, _, _ in book} | {"index.html"} for lang, book in books.items()}
    weights = {}
    for lang, book in books.items():
        folder, words, entries = out if lang == "en" else out / lang, WORDS[lang], []
        folder.mkdir(parents=True, exist_ok=True)
        for i, (file, nb, name) in enumerate(book):
            links = [f'<a href="index.html">{words["contents"]}</a>']
            links += [f'<a href="{book[i - 1][0]}">◀ {html.escape(title_of(book[i - 1][1], words)[0])}</a>'] if i else []
            links += ([f'<a href="{book[i + 1][0]}">{html.escape(title_of(book[i + 1][1], words)[0])} ▶</a>']
                      if i + 1 < len(book) else [])
            links += [switch(lang, files, file)] if switch(lang, files, file) else []
            (folder / file).write_text(page(nb, name, " · ".join(links), lang), encoding="utf-8")
            entries.append((file, *title_of(nb, words)))
        (folder / "index.html").write_text(index(entries, lang, switch(lang, files, "index.html")), encoding="utf-8")
        weights |= {(folder / f).relative_to(out).as_posix(): (folder / f).stat().st_size
                    for f in [f for f, _, _ in book] + ["index.html"]}
    return weights


def build(notebooks, out, executed=None):
    """Execute the notebooks (unless executed names a folder of executed copies), then export them to out.
    -> {file: bytes}, printing each step's time."""
    t0 = time.perf_counter()
    if executed is None:
        executed = out / "_executed"
        for path in notebooks:
            t = time.perf_counter()
            execute(path, executed / within(path).parent)
            print(f"kvlib site: ran {within(path)} in {time.perf_counter() - t:.0f} s", flush=True)
    t = time.perf_counter()
    weights = export([Path(executed) / within(p) for p in notebooks], out)
    print(f"kvlib site: wrote {len(weights)} pages in {time.perf_counter() - t:.1f} s; "
          f"{time.perf_counter() - t0:.0f} s in all", flush=True)
    for f, n in weights.items():
        print(f"  {n / 1e3:8,.0f} kB  {f}")
    return weights


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path,
                   help="by default notebooks/*.ipynb and each translation's (notebooks/zh/*.ipynb), in reading order")
    p.add_argument("--out", type=Path, default=Path("site"))
    p.add_argument("--executed", type=Path, help="a folder of these notebooks already executed: export only")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # the kernel's threads wait without spinning
    course = sorted(Path("notebooks").glob("*.ipynb")) + sorted(p for p in Path("notebooks").glob("*/*.ipynb")
                                                               if edition(p) != "en")
    build(sorted(args.notebooks) or course, args.out, args.executed)


if __name__ == "__main__":
    sys.exit(main())
