"""The course as a static site: each notebook executed, then written as one HTML page whose views still move
with no kernel.

    python -m kvlib.tools.site                      # execute notebooks/*.ipynb and zh/*.ipynb, write site/ (make site)
    python -m kvlib.tools.site --executed DIR       # write the pages of the copies already executed in DIR (no kernel)
    python -m kvlib.tools.site --static             # pages without the model running in them (no npm packages needed)

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

The live pages (`export(..., live=True)`, as `make site` does): where a page shows an app the page can run itself
(notebook 2's tokens, 4's attention, 5's grid and cache, 6's prompt cache), a panel above it takes the learner's
text and runs the model in the page (live.js): kvlib's own forward pass exported to ONNX (kvlib/tools/webmodel.py), run
by ONNX Runtime Web, its data built as the Python views build theirs and handed to the same views. `write_live`
puts one copy of the runtime and of each model in site/live/, each a classic script (a page opened from file://
may load a sibling <script src>, not fetch it) holding gzip'd base64 bytes; the packages come from web/ (npm ci).
"""

import argparse
import base64
import gzip
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
WEB = HERE.parents[1] / "web"  # package.json and its lock: the npm packages the live pages bundle (npm ci installs them)
NODE = WEB / "node_modules"
ORT = NODE / "onnxruntime-web" / "dist"  # the WASM build: its loader (the .mjs, the glue bundled in) and its binary
RUNTIME = {"ort": ORT / "ort.wasm.bundle.min.mjs", "wasm": ORT / "ort-wasm-simd-threaded.wasm"}
TOKENIZERS = NODE / "@huggingface" / "tokenizers" / "dist" / "tokenizers.min.mjs"
# an app a page can run itself (widgets.py tags each) -> its panel's kind, which live.js knows
LIVE_APPS = {"kv-app-tokens": "tokens", "kv-app-attention": "attention", "kv-app-gridfilling": "cache",
             "kv-app-promptcachestream": "blocks"}
# what live.js writes into a view's data that kvlib's Python writes too: the same i18n entries, in the page's language
INLINE_BYTES = 32_000_000  # a page model's graph up to this size is inlined (tiny's); a bigger one is fetched over http
BLOCK_SIZE, BLOCK_TTL = 16, 300  # the page's prompt cache, as notebook 6's: kvlib.PromptCache(block_size=16, ttl 300 s)
BLOCKS_EXAMPLE = [("You are Puck, a helpful sprite. Answer in verse, briefly, as Shakespeare would. Stay in character; "
                   "never break the rhyme. ") * 3 + "\nUser: " + q for q in ("What is love?", "Where is Oberon?")]
LIVE_TEXTS = ("tokenizer.loaded", "strip.title", "att.title", "grid.title", "grid.first", "grid.again", "blocks.title",
              "blocks.size", "mode.automatic")
# The pages' own words per edition (the notebooks' words are their own), kvlib's views' words coming from
# kvlib/i18n.py. live: what opens the live notebook; model: the live panels'.
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
                    "with no Python (hover, Play, layers and heads, the 3D map); to type your own text, {live}.",
           "runs_here": " Where a panel marked ▶ sits above a picture, the model runs in this page on your own text.",
           "model": {
               "title": "▶ Your turn: the model runs in this page",
               "size": "Your first run loads {mb} MB into this page, from the site's own files; nothing is sent anywhere.",
               "loading": "Loading {what} ({mb} MB)…",
               "runtime": "ONNX Runtime Web", "the_model": "the {model} model",
               "tokenizer": "{name}'s tokenizer",
               "ready": "{model} runs in this page: {mb} MB loaded in {s} s. Nothing leaves your browser.",
               "running": "{model} is running in your browser…", "done": "Done: computed in your browser by {model}.",
               "empty": "The text is empty: type something, then press “{run}”.",
               "too_long": "{n} tokens{plus}: more than {model}'s context of {ctx} tokens. Shorten the text.",
               "plus": " and {new} to generate",
               "failed": "{file} did not load ({why}). make site writes it into site/live/, beside the pages: build "
                         "the site again, or open this page inside the folder it was built in.",
               "missing": "the file is missing or could not be read", "empty_file": "it holds nothing this page can use",
               "fetch_failed": "the server answered {status}", "broke": "The model in the page failed: {error}",
               "smollm2": "Load SmolLM2 ({mb} MB)", "use": "Back to {model} ({mb} MB)",
               "needs_http": "{model} loads only when the site is served over http (a page opened from the disk may "
                             "not fetch its {mb} MB file): python -m http.server -d site, then open "
                             "http://localhost:8000/.",
               "model_now": "model: {model}", "recorded": "Recorded output of the notebook's run. The panel above runs "
                                                         "the model in this page on your own text.",
               "text": "Your text", "tokenize": "Tokenize",
               "openai": "{name}: this tokenizer runs in the live notebook only, not in the page",
               "longer": "{n} tokens: longer than {model}'s context of {ctx}, so the model could not read all of it.",
               "too_big": "{n} tokens{plus}: more than an attention grid draws ({most} tokens, as in the notebook). "
                          "Shorten the text.",
               "steps": "The grid fills 2 or more new tokens, one a step, not “{got}”.",
               "sentence": "Your sentence", "attend": "Show its attention",
               "prompt": "Your prompt", "new": "new tokens",
               "decoding": "{model} decodes in your browser: step {s} of {last}, {q}",
               "timing": "Timed in your browser (best of {k}, after a warm-up): one decode step with the cache, "
                         "{cached} ms; the same step recomputed without it (all {n} tokens again), {full} ms: "
                         "{ratio}× as long. Their logits differ by at most {diff}.",
               "request": "Request {k}", "send": "Send both",
               "sent": "Request 2 read {reused} of its {n} tokens from the page's cache ({blocks} blocks of {size}; "
                       "the two share their first {shared} tokens). Time to first token in your browser (best of "
                       "{k}): {cold} ms cold (nothing reused), {warm} ms warm. The greedy answer, {new} tokens, "
                       "{same}",
               "sent_none": "Request 2 read none of its {n} tokens from the page's cache: the two share their first "
                            "{shared} tokens, not a whole block of {size} before its last token (always computed). So "
                            "both timings did the same work, {cold} and {warm} ms (best of {k}): any gap between them "
                            "is noise. The greedy answer, {new} tokens, {same}",
               "empty_request": "Request {k} is empty: type something, then press “{run}”.",
               "kept": "The pictures below still show your last run.",
               "same": "is identical with and without reuse ✓: {answer}",
               "differs": "differs with and without reuse ✗ (from token {i}): {answer} / {cold_answer}",
               "label": "request {k}", "tenant": "you",
               "clock": "  (your browser's clock, since you pressed Send) · the bar under a stored block: its time to "
                        "live left, of {ttl}",
           }},
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
                    "要输入你自己的文本，{live}。",
           "runs_here": "图上方有 ▶ 面板的地方，模型就在这个页面里运行，读你自己输入的文本。",
           "model": {
               "title": "▶ 轮到你了：模型就在这个页面里运行",
               "size": "第一次运行时，页面会从网站自己的文件里加载 {mb} MB；不会向任何地方发送数据。",
               "loading": "正在加载{what}（{mb} MB）……",
               "runtime": " ONNX Runtime Web ", "the_model": "模型 {model}",
               "tokenizer": " {name} 的分词器",
               "ready": "{model} 在这个页面里运行：加载了 {mb} MB，用时 {s} 秒。数据不会离开你的浏览器。",
               "running": "{model} 正在你的浏览器里运行……", "done": "完成：由 {model} 在你的浏览器里算出。",
               "empty": "文本是空的：先输入一些文字，再按“{run}”。",
               "too_long": "{n} 个 token{plus}：超过了 {model} 的上下文长度（{ctx} 个 token）。请缩短文本。",
               "plus": "，再加上要生成的 {new} 个",
               "failed": "{file} 没有加载成功（{why}）。make site 会把它写进 site/live/，和页面放在一起："
                         "请重新生成网站，或者在生成网站的那个文件夹里打开这个页面。",
               "missing": "文件不存在或读不出来", "empty_file": "里面没有这个页面能用的内容",
               "fetch_failed": "服务器返回 {status}", "broke": "页面里的模型出错了：{error}",
               "smollm2": "加载 SmolLM2（{mb} MB）", "use": "换回 {model}（{mb} MB）",
               "needs_http": "只有通过 http 访问网站时才能加载 {model}（从磁盘直接打开的页面不能下载它那个 {mb} MB "
                             "的文件）：运行 python -m http.server -d site，再打开 http://localhost:8000/。",
               "model_now": "模型：{model}", "recorded": "这是 notebook 运行时录下来的输出。上方的面板在这个页面里运行模型，"
                                                       "读你自己输入的文本。",
               "text": "你的文本", "tokenize": "分词",
               "openai": "{name}：这个分词器只在可运行的 notebook 里运行，页面里没有",
               "longer": "{n} 个 token：超过了 {model} 的上下文长度（{ctx}），模型读不完。",
               "too_big": "{n} 个 token{plus}：注意力表画不下这么多（最多 {most} 个，和 notebook 里一样）。请缩短文本。",
               "steps": "这张表每步填一个新 token，至少要 2 个，不能是“{got}”。",
               "sentence": "你的句子", "attend": "看它的注意力",
               "prompt": "你的提示词", "new": "新 token 数",
               "decoding": "{model} 正在你的浏览器里解码：第 {s} 步（共 {last} 步），{q}",
               "timing": "在你的浏览器里计时（热身一次后，取 {k} 次里最快的）：用缓存解码一步，{cached} ms；"
                         "不用缓存把同一步重算一遍（{n} 个 token 全部重读），{full} ms，是前者的 {ratio} 倍。"
                         "两者的 logits 最多相差 {diff}。",
               "request": "请求 {k}", "send": "一起发送",
               "sent": "请求 2 的 {n} 个 token 里有 {reused} 个从页面的缓存读出（{blocks} 个块，每块 {size} 个；"
                       "两个请求的前 {shared} 个 token 相同）。在你的浏览器里测的首 token 时间（取 {k} 次里最快的）："
                       "冷 {cold} ms（什么都不复用），热 {warm} ms。贪心生成的 {new} 个 token 的回答{same}",
               "sent_none": "请求 2 的 {n} 个 token 一个也没能从页面的缓存读出：两个请求只有前 {shared} 个 token "
                            "相同，凑不满最后一个 token（它总要现算）之前的一整块（{size} 个）。所以两次计时做的是同样的"
                            "计算，{cold} ms 和 {warm} ms（取 {k} 次里最快的）：两者的差别只是噪声。贪心生成的 {new} 个 "
                            "token 的回答{same}",
               "empty_request": "请求 {k} 是空的：先输入一些文字，再按“{run}”。",
               "kept": "下面的图还是你上一次运行的结果。",
               "same": "，复用和不复用完全一样 ✓：{answer}",
               "differs": "，复用和不复用不一样 ✗（从第 {i} 个 token 起）：{answer} / {cold_answer}",
               "label": "请求 {k}", "tenant": "你",
               "clock": "（你浏览器的时钟，从你按下发送算起）· 已存块下面的横条：剩下的存活时间（TTL 共 {ttl}）",
           }},
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
    """One notebook's page being written: its widget models, the views it mounts and (runs: a live page) the live
    panels it places, one per kind of app the page can run itself."""

    def __init__(self, nb, name, words, runs=False):
        self.name, self.models, self.mounted = name, nb.metadata.get("widgets", {}).get(STATE, {}).get("state", {}), {}
        self.words, self.live = words, words["live"].format(name=html.escape(name))
        self.panels = {} if runs else None  # kind -> the app's model id, in a live page

    def tags(self, s):  # the kv- classes widgets.py gave a box ("kv-app-gridfilling"), which the page keeps
        return [c for c in s.get("_dom_classes", []) if c.startswith("kv-")]

    def panel(self, ref):
        """A live panel for this app, if the page runs such apps and this is the first of its kind: a placeholder
        live.js fills, holding the run's text (or prompt and new tokens) to start from. "" otherwise."""
        s = self.state(ref)
        kind = next((LIVE_APPS[c] for c in self.tags(s or {}) if c in LIVE_APPS), None)
        if self.panels is None or kind is None or kind in self.panels:
            return ""
        self.panels[kind] = ref.removeprefix("IPY_MODEL_")
        first = self.state(s["children"][0])
        start = {"tokens": lambda: {"text": first["value"]}, "attention": lambda: {"text": first["value"]},
                 "cache": lambda: {"text": "".join(first["tokens"][:first["prompt_len"]]),
                                   "new": len(first["tokens"]) - first["prompt_len"] + 1},  # the last made is never fed
                 "blocks": lambda: {}}[kind]()
        attrs = "".join(f' data-kv-{k}="{html.escape(str(v))}"' for k, v in start.items())
        return f'<div class="kv-live" data-kv-live="{kind}"{attrs}></div>'

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
            return (f'<div class="{" ".join([BOXES[kind], *self.tags(s)])}">' + "".join(self.widget(c) for c in s["children"])
                    + "</div>")
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
            panel = self.panel(ref)
            said = self.words["model"]["recorded"] if panel else self.words["recorded"].format(live=self.live)
            note = f'<div class="kv-site-live">{said}</div>' if live and (panel or self.needs_kernel(ref)) else ""
            return f'<div class="kv-site-widget">{panel}{self.widget(ref)}{note}</div>'
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

    def views(self, more=()):
        """The mounted views' data for site.js: each view's state without its module and style, which are
        kept once per page however many views share them. more: (module, style) pairs the page's panels may
        draw that no recorded view brought."""
        modules, styles, views = {}, {}, {}
        for mid, s in self.mounted.items():
            m, c = _key(s["_esm"]), _key(s.get("_css", ""))
            modules[m], styles[c] = s["_esm"], s.get("_css", "")
            views[mid] = {"module": m, "css": c,
                          "state": {k: v for k, v in s.items() if k not in ("_esm", "_css")}}
        for esm, css in more:
            modules[_key(esm)], styles[_key(css)] = esm, css
        return {"modules": modules, "styles": styles, "views": views, "asked": self.words["asked"]}


def live_views(lang):
    """The views a live panel draws, by live.js's names: {name: (its class, its words in `lang`)}. The same classes
    and i18n words the notebooks' views have, so a panel's view is the notebook's."""
    from .. import i18n
    from ..ui.views import AttentionGrid, CacheGrowth, PromptBlocks, TokenStrip

    out = {}
    for name, cls in (("tokens", TokenStrip), ("att", AttentionGrid), ("cache", CacheGrowth), ("blocks", PromptBlocks)):
        prefixes = (cls.WORDS,) if isinstance(cls.WORDS, str) else cls.WORDS
        out[name] = cls, {k: v for prefix in prefixes for k, v in i18n.words(prefix, lang).items()}
    return out


def live_data(manifest, lang, up):
    """What live.js needs on a page of edition `lang` whose site/live/ is at `up`live/: what that folder holds
    (manifest: write_live's), the panels' words, kvlib's words for the views' data, each view's module key and
    words, and the page's prompt cache's prices (PromptCacheStream's for automatic caching)."""
    from .. import i18n
    from ..lessons import pricing
    from ..ui import widgets

    prices = pricing.PRICING[widgets.PromptCacheStream.DEFAULT_PRICES["automatic"]]
    texts = {key: i18n.local(i18n.TEXT[key], lang) for key in LIVE_TEXTS}
    provider = i18n.local(i18n.TEXT.get(f"provider.{prices.name}", prices.name), lang)
    note = i18n.local(i18n.TEXT["stream.note"], lang).format(provider=provider, read=prices.read, write=prices.write,
                                                               least=prices.min_tokens)
    views = {name: {"module": _key(cls._esm), "words": words} for name, (cls, words) in live_views(lang).items()}
    return {"dir": f"{up}live/", **manifest, "words": WORDS[lang]["model"], "texts": texts, "views": views,
            "blocks": {"note": note, "read": prices.read, "size": BLOCK_SIZE, "ttl": BLOCK_TTL,
                       "example": BLOCKS_EXAMPLE}}


def packed(data):  # bytes -> base64 of their gzip: a page unpacks them with the browser's own DecompressionStream
    return base64.b64encode(gzip.compress(data, 9, mtime=0)).decode("ascii")


def live_script(file, data):
    """A classic script that hands live.js `data` under its file's name: a page opened from file:// may load a
    sibling file as <script src>, where fetch and module imports are refused."""
    return f"(window.kvLiveFiles ??= {{}})[{json.dumps(file)}] = {json.dumps(data, ensure_ascii=False)};\n"


def tokenizer(tok):
    """A Hugging Face tokenizer as the page reads it with @huggingface/tokenizers: the very tokenizer.json kvlib's
    tokenizer runs, and the one setting its decode reads from the tokenizer's config (whose default there is
    otherwise True: " ." would decode as ".")."""
    return {"tokenizer": packed(tok.backend_tokenizer.to_str().encode()),
            "tokenizer_config": {"clean_up_tokenization_spaces": bool(tok.clean_up_tokenization_spaces)}}


def page_model(name):
    """A page model's files for site/live/, {file: text or bytes}: NAME.js (its shape, tokenizer and what the views'
    data needs besides) and its graph, tiny's inlined as NAME.onnx.js (a page from file:// runs it), a bigger one
    (SmolLM2's) a plain NAME.onnx, fetched over http."""
    import tempfile

    from ..lessons import memory
    from ..model.models import load_model
    from ..ui.views.attention import layer_bytes
    from ..ui.views.base import MAX_STATE_BYTES
    from . import webmodel

    model = load_model(name, device="cpu")
    c = model.config
    with tempfile.TemporaryDirectory() as tmp:
        onnx, nbytes = webmodel.export(model, Path(tmp) / f"{name}.onnx")
        inline = nbytes <= INLINE_BYTES
        files = ({f"{name}.onnx.js": live_script(f"{name}.onnx.js", {"onnx": packed(onnx.read_bytes())})} if inline
                 else {f"{name}.onnx": onnx.read_bytes()})
    # GridFilling's notes: what a step without a cache recomputes, n tokens read where 1 was new (memory's formula)
    wasted = [memory.forward_macs(c, 0, n) - memory.forward_macs(c, n - 1, 1) for n in range(1, c.n_ctx + 1)]
    # the most tokens an attention grid of this model draws: one layer's weights within a view's data, as AttentionGrid
    # sends them (views.attention.layer_bytes, with the room it leaves for the rest)
    grid = max(n for n in range(1, c.n_ctx + 1) if layer_bytes(c.n_head, n) <= MAX_STATE_BYTES - 1000)
    files[f"{name}.js"] = live_script(f"{name}.js", {"shape": webmodel.describe(model), **tokenizer(model.tokenizer),
                                                      "wasted_macs": wasted, "grid_tokens": grid})
    return files


def write_live(out, models=None):
    """out/live/: ONNX Runtime Web (runtime.js), the tokenizer library (tokenizers.js), GPT-2's tokenizer
    (gpt2-tokenizer.js) and each page model (tiny; SmolLM2 when it is on this machine), once for every page.
    Needs web/node_modules (npm ci). -> the manifest each live page carries: {"files": {file: bytes},
    "models": {name: {"script", "graph", "inline", "bytes": what a learner downloads to run it}}}."""
    from ..errors import KVLibError
    from ..model.models import gpt2_tokenizer, local_dir

    missing = [p for p in [*RUNTIME.values(), TOKENIZERS] if not p.exists()]
    if missing:
        raise KVLibError(f"{missing[0]} is missing: the live pages bundle the npm packages web/package.json names. "
                         "Run `npm ci --ignore-scripts --prefix web` (Node.js 20 or newer), as make site does.")
    live = Path(out) / "live"
    live.mkdir(parents=True, exist_ok=True)

    def write(files):  # {file: text or bytes} -> {file: bytes written}
        for file, data in files.items():
            (live / file).write_bytes(data if isinstance(data, bytes) else data.encode())
        return {file: (live / file).stat().st_size for file in files}

    manifest = {"files": write({
        "runtime.js": live_script("runtime.js", {k: packed(p.read_bytes()) for k, p in RUNTIME.items()}),
        "tokenizers.js": live_script("tokenizers.js", {"module": packed(TOKENIZERS.read_bytes())}),
        "gpt2-tokenizer.js": live_script("gpt2-tokenizer.js", tokenizer(gpt2_tokenizer()))}), "models": {}}
    for name in models or ["tiny"] + (["smollm2"] if local_dir("smollm2") else []):
        size = write(page_model(name))
        manifest["files"] |= size
        graph = next(file for file in size if file != f"{name}.js")
        manifest["models"][name] = {"script": f"{name}.js", "graph": graph, "inline": graph.endswith(".js"),
                                    "bytes": sum(size.values())}
    return manifest


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


def page(nb, name, nav, lang="en", live=None):
    """One executed notebook -> its page's HTML. nav: the links above and below (index, previous, next, the
    other editions'); name: where the notebook sits in the course (zh/01_x.ipynb); live: write_live's manifest,
    for a page whose apps the page runs itself (a panel above each, live.js), or None."""
    words = WORDS[lang]
    p = Page(nb, name, words, runs=live is not None)
    cells = "\n".join(p.cell(c) for c in nb.cells)
    title = title_of(nb, words)[0] or name
    intro = words["intro"].format(name=html.escape(name), moves=words["moves"] if p.mounted else "", live=p.live)
    more, runner = [], ""
    if p.panels:
        intro += words["runs_here"]
        more = [(cls._esm, cls._css) for cls, _ in live_views(lang).values()]
        runner = (f'<script type="application/json" id="kv-live">{_script_json(live_data(live, lang, up(lang)))}'
                  f'</script><script>{(HERE / "live.js").read_text(encoding="utf-8")}</script>')
    data = f'<script type="application/json" id="kv-site-views">{_script_json(p.views(more))}</script>'
    script = f'<script>{(HERE / "site.js").read_text(encoding="utf-8")}</script>{runner}'
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


def up(here):  # from a page of edition `here` to the site's root
    return "../" if here != "en" else ""


def href(here, there, file):  # a link from a page of edition `here` to `file` of edition `there`
    return up(here) + ("" if there == "en" else f"{there}/") + file


def switch(here, files, file):
    """Links from `file` of edition `here` to its counterparts: {edition: its page files} -> HTML, "" if none."""
    return " · ".join(f'<a class="kv-site-lang" lang="{there}" hreflang="{there}" href="{href(here, there, file)}">'
                      f'{WORDS[there]["name"]}</a>' for there, have in files.items() if there != here and file in have)


def export(executed, out, live=False):
    """Executed notebooks, in reading order, of one edition or more (a translation's in a folder named by its
    language: zh/01_x.ipynb) -> per edition an index and one page each: English in out, a translation in
    out/LANG; live: the pages run the model too (write_live's files in out/live/, a panel above each app a page
    can run): True for every page model on this machine, or a list of their names (["tiny"]). Returns
    {file (relative to out): bytes}."""
    import nbformat

    manifest = write_live(out, None if live is True else live) if live else None
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
            (folder / file).write_text(page(nb, name, " · ".join(links), lang, manifest), encoding="utf-8")
            entries.append((file, *title_of(nb, words)))
        (folder / "index.html").write_text(index(entries, lang, switch(lang, files, "index.html")), encoding="utf-8")
        weights |= {(folder / f).relative_to(out).as_posix(): (folder / f).stat().st_size
                    for f in [f for f, _, _ in book] + ["index.html"]}
    return weights | {f"live/{f}": n for f, n in (manifest["files"] if live else {}).items()}


def build(notebooks, out, executed=None, live=True):
    """Execute the notebooks (unless executed names a folder of executed copies), then export them to out (live:
    pages that run the model too). -> {file: bytes}, printing each step's time."""
    t0 = time.perf_counter()
    if executed is None:
        executed = out / "_executed"
        for path in notebooks:
            t = time.perf_counter()
            execute(path, executed / within(path).parent)
            print(f"kvlib site: ran {within(path)} in {time.perf_counter() - t:.0f} s", flush=True)
    t = time.perf_counter()
    weights = export([Path(executed) / within(p) for p in notebooks], out, live)
    print(f"kvlib site: wrote {sum(f.endswith('.html') for f in weights)} pages in {time.perf_counter() - t:.1f} s; "
          f"{time.perf_counter() - t0:.0f} s in all", flush=True)
    for f, n in weights.items():
        print(f"  {n / 1e3:8,.0f} kB  {f}")
    return weights


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path,
                   help="by default the course's notebooks/*.ipynb and each translation's (notebooks/zh/*.ipynb), "
                        "in reading order")
    p.add_argument("--out", type=Path, default=Path("site"))
    p.add_argument("--executed", type=Path, help="a folder of these notebooks already executed: export only")
    p.add_argument("--static", action="store_true",
                   help="pages without the model running in them (no site/live/, no npm packages needed)")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # the kernel's threads wait without spinning
    from .course import course_dir

    folder = course_dir()  # notebooks/ in a checkout, the installed course elsewhere
    course = sorted(folder.glob("*.ipynb")) + sorted(p for p in folder.glob("*/*.ipynb") if edition(p) != "en")
    build(sorted(args.notebooks) or course, args.out, args.executed, live=not args.static)


if __name__ == "__main__":
    sys.exit(main())
