"""JupyterLab on 127.0.0.1 driven by Playwright on Debian's Chromium: the helpers the browser
tests share, and a tool to look at a notebook's views by hand:

    .venv/bin/python tests/browser.py notebooks/05_kv_cache.ipynb   # runs it, screenshots every view
    .venv/bin/python tests/browser.py --readme                      # the README's pictures, into docs/pictures
    .venv/bin/python tests/browser.py --live                        # the live pages' bytes and speed, measured

Every page records what it asks the network for (nothing may leave 127.0.0.1) and what it
sends the kernel (a view that switches in the browser sends nothing).
"""

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).parent.parent
# Debian's, where make test installs it; elsewhere (macOS, another Linux) KVLIB_CHROMIUM names a Chromium or Chrome
CHROMIUM = os.environ.get("KVLIB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "kvlib-test"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOCAL = {"127.0.0.1"}
VIEWS = ".kv-view"  # the browser-drawn views (kvlib/ui/views)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    url = None
    root = None  # the folder it serves notebooks from
    log = None  # the server's log: the kernels' own errors land here
    model = None  # the notebooks' default model (KVLIB_MODEL), if the server was given one


def save_gpt2_format(out):
    """tiny's weights and tokenizer saved with save_pretrained into out: a checkpoint in GPT-2's format, as a
    downloaded GPT-2 sits on disk (and tiny's trained weights, so the lessons' claims still hold)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kvlib.model import models

    AutoModelForCausalLM.from_pretrained(models.TINY_DIR).save_pretrained(out)
    AutoTokenizer.from_pretrained(models.TINY_DIR).save_pretrained(out)
    return out


@contextlib.contextmanager
def lab_server(root, env=None):
    """JupyterLab serving root/notebooks; yields its URL."""
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / "config"), "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
           **(env or {})}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
         "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root / 'notebooks'}"],
        stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"), env=env)
    Lab.url, Lab.root, Lab.log = f"http://127.0.0.1:{port}", root / "notebooks", root / "server.log"
    Lab.model = (env or {}).get("KVLIB_MODEL")
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{Lab.url}/api/status?token={TOKEN}", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("JupyterLab did not start: " + (root / "server.log").read_text()[-2000:])
        yield Lab.url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            # the server once shut its kernels down and then hung at exit, joining an idle AnyIO
            # worker thread (py-spy: threading._shutdown); the tests are over, so end it
            server.kill()
            server.wait(10)


def close_all(browser):
    """Close every page and shut down every kernel the lab runs: the next notebook starts as a learner's
    would, alone, not beside every earlier one's kernel (each holds its models: 1-2 GB, and its threads)."""
    kernels = f"{Lab.url}/api/kernels"  # the kernels first, while their pages still listen to what they say
    with urllib.request.urlopen(f"{kernels}?token={TOKEN}", timeout=30) as r:
        running = json.load(r)
    for k in running:
        urllib.request.urlopen(urllib.request.Request(f"{kernels}/{k['id']}?token={TOKEN}", method="DELETE"),
                               timeout=60).close()
    for context in browser.contexts:
        context.close()


def lab_path(path):  # where the lab serves a notebook: notebooks/zh/02_tokens.ipynb -> zh/02_tokens.ipynb
    path, notebooks = Path(path).resolve(), (REPO / "notebooks").resolve()
    return path.relative_to(notebooks).as_posix() if path.is_relative_to(notebooks) else path.name


def copy_notebooks(root, paths=None):
    """A copy of the notebooks, the translations in their folders (running them must not write outputs into the repo)."""
    for p in paths or sorted((REPO / "notebooks").glob("*.ipynb")) + sorted((REPO / "notebooks").glob("*/*.ipynb")):
        to = root / "notebooks" / lab_path(p)
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, to)


@contextlib.contextmanager
def chromium():
    assert Path(CHROMIUM).exists(), (f"no Chromium at {CHROMIUM}: apt-get install -y chromium (make test does this as "
                                      f"root), or set KVLIB_CHROMIUM to a Chromium or Chrome binary")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def shots_dir():
    """Where screenshots go: $KVLIB_SCREENSHOTS; unset, none are taken (a test run spends no time on pictures
    nobody looks at): `KVLIB_SCREENSHOTS=.screenshots make test` keeps them for a person to look at."""
    if not os.environ.get("KVLIB_SCREENSHOTS"):
        return None
    d = Path(os.environ["KVLIB_SCREENSHOTS"])
    d.mkdir(parents=True, exist_ok=True)
    return d


def shot(target, name):
    """A screenshot of a page or an element (Playwright scrolls to it and waits until it is still), if wanted."""
    if shots_dir():
        target.screenshot(path=str(shots_dir() / f"{name}.png"))


class Recorder:
    """What a page asked the network for, the frames it sent to kernels and those it got back."""

    def __init__(self, page):
        self.urls, self.kernel_frames, self.received = [], 0, []
        page.on("request", lambda r: self.urls.append(r.url))
        page.on("websocket", self._socket)

    def _socket(self, ws):
        if "/api/kernels/" in ws.url:
            ws.on("framesent", lambda _: setattr(self, "kernel_frames", self.kernel_frames + 1))
            ws.on("framereceived", lambda f: self.received.append(f.decode("utf-8", "replace") if isinstance(f, bytes) else f))

    def remote(self):  # requests to anywhere but this machine
        return [u for u in self.urls if urlparse(u).scheme in ("http", "https", "ws", "wss")
                and urlparse(u).hostname not in LOCAL]


def open_and_run(browser, lab, name, timeout_s=240):
    """Open a notebook, run all its cells, wait until the kernel is idle; returns (page, console errors).

    page.recorder holds the page's requests and kernel frames."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.recorder = Recorder(page)
    # where this notebook's part of the server's log begins: an earlier test's teardown may have logged there
    # (tornado's WebSocketClosedError when a page closes while the server writes to it)
    page.log_start = Lab.log.stat().st_size if Lab.log else 0
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    # a workspace of its own, reset, so no tab from an earlier test opens beside it
    page.goto(f"{lab}/lab/workspaces/{Path(name).stem}/tree/{name}?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)  # the kernel is up
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    n_code = page.locator(".jp-CodeCell").count()
    # done when every code cell has its number, or as soon as one shows an error: Run All stops there, and the
    # cells after it would wait for the whole timeout with nothing to say why
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        page.wait_for_function(
            f"""() => {{
                if (document.querySelector({json.dumps('.jp-CodeCell ' + ERROR_OUTPUT)})) return true;
                const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
                return prompts.length === {n_code} && prompts.every(t => /\\[\\d+\\]/.test(t));
            }}""", timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        raise AssertionError(f"{name}: not done in {timeout_s} s; the cells' prompts: {cell_states(page)}") from None
    failed = page.locator(f".jp-CodeCell:has({ERROR_OUTPUT})")
    if failed.count():
        cell = failed.first
        raise AssertionError(f"{name}: a cell wrote to stderr (a traceback, where Run All stops, or a warning); "
                             f"its code:\n"
                             f"{cell.locator('.jp-InputArea-editor').inner_text()[:800]}\n"
                             f"its output:\n{cell.locator(ERROR_OUTPUT).first.inner_text()[-2000:]}")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    return page, errors


# how JupyterLab marks an output written to stderr, a traceback included
ERROR_OUTPUT = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


def cell_states(page):
    """Each code cell's prompt in order: [3] ran, [*] runs now, [ ] never ran."""
    return " ".join(page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts())


def check_clean(page, errors, name, pictures=True):
    if Lab.model:  # the notebook's first cell prints the model it loaded: the server's default
        first = page.locator(".jp-CodeCell").first.locator(".jp-OutputArea").inner_text()
        assert f"Model({Lab.model!r}," in first, f"{name}: the first cell loaded {first[:300]!r}, not {Lab.model}"
    stderr = page.locator(ERROR_OUTPUT)
    assert stderr.count() == 0, f"{name}: error output: {stderr.first.inner_text()[:500]}"
    for text in page.locator(VIEWS).all_inner_texts():  # a JS null or undefined written where a word was meant
        assert not re.search(r"\b(null|undefined|NaN)\b", text), f"{name}: a view shows {text[:500]!r}"
    if pictures:
        assert page.locator(".jp-RenderedImage img").count() > 0, f"{name}: no pictures rendered"
    assert page.locator(".jupyter-widgets").count() > 0, f"{name}: no widgets rendered"
    real = [e for e in errors if "favicon" not in e]
    assert not real, f"{name}: console errors: {real[:5]}"
    remote = page.recorder.remote()
    assert not remote, f"{name}: requests left 127.0.0.1: {remote[:5]}"


def settle(page, errors, name, what):
    """After an interaction: wait for the kernel, then nothing went wrong anywhere a learner or teacher
    would see it: no error or stderr output, no ⚠ message from an app, no console error, no traceback
    in the server's (kernels') log since this notebook opened, no request beyond 127.0.0.1."""
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    bad = page.locator(ERROR_OUTPUT)
    assert bad.count() == 0, f"{name}, after {what}: error output: {bad.first.inner_text()[:500]}"
    warned = page.locator(".jupyter-widgets:has-text('⚠')")
    assert warned.count() == 0, f"{name}, after {what}: an app says {warned.first.inner_text()[:300]}"
    real = [e for e in errors if "favicon" not in e]
    assert not real, f"{name}, after {what}: console errors: {real[:5]}"
    log = Lab.log.read_bytes()[page.log_start:].decode("utf-8", "replace") if Lab.log else ""
    assert "Traceback" not in log, f"{name}, after {what}: the server log has a traceback: {log[-2000:]}"
    remote = page.recorder.remote()
    assert not remote, f"{name}, after {what}: requests left 127.0.0.1: {remote[:5]}"


def tip(page, locator):
    """Hover an element; -> the text its view's tooltip shows then. First the pointer leaves: the tooltip must
    hide, and it is emptied, so no text is on show before the hover and what comes back is this hover's."""
    view = locator.locator("xpath=ancestor::div[contains(@class, 'kv-view')][1]")
    t = view.locator(".kv-tip")
    page.mouse.move(0, 0)
    t.wait_for(state="hidden", timeout=5_000)
    t.evaluate("t => t.replaceChildren()")
    locator.scroll_into_view_if_needed()
    locator.hover()
    t.wait_for(state="visible", timeout=5_000)
    return t.inner_text()


# After an action, one animation frame and one task: the page has run the action's handlers, and a view or
# widget sends its kernel message inside them (a websocket send is synchronous), so the count is complete.
SETTLED = "() => new Promise(r => requestAnimationFrame(() => setTimeout(() => r(true))))"


def no_kernel_request(page, action):
    """Do `action` in the page; -> how many frames went to the kernel meanwhile (a browser-only switch: 0)."""
    before = page.recorder.kernel_frames
    action()
    page.evaluate(SETTLED)
    return page.recorder.kernel_frames - before


def kernel_holds(page, action, *values, timeout_s=30):
    """Do `action` (typing into widgets) and wait until the kernel has echoed each new value back
    (ipywidgets' echo_update, sent as the kernel takes a value in): a click after this sees them."""
    seen, deadline = len(page.recorder.received), time.monotonic() + timeout_s
    action()
    wanted = [re.compile(r'"value":\s*' + re.escape(json.dumps(v, ensure_ascii=False)) + r"\s*[,}]") for v in values]
    while True:
        echoes = [f for f in page.recorder.received[seen:] if "echo_update" in f]
        if all(any(w.search(f) for f in echoes) for w in wanted):
            return
        if time.monotonic() > deadline:  # a wait for a kernel that never answers must end somewhere
            raise AssertionError(f"the kernel did not take {values} in {timeout_s} s")
        page.evaluate(SETTLED)  # lets Playwright deliver the frames received meanwhile


def js_num(text):  # a number as the views print it (a real minus sign)
    return float(text.replace("−", "-"))


RECORD_STEPS = """([root, rows]) => {  // on every step the view shows, note the rows it then holds
    root.__seen = [];
    const count = new Function("r", `return (${rows})(r)`);
    new MutationObserver(() => root.__seen.push([+root.dataset.step, count(root)]))
        .observe(root, {attributes: true, attributeFilter: ["data-step"]});
}"""
GRID_ROWS = "(r) => r.querySelectorAll('tr.kv-att-row').length"
CACHE_ROWS = "(r) => [...r.querySelectorAll('.kv-layer')].map(l => l.querySelectorAll('.kv-kvrow').length)"


def play_through(page, root, rows, last):
    """Press Play and wait for the last step; -> [(step, rows)] as the view showed them, one per step."""
    page.evaluate(RECORD_STEPS, [root.element_handle(), rows])
    frames = no_kernel_request(page, lambda: (root.locator("button", has_text="Play").click(),
                                              page.wait_for_function("([r, n]) => r.dataset.step == n",
                                                                     arg=[root.element_handle(), last],
                                                                     timeout=60_000)))
    return root.evaluate("r => r.__seen"), frames


def drag_across(page, target, dx=80, dy=30):
    """Press the mouse in the middle of target, move it by (dx, dy) in steps, release: a drag, as a hand makes it."""
    box = target.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y + dy, steps=5)
    page.mouse.up()


def screenshots(page, name, selectors=(".jp-RenderedImage img", ".jupyter-widgets.widget-vbox", VIEWS)):
    """One screenshot per picture, app or view, if wanted (shots_dir); -> how many."""
    if not shots_dir():
        return 0
    k = 0
    for sel in selectors:
        for i in range(page.locator(sel).count()):
            shot(page.locator(sel).nth(i), f"{name}-{k:02d}")
            k += 1
    return k


# The README's pictures: the course's central views, each at a telling moment, shot from the pages `make site`
# writes (kvlib/tools/site.py): (notebook, picture, the view, what to do first)
PICTURES = REPO / "docs" / "pictures"
MIDWAY = lambda view: view.locator("input.kv-slider").fill(str(int(view.locator("input.kv-slider").get_attribute("max")) // 2))
README_VIEWS = [
    ("05_kv_cache", "cache-growing", ".kv-cachegrowth", MIDWAY),  # mid-decode: the history sits, one token climbs
    ("05_kv_cache", "grid-filling", ".kv-att", MIDWAY),
    ("05_kv_cache", "worked-step", ".kv-step", lambda view: [view.locator("button", has_text="Next").click() for _ in range(3)]),
    ("06_prompt_caching", "prompt-cache-blocks", ".kv-blocks", lambda view: None),
]


def pictures(out=PICTURES):
    """The README's pictures: notebooks 5 and 6 executed and written as pages, their central views shot into out."""
    import tempfile

    from kvlib.tools import site

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, chromium() as browser:
        tmp = Path(tmp)
        notebooks = sorted({nb for nb, *_ in README_VIEWS})
        site.export([site.execute(REPO / "notebooks" / f"{nb}.ipynb", tmp) for nb in notebooks], tmp / "site")
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        for nb, name, selector, act in README_VIEWS:
            page.goto((tmp / "site" / f"{nb}.html").as_uri())
            view = page.locator(selector).first
            view.wait_for()
            act(view)
            page.mouse.move(0, 0)  # no tooltip, and no focus ring on the slider, in the picture
            page.evaluate("document.activeElement.blur()")
            view.screenshot(path=str(out / f"{name}.png"), animations="disabled")
            print(f"{out / name}.png")


# ---- the site's live pages (kvlib/tools/site.py, kvlib/tools/live.js) ------------------------------------------------

EXAMPLE = "The king is dead"  # the recorded run's text; the tests type others
APPS = [
    ("markdown", "# Live\n\nThe apps a page can run itself.\n\n**Time:** a minute."),
    ("code", "import kvlib\nfrom kvlib.ui import views, widgets\nfrom kvlib.server.prompt_cache import ManualClock\n"
             "model = kvlib.load_model('tiny')"),
    ("code", f"widgets.Tokens(model, {EXAMPLE!r})"),
    ("code", f"widgets.AttentionExplorer(model, {EXAMPLE!r})"),
    ("code", f"widgets.GridFilling(model, {EXAMPLE!r}, new_tokens=4)"),
    ("code", f"views.CacheGrowth.of(model, {EXAMPLE!r}, new_tokens=4)"),
    ("code", "pc = kvlib.PromptCache(model, block_size=16, ttl_seconds=300, clock=ManualClock())\n"
             "system = 'You are Puck, a sprite. Answer in verse, as Shakespeare would. ' * 3\n"
             "stream = widgets.PromptCacheStream(pc, [('q1', 'acme', system + 'Who art thou?')])\n"
             "stream.send()\nstream"),
]


def live_site(root, models=True):
    """APPS as a notebook in English and in Chinese, executed and exported as live pages (site.export(live=models):
    True for tiny and SmolLM2 where it is on disk) into root/site; -> that folder."""
    import nbformat

    from kvlib.tools import site

    def notebook(folder, lang=None):  # a translation's sets its language first
        first = [("code", f"import kvlib\nkvlib.set_language({lang!r})")] if lang else []
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(s) if kind == "markdown" else
                                             nbformat.v4.new_code_cell(s) for kind, s in first + APPS])
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / "live.ipynb")
        return folder / "live.ipynb"

    executed = [site.execute(notebook(root / "nb"), root / "executed"),
                site.execute(notebook(root / "nb" / "zh", "zh"), root / "executed" / "zh")]
    site.export(executed, root / "site", live=models)
    return root / "site"


@contextlib.contextmanager
def served(root):
    """root served over HTTP on 127.0.0.1 by the standard library's server, as `python -m http.server` does."""
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def text_of(model, n, source="To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer "
                            "the slings and arrows of outrageous fortune, or to take arms against a sea of troubles"):
    """The longest start of `source`, cut at a character, that `model` reads as at most n tokens (n exactly, for
    this source and the course's models)."""
    cut = max(k for k in range(len(source) + 1) if len(model.encode(source[:k])) <= n)
    return source[:cut]


def live_figures(root):
    """Measured, not asserted: what a learner downloads for a live page and how fast the page's model runs in
    Chromium here, beside kvlib in Python on the same machine (python tests/browser.py --live)."""
    import torch

    import kvlib
    from kvlib.model.measure import one_thread, timed

    site = live_site(root)
    sizes = {p.name: p.stat().st_size for p in (site / "live").iterdir()}
    page_bytes = (site / "live.html").stat().st_size
    common = sizes["runtime.js"] + sizes["tokenizers.js"]
    print(f"a live page: {page_bytes / 1e6:.1f} MB of page (its prose, figures and recorded views), then for the model "
          f"{(common + sizes['tiny.js'] + sizes['tiny.onnx.js']) / 1e6:.1f} MB for tiny (runtime {sizes['runtime.js'] / 1e6:.1f}, "
          f"tokenizer library {sizes['tokenizers.js'] / 1e6:.2f}, tiny's graph {sizes['tiny.onnx.js'] / 1e6:.1f}, its "
          f"tokenizer and shape {sizes['tiny.js'] / 1e6:.2f}); GPT-2's tokenizer {sizes['gpt2-tokenizer.js'] / 1e6:.1f} "
          f"more on page 02" + (f"; SmolLM2 {(sizes['smollm2.js'] + sizes['smollm2.onnx']) / 1e6:.0f} MB more"
                                 if "smollm2.onnx" in sizes else ""))
    with chromium() as browser, served(site) as url:
        for name in ["tiny"] + (["smollm2"] if "smollm2.onnx" in sizes else []):
            model = kvlib.load_model(name, device="cpu")
            page = browser.new_page()
            page.goto(f"{url}/live.html")
            drawn = page.evaluate("window.kvSite.drawn.then(() => performance.now())")
            panel = page.locator(".kv-live[data-kv-live=cache]")
            panel.locator(".kv-live-text").fill(text_of(model, 30))
            panel.locator("input.kv-live-new").fill("2")  # 30 tokens + 1 fed: the step recomputed reads 32
            t = time.perf_counter()
            panel.locator("button.kv-live-smollm2" if name == "smollm2" else "button.kv-live-run").click()
            status = panel.locator(".kv-live-status")  # "step 1 of 1" is said once step 0's views are drawn
            page.wait_for_function("s => / 1 of 1/.test(s.textContent)", arg=status.element_handle(), timeout=600_000)
            first = time.perf_counter() - t
            page.wait_for_function("p => +p.dataset.runs > 0", arg=panel.element_handle(), timeout=600_000)
            result = panel.locator(".kv-live-result")
            prefill, step = float(result.get_attribute("data-full-ms")), float(result.get_attribute("data-cached-ms"))
            ids = model.encode(text_of(model, 30))
            ids = ids + kvlib.generate(model, ids, 2, stop_at_eos=False).ids  # the 32 tokens the page read
            with torch.no_grad(), one_thread():  # as the page's WASM runs: one thread
                py_prefill = min(timed(lambda: model.forward(ids))[1] for _ in range(4)) * 1e3  # the first warms up
                cache, steps = model.new_cache(), []
                model.forward(ids[:-1], cache=cache)
                for _ in range(4):  # the step, then the cache cropped back to the 31 tokens before it
                    steps.append(timed(lambda: model.forward(ids[-1:], cache=cache))[1])
                    cache.crop(len(ids) - 1)
                py_step = min(steps) * 1e3
            print(f"{name}: the page's recorded views drawn {drawn / 1e3:.1f} s after opening; from the first press "
                  f"to the first live picture {first:.1f} s ({panel.locator('.kv-live-loaded').inner_text()}). One "
                  f"thread each, best of 3 after a warm-up: a prefill of {len(ids)} tokens {prefill:.1f} ms in "
                  f"Chromium (WASM), {py_prefill:.1f} ms in kvlib (torch), the page taking {prefill / py_prefill:.2g}x "
                  f"kvlib's time; one cached decode step {step:.1f} ms against {py_step:.1f} ms, "
                  f"{step / py_step:.2g}x")
            page.close()


def main(paths):
    """Run notebooks in the browser and screenshot each view (to $KVLIB_SCREENSHOTS or .screenshots)."""
    import tempfile

    os.environ.setdefault("KVLIB_SCREENSHOTS", str(REPO / ".screenshots"))
    with tempfile.TemporaryDirectory() as tmp, chromium() as browser:
        root = Path(tmp)
        copy_notebooks(root, [Path(p).resolve() for p in paths])
        with lab_server(root) as url:
            for p in paths:
                page, errors = open_and_run(browser, url, lab_path(p), timeout_s=900)
                n = screenshots(page, Path(p).stem, (VIEWS,))
                print(f"{p}: {n} views, console errors {errors[:3]}, remote requests {page.recorder.remote()[:3]}; "
                      f"screenshots in {shots_dir()}")
                page.close()


if __name__ == "__main__":  # `--readme`: the README's pictures (docs/pictures); `--live`: the live pages' figures
    if sys.argv[1:] == ["--readme"]:
        pictures()
    elif sys.argv[1:] == ["--live"]:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            live_figures(Path(tmp))
    else:
        main(sys.argv[1:])
