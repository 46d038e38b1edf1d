"""The site's live pages in Chromium, from file:// with the network cut: the page runs the model itself
(kvlib's forward pass exported to ONNX, run by ONNX Runtime Web) and hands the notebooks' own views what
the Python side hands them. Each number read from a page is checked against kvlib computing the same in
Python on the same text.

First, the cache view's byte line: it takes the bytes per number from the data it is given (kvlib's fp32
cache: 4; an fp16 one: 2), checked against the arrays' own sizes at every step.
"""

import json
import re
import shutil
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest
import torch

import kvlib
from browser import CACHE_ROWS, EXAMPLE, GRID_ROWS, chromium, live_site, served
from kvlib.tools import site
from kvlib.ui import views
from test_site import OFFLINE, SITE, check_offline, open_offline

PROMPT, NEW = "Mary had a little", 5


def static_page(folder, named):
    """A page of views built in Python, exported as make site exports an executed notebook (no kernel):
    {name: view} -> the page's path. Each view's output cell is named by an id, its state stored as an
    executed notebook stores it."""
    state, cells = {}, [nbformat.v4.new_markdown_cell("# Views\n\nBuilt in the test.")]
    for name, view in named.items():
        s = json.loads(json.dumps(view.get_state(), default=str))
        state[name] = {"model_name": s["_model_name"], "model_module": s["_model_module"],
                       "model_module_version": s["_model_module_version"], "state": s}
        cells.append(nbformat.v4.new_code_cell(f"{name}  # a view", outputs=[nbformat.v4.new_output(
            "display_data", data={site.VIEW: {"model_id": name, "version_major": 2, "version_minor": 0},
                                  "text/plain": view.summary()})]))
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"widgets": {site.STATE: {
        "state": state, "version_major": 2, "version_minor": 0}}})
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "views.ipynb")
    site.export([folder / "views.ipynb"], folder / "site")
    return folder / "site" / "views.html"


def held_bytes(cache):  # the arrays' own sizes: every layer's K and V, as stored
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.mark.slow
def test_the_cache_views_bytes_follow_the_datas_bytes_per_number(browser, tmp_path):
    """fp32 and fp16 caches of the same run: at every step the view's formula, its bytes per number and the
    measured total equal the bytes the cache's own tensors hold (a view that assumed 2 or 4 bytes fails one)."""
    runs, named = {}, {}
    for dtype in ("float32", "float16"):
        model = kvlib.load_model("tiny", dtype=dtype)
        cache, sizes, feed = model.new_cache(), [], model.encode(PROMPT)
        for _ in range(NEW):  # greedy, reading the arrays after every step: the view's run, done apart
            token = int(model.forward(feed, cache=cache)[-1].argmax())
            sizes.append(held_bytes(cache))
            feed = [token]
        runs[dtype] = sizes, cache.layers[0].keys.element_size()
        named[dtype.replace("float", "fp")] = views.CacheGrowth.of(model, PROMPT, new_tokens=NEW)
    assert runs["float32"][1] == 4 and runs["float16"][1] == 2
    page, errors = open_offline(browser, static_page(tmp_path, named))
    page.wait_for_selector(".kv-cachegrowth .kv-total")
    mounts = page.locator(".kv-cachegrowth")
    assert mounts.count() == 2
    for i, dtype in enumerate(runs):
        sizes, b = runs[dtype]
        view = mounts.nth(i)
        for s, size in enumerate(sizes):
            if s:
                view.get_by_role("button", name="step forward").click()
            assert view.get_attribute("data-step") == str(s)
            line = view.locator(".kv-note.kv-mono").inner_text()
            formula = int(re.search(r"= ([\d,]+) bytes", line).group(1).replace(",", ""))
            assert f"× {b} bytes =" in line and formula == size, (dtype, s, line, size)
            assert view.locator(".kv-total").inner_text() == f"{size:,} bytes" and line.endswith("✓"), line
    check_offline(page, errors, "views")


# ---- the live pages ---------------------------------------------------------------------------------------

PLAYED = "To be, or not to be, that is the question", 6  # page 05's prompt and new tokens
# two requests sharing a long prefix (past one block of 16), as notebook 6's system prompt
SYSTEM = "You are Puck, a helpful sprite. Answer in verse, briefly, as Shakespeare would. " * 2
REQUESTS = SYSTEM + "Who art thou?", SYSTEM + "Where is Oberon?"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """browser.APPS in English and in Chinese, executed and exported as live pages (tiny, and SmolLM2 where it is
    on disk): -> the site's folder."""
    return live_site(tmp_path_factory.mktemp("live"))


@pytest.fixture(scope="module")
def stored():  # tiny as the page computes it: its weights rounded to fp16, each multiply in fp32
    from kvlib.tools import webmodel

    return webmodel.stored(kvlib.load_model("tiny"))


def run_panel(page, kind, texts=None, new=None, smollm2=False):
    """Type into a panel, press its button (or SmolLM2's), wait for the run to end; -> the panel."""
    panel = page.locator(f".kv-live[data-kv-live={kind}]")
    panel.locator("button.kv-live-run").wait_for()
    runs = int(panel.get_attribute("data-runs"))
    for k, text in enumerate(texts or []):
        panel.locator(".kv-live-text").nth(k).fill(text)
    if new is not None:
        panel.locator("input.kv-live-new").fill(str(new))
    panel.locator("button.kv-live-smollm2" if smollm2 else "button.kv-live-run").click()
    page.wait_for_function("([p, n]) => +p.dataset.runs > n || p.querySelector('.kv-live-status').dataset.state == "
                           "'error'", arg=[panel.element_handle(), runs], timeout=600_000)
    status = panel.locator(".kv-live-status")
    assert status.get_attribute("data-state") == "done", status.inner_text()
    return panel


def by_step(view, rows):
    """Move a stepping view's slider from its first step to its last; -> what `rows` (JS) counts at each."""
    return view.evaluate("""(r, rows) => {
        const count = new Function("r", `return (${rows})(r)`), slider = r.querySelector("input.kv-slider"), seen = [];
        for (let s = 0; s <= +slider.max; s++) {
            slider.value = s;
            slider.dispatchEvent(new Event("input"));
            seen.push(count(r));
        }
        return seen;
    }""", rows)


def within(model, ids, got, what):
    """got: the page's {weights: [L][nh][T][T] of the whole text, and/or k: per layer [nkv * T * hs]} against kvlib
    on the same ids, by webmodel's bound (each output's own fp32 error, measured against float64, times its factor)."""
    from kvlib.tools import webmodel

    want, exact = {}, {}
    for name, m in (("ours", model), ("exact", webmodel.in_float64(model))):
        trace, cache = kvlib.Trace(), m.new_cache()
        m.forward(ids, cache=cache, trace=trace)
        (want if name == "ours" else exact).update(
            weights=torch.stack([t.weights for t in trace.layers]).numpy(),
            k=torch.stack([layer.keys for layer in cache.layers]).numpy())
    for name in got:
        page = torch.tensor(got[name], dtype=torch.float64).reshape(want[name].shape).numpy()
        own = webmodel.largest(want[name], exact[name])
        bound = webmodel.tolerance(own, abs(want[name]).max())
        assert webmodel.largest(page, want[name]) <= bound, (what, name, webmodel.largest(page, want[name]), bound)


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_05_plays_the_learners_prompt_with_the_model_in_the_page(browser, live, stored, lang):
    """Play on the learner's prompt: the page decodes it greedily (kvlib's tokens), the grid gains a row per step
    and every layer of the cache view a row per token; one row of attention weights and layer 0's K rows, read
    from the page, equal kvlib's on the same text within the bound; the step timed with and without the cache
    gives the same logits."""
    page, errors = open_offline(browser, live / ("live.html" if lang == "en" else "zh/live.html"))
    prompt, new = PLAYED if lang == "en" else ("Will will 轩辕养了一只黄色的虎皮鹦鹉", PLAYED[1])  # characters cut in two
    panel = run_panel(page, "cache", [prompt], new)
    got = page.evaluate("window.kvLive.last.cache")
    ids = stored.encode(prompt)
    gen = kvlib.generate(stored, ids, new, stop_at_eos=False)
    assert got["made"] == gen.ids, (got["made"], gen.ids)  # greedy in the page = greedy in kvlib
    fed = ids + gen.ids[:-1]
    assert got["ids"] == fed
    labels = views.base.pieces(stored, fed)  # the views' labels, as kvlib's own views name each token
    assert got["grid"]["tokens"] == got["growth"]["tokens"] == labels
    L, P = stored.config.n_layer, len(ids)
    within(stored, fed, {"weights": got["weights"], "k": [x for layer in got["k"] for x in layer]}, lang)
    grid, growth = page.locator(".kv-att").nth(1), page.locator(".kv-cachegrowth").first  # [0]: 04's explorer
    assert grid.get_attribute("data-step") == growth.get_attribute("data-step") == str(new - 1)
    assert grid.locator("tr.kv-att-row").count() == P + new - 1
    rows = growth.evaluate("r => [...r.querySelectorAll('.kv-layer')].map(l => l.querySelectorAll('.kv-kvrow').length)")
    assert rows == [P + new - 1] * L
    per_token = 2 * L * stored.config.n_kv_head * stored.config.head_dim * 4  # the page's cache: Float32Array
    total = growth.locator(".kv-total").inner_text()
    assert total.replace("字节", "bytes") == f"{(P + new - 1) * per_token:,} bytes", total
    assert by_step(grid, GRID_ROWS) == [P + s for s in range(new)]  # the views step through the page's run
    assert by_step(growth, CACHE_ROWS) == [[P + s] * L for s in range(new)]
    result = panel.locator(".kv-live-result")
    assert float(result.get_attribute("data-max-diff")) < 1e-3  # the cached and recomputed step: the same logits
    [float(result.get_attribute(k)) for k in ("data-cached-ms", "data-full-ms")]  # both timed, reported: never asserted
    check_offline(page, errors, f"live 05 ({lang})")


HELD_OUT = ("Check out ngrok.ai", "Will will Will's will be done?", "轩辕养了一只黄色的虎皮鹦鹉 🦜")


@pytest.mark.slow
def test_page_02_cuts_the_learners_text_as_kvlib_does(browser, live):
    """The page's strips are the Python app's: the model's tokenizer and GPT-2's, chips, ids, bytes and titles
    equal to widgets.Tokens' data for the same text (English, Chinese and an emoji: a character cut in two)."""
    from kvlib.lessons import tokenization
    from kvlib.ui import widgets

    model = kvlib.load_model("tiny")
    own, gpt2 = tokenization.for_model(model), tokenization.gpt2()
    page, errors = open_offline(browser, live / "live.html")
    mounts = page.locator(".kv-app-tokens [data-kv-model]")
    page.locator(".kv-live[data-kv-live=tokens] button.kv-live-run").wait_for()
    tags = [mounts.nth(i).evaluate("m => window.kvSite.state(m)._dom_classes") for i in range(mounts.count())]
    strips = {tag: mounts.nth(next(i for i, t in enumerate(tags) if tag in t)) for tag in ("kv-strip-own", "kv-strip-gpt2")}
    for text in HELD_OUT:
        run_panel(page, "tokens", [text])
        assert page.evaluate("window.kvLive.last.tokens.ids") == {"own": model.encode(text), "gpt2": gpt2.encode(text)}
        for tag, tok in (("kv-strip-own", own), ("kv-strip-gpt2", gpt2)):
            state = strips[tag].evaluate("m => window.kvSite.state(m)")
            want = views.TokenStrip.data(tok, text)
            if tok is gpt2:  # the app links another tokenizer's chips by their own texts (widgets.Tokens.update)
                want["link"] = views.base.link_for([tok.name] + [t["text"] for t in want["tokens"]])
            assert {k: state[k] for k in want} == want, (text, tag)
        chips = strips["kv-strip-own"].locator(".kv-chip")
        assert chips.count() == len(model.encode(text))
    check_offline(page, errors, "live 02")


@pytest.mark.slow
def test_page_06_reuses_the_first_requests_blocks(browser, live, stored):
    """Two requests sharing a prefix: the second reads from the page's cache as many tokens as kvlib's PromptCache
    reads for the same two (whole blocks of the shared prefix), and its greedy answer is the one it gets with
    nothing reused, which is kvlib's."""
    page, errors = open_offline(browser, live / "live.html")
    panel = run_panel(page, "blocks", REQUESTS)
    result = panel.locator(".kv-live-result")
    a, b = (stored.encode(r) for r in REQUESTS)
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    pc = kvlib.PromptCache(stored, block_size=16)
    pc.prefill(REQUESTS[0], tenant="you")
    cached = pc.prefill(REQUESTS[1], tenant="you").receipt.cached_tokens
    assert cached == shared // 16 * 16 > 0  # whole blocks of the shared prefix: kvlib's own count
    assert int(result.get_attribute("data-reused")) == cached and int(result.get_attribute("data-shared")) == shared
    got = page.evaluate("window.kvLive.last.blocks")
    want = kvlib.generate(stored, b, 8, stop_at_eos=False).ids
    assert got["answers"]["warm"] == got["answers"]["cold"] == want and result.get_attribute("data-same") == "true"
    rows = page.locator(".kv-blocks tr.kv-request")
    assert rows.count() == 2 and rows.nth(1).locator(".kv-block.kv-hit").count() == cached // 16
    assert rows.nth(0).locator(".kv-block.kv-hit").count() == 0
    zh = ["你是迫克，夜里快活的小精灵。月亮在哪里？", "你是迫克，夜里快活的小精灵。太阳在哪里？"]  # blocks cut characters
    run_panel(page, "blocks", zh)
    shown = [[b["text"] for b in q["blocks"]] for q in page.evaluate("window.kvLive.last.blocks")["requests"]]
    ids = [stored.encode(text) for text in zh]
    assert shown == [[views.base.run_text(stored, i[a:a + 16]) for a in range(0, (len(i) - 1) // 16 * 16, 16)]
                     for i in ids] and any("<0x" in t for q in shown for t in q), shown  # a chip names cut bytes
    run_panel(page, "blocks", ["Alpha beta gamma", "Alpha beta delta"])  # sharing less than a block
    assert int(result.get_attribute("data-reused")) == 0 and "none of its" in result.inner_text()
    check_offline(page, errors, "live 06")


@pytest.mark.slow
def test_bad_input_is_said_in_the_page_and_the_views_keep_working(browser, live, tmp_path):
    """An empty text, a text past tiny's context and a model file that did not load each get a line in the
    panel; the views stay drawn and the next good run works."""
    page, errors = open_offline(browser, live / "live.html")
    panel = page.locator(".kv-live[data-kv-live=cache]")
    panel.locator("button.kv-live-run").wait_for()
    status = panel.locator(".kv-live-status")

    def said(text):
        panel.locator(".kv-live-text").fill(text)
        panel.locator("button.kv-live-run").click()
        page.wait_for_function("s => s.dataset.state == 'error'", arg=status.element_handle())
        return status.inner_text()

    assert "empty" in said("")
    assert "context of 512" in said("to be or not " * 200)
    assert page.locator("[data-kv-model] .kv-view").count() == page.locator("[data-kv-model]").count()
    run_panel(page, "cache", [EXAMPLE], 2)  # and it still runs
    assert "empty" in said("") and "your last run" in status.inner_text()  # the views keep the last good run
    assert panel.locator(".kv-live-result").inner_text() == ""  # and the result line that described it is gone
    check_offline(page, errors, "live, bad input")
    page.close()
    # a copy of the site without tiny's graph: the page says which file and why
    shutil.copytree(live, tmp_path / "site")
    (tmp_path / "site" / "live" / "tiny.onnx.js").unlink()
    page, errors = open_offline(browser, tmp_path / "site" / "live.html")
    panel = page.locator(".kv-live[data-kv-live=attention]")
    panel.locator("button.kv-live-run").click()
    page.wait_for_function("s => s.dataset.state == 'error'", arg=panel.locator(".kv-live-status").element_handle())
    line = panel.locator(".kv-live-status").inner_text()
    assert "live/tiny.onnx.js did not load" in line, line
    assert page.locator("[data-kv-model] .kv-view").count() == page.locator("[data-kv-model]").count()
    away = [u for u in page.recorder.urls if urlparse(u).scheme not in OFFLINE]
    assert not away, away


@pytest.mark.slow
def test_smollm2_in_the_page_over_http(browser, live, smollm2):
    """Served over http, a page loads SmolLM2's 8-bit graph and answers a prompt greedily token for token as kvlib's
    fp32 SmolLM2 does (on held-out prompts the two agree as webmodel.AGREES states; this one is a fact it knows)."""
    assert (live / "live" / "smollm2.onnx").exists(), "make site exports SmolLM2 where it is on disk"
    prompt, new = "The capital of France is", 4
    with served(live) as url:
        page, errors = open_offline(browser, live / "live.html", f"{url}/live.html")
        panel = run_panel(page, "cache", [prompt], new, smollm2=True)
        assert panel.get_attribute("data-model") == "smollm2"
        got = page.evaluate("window.kvLive.last.cache")
        assert got["made"] == kvlib.generate(smollm2, prompt, new, stop_at_eos=False).ids
        check_offline(page, errors, "live 05 with SmolLM2", served=url)


@pytest.mark.slow
def test_two_panels_pressed_together_each_get_their_own_answer(browser, live, stored):
    """The attention panel and the cache panel started at once share the page's one model: each run's numbers are
    still kvlib's for its own text."""
    page, errors = open_offline(browser, live / "live.html")
    panels = {kind: page.locator(f".kv-live[data-kv-live={kind}]") for kind in ("attention", "cache")}
    texts = {"attention": "Will will send his sister a selfie", "cache": PLAYED[0]}
    for kind, panel in panels.items():
        panel.locator("button.kv-live-run").wait_for()
        panel.locator(".kv-live-text").fill(texts[kind])
    panels["cache"].locator("input.kv-live-new").fill(str(PLAYED[1]))
    page.evaluate("ps => ps.forEach(p => p.querySelector('button.kv-live-run').click())",
                  [p.element_handle() for p in panels.values()])
    for panel in panels.values():
        page.wait_for_function("p => +p.dataset.runs > 0 || p.querySelector('.kv-live-status').dataset.state == 'error'",
                               arg=panel.element_handle(), timeout=600_000)
        assert panel.locator(".kv-live-status").get_attribute("data-state") == "done"
    got = page.evaluate("window.kvLive.last")
    ids = stored.encode(texts["attention"])
    assert got["attention"]["ids"] == ids
    within(stored, ids, {"weights": got["attention"]["weights"]}, "attention, beside the cache panel")
    gen = kvlib.generate(stored, texts["cache"], PLAYED[1], stop_at_eos=False)
    assert got["cache"]["made"] == gen.ids
    check_offline(page, errors, "live, two panels at once")


@pytest.mark.slow
@pytest.mark.skipif(not SITE, reason="checks a built site: make site, then KVLIB_SITE=site")
def test_the_whole_course_sites_panels_run(browser):
    """make site's build: lessons 2, 5 and 6 (and 4 where SmolLM2 was built) have their panels, in English and
    Chinese, and each panel runs its recorded text in the page from file:// with no request and no console error."""
    root = Path(SITE).resolve()
    kinds = {"02_tokens": {"tokens"}, "05_kv_cache": {"cache"}, "06_prompt_caching": {"blocks"}}
    if (root / "live" / "smollm2.js").exists():  # lesson 4's explorer runs on SmolLM2, behind %%needs smollm2
        kinds["04_attention"] = {"attention"}
    for folder in (root, root / "zh"):
        for stem, want in kinds.items():
            page, errors = open_offline(browser, folder / f"{stem}.html")
            page.wait_for_selector(".kv-live button.kv-live-run")
            panels = page.locator(".kv-live")
            assert {panels.nth(i).get_attribute("data-kv-live") for i in range(panels.count())} == want, stem
            for kind in want:
                run_panel(page, kind)
            check_offline(page, errors, f"{folder.name}/{stem}, its panels run")
            page.close()
