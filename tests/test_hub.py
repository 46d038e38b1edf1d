"""A workshop room on one machine: the real JupyterHub of `make hub` (etc/hub), three learners in Chromium.

Each learner logs in with the room's password and lands in their own copy of the course; the three run notebook
1's first cell at once and each sees their own output; a wrong password is refused; one learner can neither
read another's notebook from their kernel (Unix permissions) nor fetch it through the other's server (the hub's
authorization); the teacher's page lists who is in; and a hub stopped and started again finds each learner's
work as they left it. The hub makes Unix accounts and runs each server as its learner, so it runs as root on
Linux (as make test does in CI).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from browser import chromium, free_port

REPO = Path(__file__).parent.parent
sys.path.insert(0, str(REPO))
import setup_kvlib  # noqa: E402 (the steps make hub runs)

pytestmark = pytest.mark.slow
LEARNERS = ["kvtest-a", "kvtest-b", "kvtest-c"]  # names no real room uses: the test resets their course
PASSWORD = "the-kings-room"
TEACHER = "t" * 8 + "-the-teachers-own-password-long-enough"
NOTEBOOK = "01_generation_loop.ipynb"
MARK = "print('my notes, kept')"


def wait_up(url, timeout_s=120):  # the hub answers its health check
    for _ in range(timeout_s * 2):
        try:
            with urllib.request.urlopen(f"{url}/hub/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the hub did not answer at {url} in {timeout_s} s")


@pytest.fixture(scope="module")
def room():
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.fail("the hub test runs as root on Linux (it makes Unix accounts, as make hub does): run make test "
                    "as root, as CI does")
    setup_kvlib.proxy()
    # the learners' accounts run this environment's Python: where it sits under a folder they may not enter (a
    # pyenv Python under /root, mode 700, as on CI's machines) they are let through it, not into it (o+x, no
    # listing), for the test's length; a real room keeps its checkout and Python where every account reads them
    python = Path(os.path.realpath(sys.executable))
    closed = [(p, p.stat().st_mode) for p in python.parents if not p.stat().st_mode & 0o001]
    for p, mode in closed:
        p.chmod(mode | 0o001)
    folder = Path(tempfile.mkdtemp(prefix="kvlib-room-"))  # not pytest's tmp_path: the learners must read it
    try:
        setup_kvlib.prepare_room(folder, LEARNERS)
        for name in LEARNERS:  # a course of their own, new
            shutil.rmtree(Path(f"~{name}").expanduser() / "kvlib-course", ignore_errors=True)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for p, mode in closed:
            p.chmod(mode)


def start(room, log):
    port = free_port()
    hub = setup_kvlib.start_hub(room, LEARNERS, PASSWORD, TEACHER, port, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_up(url)
    return hub, url


def stop(hub):
    hub.terminate()  # the hub stops the learners' servers as it goes (cleanup_servers)
    hub.wait(timeout=60)


def log_in(browser, url, name, password):
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/hub/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", password)
    page.click("#login_submit")
    return page


def first_cell(page):
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=240_000)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=240_000)
    return page.locator(".jp-CodeCell").first


def run_below(page, cell, code):  # a new cell under `cell`, typed and run -> its output's text
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a new cell below, selected in command mode
    page.keyboard.press("Enter")  # into its editor
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    new = page.locator(".jp-CodeCell").nth(1)
    new.locator(".jp-OutputArea-output").first.wait_for(timeout=120_000)
    return new.locator(".jp-OutputArea-output").first.inner_text()


def test_a_room_of_three_learners(room, tmp_path):
    log = open(tmp_path / "hub.log", "w")
    hub, url = start(room, log)
    try:
        with chromium() as browser:
            refused = log_in(browser, url, LEARNERS[0], "not-the-password")
            refused.wait_for_selector("text=Invalid username or password", timeout=30_000)
            assert "/hub/login" in refused.url
            stranger = log_in(browser, url, "someone-else", PASSWORD)  # the right password, a name not on the list
            stranger.wait_for_load_state()
            assert "/user/someone-else" not in stranger.url

            pages = {name: log_in(browser, url, name, PASSWORD) for name in LEARNERS}
            cells = {name: first_cell(page) for name, page in pages.items()}
            for name, page in pages.items():  # all three at once: each Shift+Enter returns before its cell runs
                cells[name].locator(".jp-InputArea-editor").click()
                page.keyboard.press("Shift+Enter")
            for name, page in pages.items():
                out = cells[name].locator(".jp-OutputArea-output").last
                out.wait_for(timeout=240_000)
                page.wait_for_function("c => /Model\\('/.test(c.textContent)", arg=cells[name].element_handle(),
                                       timeout=240_000)
                assert f"/user/{name}/lab" in page.url  # their own server, their own copy of the course

            a, b = LEARNERS[0], LEARNERS[1]
            other = Path(f"~{b}").expanduser() / "kvlib-course" / NOTEBOOK
            seen = run_below(pages[a], cells[a], f"import getpass, os; print(getpass.getuser(), os.access({str(other)!r}, "
                             f"os.R_OK)); {MARK}")
            assert seen.split()[:2] == [a, "False"], seen  # A's kernel runs as A, and B's notebook is not A's to read
            pages[a].keyboard.press("Control+s")
            pages[a].wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
            api = pages[a].request.get(f"{url}/user/{b}/api/contents/{NOTEBOOK}", max_redirects=0)
            assert api.status in (302, 403) and "generation" not in api.text()  # B's server refuses A's session

            teacher = log_in(browser, url, "teacher", TEACHER)
            teacher.goto(f"{url}/hub/admin")
            for name in LEARNERS:
                teacher.get_by_text(name, exact=True).first.wait_for(timeout=60_000)
        stop(hub)
        hub, url = start(room, log)  # the next morning: the hub starts again
        mine = Path(f"~{a}").expanduser() / "kvlib-course" / NOTEBOOK
        with chromium() as browser:
            page = log_in(browser, url, a, PASSWORD)
            first_cell(page)  # the server started: kvlib lab's copy ran again, and kept A's edited notebook
        sources = ["".join(c["source"]) for c in json.loads(mine.read_text())["cells"]]
        assert any(MARK in s for s in sources)
    finally:
        stop(hub)
        log.close()
        print((tmp_path / "hub.log").read_text()[-3000:])
