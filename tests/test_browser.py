"""The notebooks in a real browser: JupyterLab on 127.0.0.1, driven by Playwright on
Debian's Chromium. Run every cell, press the buttons, read the DOM: widgets and
pictures render, no error output, no console errors. Screenshots go to
$KVLIB_SCREENSHOTS (default: a temporary folder) for a person to look at.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
CHROMIUM = "/usr/bin/chromium"
TOKEN = "kvlib-test"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    log = None  # the server's log: the kernels' own errors land here


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving a copy of the notebooks (running them must not write outputs into the repo)."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(REPO / "notebooks", root / "notebooks")
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / "config"), "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
           "KVLIB_MODEL": "tiny"}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
         "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root / 'notebooks'}"],
        stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"), env=env)
    url = f"http://127.0.0.1:{port}"
    Lab.log = root / "server.log"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=1)
            break
        except OSError:
            time.sleep(0.5)
    else:
        raise RuntimeError("JupyterLab did not start: " + (root / "server.log").read_text()[-2000:])
    yield url
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        # the server once shut its kernels down and then hung at exit, joining an idle AnyIO
        # worker thread (py-spy: threading._shutdown); the tests are over, so end it
        server.kill()
        server.wait(10)


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "Chromium is missing: apt-get install -y chromium (make test does this as root)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def shots_dir():
    d = Path(os.environ.get("KVLIB_SCREENSHOTS", REPO / ".screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def open_and_run(browser, lab, name, timeout_s=240):
    """Open a notebook, run all its cells, wait until the kernel is idle; returns (page, console errors)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
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
    page.wait_for_function(
        f"""() => {{
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
            return prompts.length === {n_code} && prompts.every(t => /\\[\\d+\\]/.test(t));
        }}""", timeout=timeout_s * 1000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    return page, errors


def check_clean(page, errors, name, pictures=True):
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert stderr.count() == 0, f"{name}: error output: {stderr.first.inner_text()[:500]}"
    if pictures:
        assert page.locator(".jp-RenderedImage img").count() > 0, f"{name}: no pictures rendered"
    assert page.locator(".jupyter-widgets").count() > 0, f"{name}: no widgets rendered"
    real = [e for e in errors if "favicon" not in e]
    assert not real, f"{name}: console errors: {real[:5]}"


def settle(page, errors, name, what):
    """After an interaction: wait for the kernel, then nothing went wrong anywhere a learner or teacher
    would see it: no error or stderr output, no ⚠ message from an app, no console error, no traceback
    in the server's (kernels') log."""
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    page.wait_for_timeout(300)
    bad = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert bad.count() == 0, f"{name}, after {what}: error output: {bad.first.inner_text()[:500]}"
    warned = page.locator(".jupyter-widgets:has-text('⚠')")
    assert warned.count() == 0, f"{name}, after {what}: an app says {warned.first.inner_text()[:300]}"
    real = [e for e in errors if "favicon" not in e]
    assert not real, f"{name}, after {what}: console errors: {real[:5]}"
    log = Lab.log.read_text() if Lab.log else ""
    assert "Traceback" not in log, f"{name}, after {what}: the server log has a traceback: {log[-2000:]}"


def screenshots(page, name, selectors=(".jp-RenderedImage img", ".jupyter-widgets.widget-vbox")):
    """One screenshot per picture or app, each scrolled into view, for a person to look at."""
    k = 0
    for sel in selectors:
        for i in range(page.locator(sel).count()):
            item = page.locator(sel).nth(i)
            item.scroll_into_view_if_needed()
            page.wait_for_timeout(300)
            page.screenshot(path=str(shots_dir() / f"{name}-{k:02d}.png"))
            k += 1
    return k


def test_01_generation_loop(browser, lab):
    page, errors = open_and_run(browser, lab, "01_generation_loop.ipynb")
    check_clean(page, errors, "01")
    page.locator("button:has-text('Send')").first.click()
    page.wait_for_function("() => document.body.innerText.includes('ms per token); stopped')", timeout=60_000)
    assert "ms per token" in page.locator(".widget-vbox").filter(has_text="Max tokens").first.inner_text()
    screenshots(page, "01")


def test_02_tokens(browser, lab):
    page, errors = open_and_run(browser, lab, "02_tokens.ipynb")
    check_clean(page, errors, "02", pictures=False)
    box = page.locator("textarea").first
    box.fill("Will will")
    box.press("Tab")  # continuous_update=False: the app updates when the box loses focus
    page.wait_for_function("() => document.body.innerText.includes('2 tokens for 9 characters')", timeout=30_000)
    screenshots(page, "02", (".jupyter-widgets.widget-vbox",))


def test_03_embeddings(browser, lab):
    page, errors = open_and_run(browser, lab, "03_embeddings.ipynb")
    check_clean(page, errors, "03")
    before = page.locator(".jp-RenderedImage img").count()
    page.locator("button:has-text('3D')").first.click()
    page.wait_for_function("() => document.body.innerText.includes('In 3D,')", timeout=30_000)
    page.wait_for_timeout(1000)
    assert page.locator(".jp-RenderedImage img").count() == before  # the picture was replaced, not added
    screenshots(page, "03")


def test_04_attention(browser, lab):
    page, errors = open_and_run(browser, lab, "04_attention.ipynb")
    check_clean(page, errors, "04")
    cell = page.locator("td[title*='→']").nth(5)
    cell.scroll_into_view_if_needed()
    cell.hover()  # the value of a cell on hover
    assert float(cell.get_attribute("title").rsplit(": ", 1)[1]) >= 0
    screenshots(page, "04")


def test_05_kv_cache_animates(browser, lab):
    page, errors = open_and_run(browser, lab, "05_kv_cache.ipynb", timeout_s=400)
    check_clean(page, errors, "05")
    apps = page.locator(".widget-vbox").filter(has=page.locator(".widget-play"))
    assert apps.count() == 2
    for k in range(2):
        app = apps.nth(k)
        app.locator(".widget-play").scroll_into_view_if_needed()
        app.locator(".widget-play button").first.click()  # Play
        for step in (2, 5):
            # the slider moves in the browser, and the kernel redraws the picture for that step
            page.wait_for_function("([el, s]) => el.innerText.includes(`Step ${s}:`)",
                                   arg=[app.element_handle(), step], timeout=60_000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(shots_dir() / f"05-play{k}-step{step}.png"))
        pause = app.locator(".widget-play button:has(i.fa-pause)")
        if pause.count():
            pause.click()  # a playing app keeps replacing its picture, which the screenshots below scroll to
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    page.wait_for_timeout(1000)
    screenshots(page, "05", (".jp-RenderedImage img",))


def test_06_prompt_caching(browser, lab):
    page, errors = open_and_run(browser, lab, "06_prompt_caching.ipynb", timeout_s=400)
    check_clean(page, errors, "06")
    rows = lambda: page.locator(".widget-html table tr").count()
    before = rows()
    page.locator("button:has-text('Send next request')").first.click()
    page.wait_for_function(f"() => document.querySelectorAll('.widget-html table tr').length > {before}",
                           timeout=30_000)
    page.locator("button:has-text('Fast-forward')").first.click()
    page.wait_for_function("() => document.body.innerText.includes('blocks expired')", timeout=30_000)
    screenshots(page, "06")
