"""make site's pages (kvlib/tools/site.py) in Chromium, opened from file:// with the network cut: every view draws
with no kernel, hovers show the run's numbers, Play steps, the 3D map turns, no request leaves the page and
the console stays clean; the numbers a page shows are those the executed notebook printed.

Here on a small notebook executed in the test (seconds, on tiny). The whole course's site, which `make site`
builds in minutes, is checked when asked: `KVLIB_SITE=site .venv/bin/python -m pytest tests/test_site.py`.
"""

import json
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

from browser import (CACHE_ROWS, GRID_ROWS, README_VIEWS, REPO, Recorder, chromium, drag_across, js_num, play_through,
                     served, tip)
from kvlib.tools import site

PROMPT, NEW = "The king is dead", 4  # the grid and the cache: 4 tokens generated, 3 fed back
LONG = "To be, or not to be, that is the question. " * 12  # 150-odd tokens: a view holds one layer of 4, not all
SMALL = [
    ("markdown", "# A small page\n\nThe cache of a short prompt, **step by step**.\n\n**Time:** a minute."),
    ("code", "import kvlib\nfrom kvlib.ui import views, widgets\nfrom kvlib.server.prompt_cache import ManualClock\n"
             "model = kvlib.load_model('tiny')\nprint(model)"),
    ("code", f"grid = widgets.GridFilling(model, {PROMPT!r}, new_tokens={NEW})\ngrid"),
    ("code", "w = grid.traces[-1].layers[0].weights[0]\nprint(f'the last row looks at the first token: {w[-1, 0]:.3f}')"),
    ("code", f"growth = views.CacheGrowth.of(model, {PROMPT!r}, new_tokens={NEW})\ngrowth"),
    ("code", "print(f'the cache holds {growth.nbytes[-1]:,} bytes')"),
    ("code", "system = 'You are Puck, a sprite. Answer in verse, as Shakespeare would. ' * 3\n"
             "pc = kvlib.PromptCache(model, block_size=16, ttl_seconds=300, clock=ManualClock())\n"
             "stream = widgets.PromptCacheStream(pc, [('q1', 'acme', system + 'Who art thou?'),\n"
             "                                        ('q2', 'acme', system + 'Where is Oberon?')])\n"
             "stream.send(); stream.send()\nstream"),
    ("code", "print(f'the second request read {stream.results[1].prefill.receipt.cached_tokens} tokens from the cache')"),
    ("code", "widgets.EmbeddingSpace(model, dims=3)"),
    ("code", f"views.AttentionGrid.of(model, {LONG!r})  # too long to send every layer: the others on request"),
    ("exercise", "from kvlib.lessons import exercises\nmy_answer = ...\nexercises.check('05.k_rows', my_answer, model)"),
]
VIEWS = 5  # the grid, the cache, the prompt-cache blocks, the embedding map, the long prompt's grid
GRID = ".kv-att:has(input.kv-slider:not([max='0']))"  # an attention grid that steps (a prefill's alone does not)
OFFLINE = ("file", "blob", "data")  # what a page may load: itself, its modules made into blob: URLs, its pictures


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small notebook, executed here and exported: (its page, the executed notebook)."""
    root = tmp_path_factory.mktemp("site")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(s) if kind == "markdown" else
        nbformat.v4.new_code_cell(s, metadata={"tags": ["exercise"]} if kind == "exercise" else {}) for kind, s in SMALL])
    nbformat.write(nb, root / "small.ipynb")
    executed = site.execute(root / "small.ipynb", root / "executed")
    weights = site.export([executed], root / "site")
    assert set(weights) == {"small.html", "index.html"}
    return root / "site" / "small.html", nbformat.read(executed, as_version=4)


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def open_offline(browser, path, url=None):
    """A page opened from file:// (or from url, a local server) with every other request aborted; -> (page,
    console errors). page.recorder lists every URL it asked for, aborted or not."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.recorder = Recorder(page)
    page.route("**/*", lambda r: r.continue_() if allowed(r.request.url, url) else r.abort())
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url or path.as_uri())
    page.wait_for_function("() => [...document.querySelectorAll('[data-kv-model]')]"
                           ".every((m) => m.querySelector('.kv-view') || m.textContent)")  # drawn, or said why not
    return page, errors


def allowed(url, served=None):  # the page itself, its blob: modules and data: pictures, or the server it came from
    return urlparse(url).scheme in OFFLINE or bool(served) and urlparse(url).netloc == urlparse(served).netloc


def check_offline(page, errors, name, served=None):
    """Every view drew, nothing asked for anything beyond the page, and the console has no error."""
    mounts = page.locator("[data-kv-model]")
    drawn = [mounts.nth(i).locator(".kv-view").count() for i in range(mounts.count())]
    assert all(n == 1 for n in drawn), f"{name}: views drawn {drawn}: {mounts.all_inner_texts()[:3]}"
    away = [u for u in page.recorder.urls if not allowed(u, served)]
    assert not away, f"{name}: requests beyond the page: {away[:5]}"
    assert not errors, f"{name}: console errors: {errors[:5]}"
    return mounts.count()


def outputs(nb):
    """Every text the executed notebook printed or showed, its views' stored data included (how the run
    computed what a hover shows)."""
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") + "".join(v for v in out.get("data", {}).values() if isinstance(v, str)))
    return "\n".join(texts), json.dumps(nb.metadata.get("widgets", {}))


def check_grid_plays(page, grid):
    """Play adds one row per step, from the prompt's rows at step 0 to the last step's."""
    last = int(grid.locator("input.kv-slider").get_attribute("max"))
    grid.locator("input.kv-slider").fill("0")  # from the prefill, so Play walks every step
    prompt = grid.locator("tr.kv-att-row").count()
    seen, _ = play_through(page, grid, GRID_ROWS, last)
    assert [s for s, _ in seen] == list(range(1, last + 1)) and all(n == prompt + s for s, n in seen), seen
    return last


def check_cache_plays(page, growth):
    """Play adds one K and V row per step in every layer."""
    last = int(growth.locator("input.kv-slider").get_attribute("max"))
    growth.locator("input.kv-slider").fill("0")
    layers = growth.locator(".kv-layer").count()
    prompt = growth.locator(".kv-layer").first.locator(".kv-kvrow").count()
    seen, _ = play_through(page, growth, CACHE_ROWS, last)
    assert [s for s, _ in seen] == list(range(1, last + 1)) and all(rows == [prompt + s] * layers for s, rows in seen), seen
    return last


def check_map_turns(page, view):
    """A drag turns the 3D map: its points move."""
    view.locator("button[data-dims='3']").click()
    picture = view.locator("svg.kv-map")
    placed = lambda: view.locator(".kv-point").evaluate_all("ps => ps.map((p) => p.getAttribute('transform'))")
    before = placed()
    picture.scroll_into_view_if_needed()
    drag_across(page, picture)
    assert before and placed() != before, "the 3D map did not turn"


def to_last(view):  # a stepping view at its last step
    view.locator("input.kv-slider").fill(view.locator("input.kv-slider").get_attribute("max"))


def weight_and_bytes(page):
    """(a weight, a byte count) as the page shows them: the first grid's cell where its last row looks at the
    first token, on hover; the first cache view's measured total at its last step."""
    grid, growth = page.locator(GRID).first, page.locator(".kv-cachegrowth").first
    to_last(grid)
    to_last(growth)
    row = grid.locator("tr.kv-att-row").last
    weight = tip(page, row.locator("td[data-col='0']")).splitlines()[0].rsplit(": ", 1)[1]
    return weight, growth.locator(".kv-total").inner_text().removesuffix(" bytes")


def cached_tokens(page):  # the largest count of tokens read from the cache in the page's prompt-cache views
    return max(page.locator(".kv-blocks td[data-field='cached']").all_inner_texts(), key=lambda t: int(t.replace(",", "")))


@pytest.mark.slow  # a kernel and a browser
def test_every_view_draws_offline_and_moves(browser, small):
    path, nb = small
    page, errors = open_offline(browser, path)
    assert check_offline(page, errors, "small") == VIEWS
    assert check_grid_plays(page, page.locator(GRID).first) == NEW - 1
    assert check_cache_plays(page, page.locator(".kv-cachegrowth").first) == NEW - 1
    check_map_turns(page, page.locator(".kv-embedding").first)
    text = page.locator("main").inner_text()  # prose, code and text outputs are on the page too
    assert "The cache of a short prompt, step by step." in text and "model = kvlib.load_model('tiny')" in text
    assert "Model('tiny', gpt2 family" in text
    check_offline(page, errors, "small, after playing and turning")
    page.close()


@pytest.mark.slow  # a kernel and a browser
def test_the_page_shows_the_runs_numbers(browser, small):
    """The weight under the pointer, the bytes the cache measured and the tokens a request read from the
    cache are the numbers the executed notebook printed."""
    path, nb = small
    page, errors = open_offline(browser, path)
    (weight, nbytes), cached = weight_and_bytes(page), cached_tokens(page)
    printed = outputs(nb)[0]
    assert f"looks at the first token: {js_num(weight):.3f}" in printed, (weight, printed[-600:])
    assert f"the cache holds {nbytes} bytes" in printed, (nbytes, printed[-600:])
    assert f"read {cached} tokens from the cache" in printed and int(cached) > 0, (cached, printed[-600:])
    check_offline(page, errors, "small, after hovering")
    page.close()


@pytest.mark.slow  # a kernel and a browser
def test_what_needs_the_kernel_says_so(browser, small):
    """A control shows its last value, disabled, with a line naming the command that opens the live notebook; so
    does a view that asks the kernel for more (a layer not sent); an exercise's check says once that the answer is
    checked there."""
    path, _ = small
    page, errors = open_offline(browser, path)
    word = page.locator(".kv-site-widget input.kv-site-control")  # EmbeddingSpace's "Neighbours of" box
    assert word.input_value() == "king" and word.get_attribute("readonly") is not None
    assert page.locator(".kv-site-widget button.kv-site-control", has_text="Send next request").is_disabled()
    lines = page.locator(".kv-site-widget .kv-site-live").all_inner_texts()
    assert len(lines) == 2 and all("make lab" in t and "small.ipynb" in t for t in lines), lines  # stream, map
    assert page.locator(".kv-site-widget").count() == VIEWS + 1  # and the exercise's check; the grid and cache: no line
    long = page.locator("[data-kv-model]:has(.kv-att)").last  # a layer the kernel did not send: the view asks it
    assert long.locator(".kv-att").get_attribute("data-layer") == "0"  # sent with the layers nearest, not the last
    long.locator("select.kv-att-layer").select_option(label=long.locator("select.kv-att-layer option").last.inner_text())
    assert "make lab" in long.locator(".kv-site-live").inner_text()
    assert not errors, errors
    exercise = page.locator(".kv-site-cell").last
    assert exercise.locator("button.kv-site-control", has_text="Show the answer").is_disabled()
    assert exercise.locator(".kv-site-live").all_inner_texts() == [
        "An exercise: in the live notebook you type your answer in the cell and it is checked there (make lab in a "
        "clone of kvlib, then open small.ipynb)."]
    page.close()


def test_each_edition_has_its_pages_and_links_to_the_others(tmp_path):
    """A course of two notebooks, the first translated (LANG/, the same name): each edition gets its index and its
    pages, in its own words, in its own folder, and each page links to its counterpart where there is one."""
    lang = next(code for code in site.WORDS if code != "en")  # a translation's language, whichever
    words = site.WORDS[lang]

    def notebook(folder, name, heading):  # as executed: a page needs no outputs
        folder.mkdir(exist_ok=True)
        opening = f"# {heading}\n\nWhat it is about.\n\n{site.WORDS[site.edition(folder / name)]['time']} 5"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(opening)]), folder / name)
        return folder / name

    course = [notebook(tmp_path, "01_a.ipynb", "One"), notebook(tmp_path, "02_b.ipynb", "Two"),
              notebook(tmp_path / lang, "01_a.ipynb", "Un")]
    out = tmp_path / "site"
    assert set(site.export(course, out)) == {"index.html", "01_a.html", "02_b.html", f"{lang}/index.html",
                                             f"{lang}/01_a.html"}

    def switch(path):  # a page's links to the other editions: {language: href}, each to a page that exists
        found = dict(re.findall(r'hreflang="(\w+)" href="([^"]+)"', path.read_text()))
        assert all((path.parent / href).exists() for href in found.values()), found
        return found

    assert switch(out / "01_a.html") == {lang: f"{lang}/01_a.html"} and switch(out / "02_b.html") == {}
    assert switch(out / lang / "01_a.html") == {"en": "../01_a.html"}
    assert switch(out / "index.html") == {lang: f"{lang}/index.html"}
    assert switch(out / lang / "index.html") == {"en": "../index.html"}
    page, index = (out / lang / "01_a.html").read_text(), (out / lang / "index.html").read_text()
    assert f'<html lang="{lang}">' in page and f'<a href="index.html">{words["contents"]}</a>' in page
    assert f"<code>{lang}/01_a.ipynb</code>" in page and "02_b" not in page  # its name in the course; no next page
    assert f"<h1>{words['title']}</h1>" in index and '<li><a href="01_a.html">Un</a> · 5' in index
    assert "Contents" not in page + index and "02_b" not in index
    english = (out / "index.html").read_text()
    assert '<li><a href="01_a.html">One</a> · 5' in english and '<li><a href="02_b.html">Two</a> · 5' in english


def test_the_readme_shows_the_views_first():
    """The README's first screen (before its first section) shows pictures of the views, then the two set-up
    commands; the pictures are in the repository, and `tests/browser.py --readme` makes exactly those."""
    readme = (REPO / "README.md").read_text()
    first = readme.split("\n## ", 1)[0]
    shown = re.findall(r"\]\((docs/pictures/[^)]+\.png)\)", first)
    assert len(shown) >= 2, shown
    assert first.index(shown[-1]) < first.index("make lab") < first.index("make test"), "pictures, then the commands"
    for p in shown:
        assert (REPO / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{p} is not a PNG"
    assert set(shown) == {f"docs/pictures/{name}.png" for _, name, _, _ in README_VIEWS}
    assert "tests/browser.py --readme" in readme


SITE = os.environ.get("KVLIB_SITE")


@pytest.mark.slow
@pytest.mark.skipif(not SITE, reason="checks a built site: make site, then KVLIB_SITE=site")
def test_the_whole_course_site(browser):
    """Every page of `make site`'s build opens from file:// with the network cut, and from a local HTTP server,
    with every view drawn; the first grid that steps, cache and 3D map move; the three numbers are the executed
    notebooks'."""
    root = Path(SITE).resolve()
    pages = sorted(root.glob("*.html"))
    assert [p.name for p in pages][:1] == ["01_generation_loop.html"] and (root / "index.html").exists()
    links = re.findall(r'<li><a href="([^"]+\.html)"', (root / "index.html").read_text())
    assert links == [p.name for p in pages if p.name != "index.html"], links  # the outline, in reading order
    translated = sorted(root.glob("*/*.html"))  # each translation's edition, in its folder (zh/)
    for folder in {p.parent for p in translated}:
        links = re.findall(r'<li><a href="([^"]+\.html)"', (folder / "index.html").read_text())
        assert links == [p.name for p in sorted(folder.glob("*.html")) if p.name != "index.html"], (folder, links)
    moved, views = set(), 0
    executed = {p.stem: nbformat.read(root / "_executed" / f"{p.stem}.ipynb", as_version=4) for p in pages
                if p.name != "index.html"}
    found = {}  # where the numbers were read: the first page with a grid and a cache, the first with blocks
    for p in pages:
        page, errors = open_offline(browser, p)
        views += check_offline(page, errors, p.name)
        for kind, check in ((GRID, check_grid_plays), (".kv-cachegrowth", check_cache_plays),
                            (".kv-embedding", check_map_turns)):
            if kind not in moved and page.locator(kind).count():
                check(page, page.locator(kind).first)
                moved.add(kind)
        if "grid" not in found and page.locator(GRID).count() and page.locator(".kv-cachegrowth").count():
            found["grid"] = (p.stem, *weight_and_bytes(page))
        if "cached" not in found and page.locator(".kv-blocks").count():
            found["cached"] = (p.stem, cached_tokens(page))
        check_offline(page, errors, f"{p.name}, after moving its views")
        page.close()
    assert moved == {GRID, ".kv-cachegrowth", ".kv-embedding"} and views >= 15, (moved, views)
    for p in translated:  # a translation's pages draw their views as the English do
        page, errors = open_offline(browser, p)
        views += check_offline(page, errors, f"{p.parent.name}/{p.name}")
        page.close()
    with served(root) as url:  # as from any static host: python -m http.server
        for p in pages:
            page, errors = open_offline(browser, p, f"{url}/{p.name}")
            check_offline(page, errors, f"{p.name} from {url}", served=url)
            page.close()
    stem, weight, nbytes = found["grid"]
    printed, stored = outputs(executed[stem])
    assert f"{nbytes} bytes" in printed, f"{stem}: the page's {nbytes} bytes are not in the notebook's outputs"
    assert js_num(weight) in {round(w, 3) for w in map(float, re.findall(r"-?\d+\.\d+", stored))}, weight
    stem, cached = found["cached"]
    assert re.search(rf"\b{cached}\b", outputs(executed[stem])[0]) and int(cached.replace(",", "")) > 0, (stem, cached)
