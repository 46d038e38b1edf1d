"""The notebooks in a real browser: JupyterLab on 127.0.0.1, driven by Playwright on
Debian's Chromium. Run every cell, press the buttons, hover the views, read the DOM: widgets,
views and pictures render, hovers show the kernel's numbers, no error output, no console
errors, no request beyond 127.0.0.1. Screenshots go to $KVLIB_SCREENSHOTS (default:
.screenshots) for a person to look at.
"""

import pytest

from browser import (Lab, check_clean, chromium, copy_notebooks, lab_server, no_kernel_request, open_and_run,
                     screenshots, settle, shots_dir, tip)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    copy_notebooks(root)
    with lab_server(root, {"KVLIB_MODEL": "tiny"}) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def test_01_generation_loop(browser, lab):
    import kvlib

    tiny = kvlib.load_model("tiny", device="cpu")
    page, errors = open_and_run(browser, lab, "01_generation_loop.ipynb", timeout_s=400)  # SmolLM2 cells
    check_clean(page, errors, "01")
    body = page.locator("body").inner_text()
    assert "'prompt only': ' Paris Paris Paris Paris Paris Paris Paris Paris'" in body  # SmolLM2, by name
    assert "Model('smollm2', llama family" in body and "Model('tiny', gpt2 family" in body
    chat = page.locator(".widget-vbox").filter(has_text="Max tokens").first
    assert "Model: tiny" in chat.inner_text()
    for prompt, n in (("ROMEO.\n", 40), ("JULIET.\n", 6)):
        chat.locator("textarea").fill(prompt)
        chat.locator("input[type='number']").fill(str(n))
        chat.locator("input[type='number']").press("Tab")
        page.wait_for_timeout(500)  # the new values reach the kernel before Send
        chat.locator("button:has-text('Send')").click()
        expected = kvlib.generate(tiny, prompt, n)
        page.wait_for_function("([el, n]) => el.innerText.includes(`tiny: ${n} tokens in`)",
                               arg=[chat.element_handle(), len(expected.ids)], timeout=60_000)
        settle(page, errors, "01", f"Send with {prompt!r}, {n} tokens")
        streamed = chat.locator(".widget-html pre b").inner_text()
        assert " ".join(streamed.split()) == " ".join(expected.text.split()), (streamed, expected.text)
        assert "ms per token); stopped" in chat.inner_text()
    screenshots(page, "01")


def test_02_tokens(browser, lab):
    import kvlib
    from kvlib import tokenizers

    toks = tokenizers.available(kvlib.load_model("tiny", device="cpu"))
    page, errors = open_and_run(browser, lab, "02_tokens.ipynb")
    check_clean(page, errors, "02")
    assert "[9787, 503, 23370, 305, 74, 13, 1872]" in page.locator("body").inner_text()  # GPT-2's own ids
    app = page.locator(".widget-vbox").filter(has=page.locator("textarea")).first
    box = app.locator("textarea")
    box.fill("Will will")
    box.press("Tab")  # continuous_update=False: the app updates when the box loses focus
    page.wait_for_function("() => document.body.innerText.includes('GPT-2: 2 tokens for 9 characters')", timeout=30_000)
    settle(page, errors, "02", "typing 'Will will'")
    for tok in toks:  # each row shows that tokenizer's own ids, e.g. GPT-2's 8743 and 481
        ids = tok.encode("Will will")
        row = app.locator(f"xpath=.//div[starts-with(normalize-space(), '{tok.name}: {len(ids)} tokens for 9 "
                          f"characters')]/following-sibling::div[1]")
        assert [int(t) for t in row.inner_text().split() if t.isdigit()] == ids, tok.name
    assert tokenizers.gpt2().encode("Will will") == [8743, 481]
    div = page.locator(".widget-vbox").filter(has_text="Prompt B").first
    b = div.locator("input[type='text']").nth(1)
    b.fill("To be, or not to see")
    b.press("Tab")
    a_ids, b_ids = (toks[0].encode(t) for t in ("To be, or not to be, that is the question", "To be, or not to see"))
    k = tokenizers.first_divergence(a_ids, b_ids)
    page.wait_for_function("([el, k]) => el.innerText.includes(`the first ${k} tokens are shared`)",
                           arg=[div.element_handle(), k], timeout=30_000)
    settle(page, errors, "02", "changing prompt B")
    reveal = page.locator("button:has-text('Show the answer')").first
    reveal.scroll_into_view_if_needed()
    reveal.click()
    page.wait_for_function("() => document.body.innerText.includes('Answer: 2.')", timeout=30_000)
    settle(page, errors, "02", "Show the answer")
    screenshots(page, "02")


def test_03_embeddings(browser, lab):
    import kvlib
    from kvlib import embeddings

    smollm2 = kvlib.load_model("smollm2", device="cpu")
    fams = embeddings.families(smollm2)
    page, errors = open_and_run(browser, lab, "03_embeddings.ipynb")
    check_clean(page, errors, "03")
    body = page.locator("body").inner_text()
    assert "Model('smollm2', llama family" in body and "Model('random-gpt2', gpt2 family" in body
    assert "smollm2 adds no position table" in body  # RoPE: the KVLibError, shown by the notebook
    app = page.locator(".widget-vbox").filter(has_text="Project to").first
    score = app.locator(".widget-html").first
    picture = app.locator(".jp-RenderedImage img")
    app.scroll_into_view_if_needed()
    for dims in (2, 3, 1):
        before_text, before_src = score.inner_text(), picture.get_attribute("src")
        app.locator(f"button:has-text('{dims}D')").click()
        page.wait_for_function("([el, d]) => el.innerText.includes(`In ${d}D,`)", arg=[app.element_handle(), dims],
                               timeout=30_000)
        settle(page, errors, "03", f"switching to {dims}D")
        coords, words, labels = embeddings.project(smollm2, fams, dims)
        sep = embeddings.separation(coords, labels)
        assert f"In {dims}D, {sep:.0%} of the words" in score.inner_text()
        assert score.inner_text() != before_text
        assert picture.count() == 1 and picture.get_attribute("src") != before_src  # replaced, not added
        page.screenshot(path=str(shots_dir() / f"03-space-{dims}D.png"))
    word = app.locator("input[type='text']")
    word.fill("queen")
    word.press("Tab")
    first = embeddings.neighbours(smollm2, "queen")[0][0]
    page.wait_for_function("([el, t]) => el.innerText.includes(t)", arg=[app.element_handle(), repr(first)],
                           timeout=30_000)
    settle(page, errors, "03", "typing 'queen'")
    reveal = page.locator("button:has-text('Show the answer')").nth(1)  # the king ~ queen or table exercise
    reveal.scroll_into_view_if_needed()
    reveal.click()
    page.wait_for_function("() => document.body.innerText.includes(\"Answer: 'a'.\")", timeout=30_000)
    settle(page, errors, "03", "Show the answer")
    screenshots(page, "03")


def test_04_attention(browser, lab):
    import kvlib
    from kvlib import attention

    smollm2 = kvlib.load_model("smollm2", device="cpu")
    mary = "Mary had a little"
    trace = kvlib.Trace()
    smollm2.forward(smollm2.encode(mary), trace=trace)
    tokens = [smollm2.decode([i]) for i in smollm2.encode(mary)]
    page, errors = open_and_run(browser, lab, "04_attention.ipynb")
    check_clean(page, errors, "04")
    body = page.locator("body").inner_text()
    assert "after 'Mary had a little': ' bit'" in body and "' snow' 81" in body
    assert "query heads that read the very same WK: [[0, 1, 2], [3, 4, 5], [6, 7, 8]]" in body
    app = page.locator(".widget-vbox").filter(has=page.locator("select")).first
    app.scroll_into_view_if_needed()
    weights = lambda: [float(t.rsplit(": ", 1)[1]) for t in
                       app.locator("td[title*='→']").evaluate_all("cells => cells.map(c => c.title)")]
    shown = weights()
    for layer, head in ((10, 0), (10, 1), (20, 4)):
        app.locator("select").nth(0).select_option(label=f"layer {layer}")
        settle(page, errors, "04", f"choosing layer {layer}")
        app.locator("select").nth(1).select_option(label=f"head {head}")
        settle(page, errors, "04", f"choosing head {head}")
        page.wait_for_function("([el, l, h]) => el.innerText.includes(`layer ${l}, head ${h}`)",
                               arg=[app.element_handle(), layer, head], timeout=30_000)
        expected = trace.layers[layer].weights[head].flatten().tolist()  # the grid's cells, row by row
        now = weights()
        assert len(now) == len(expected) and max(abs(a - b) for a, b in zip(now, expected)) < 2e-3, (layer, head)
        assert now != shown  # the numbers changed, not only the picture
        shown = now
        _, top, w = attention.most_attended(trace.layers[layer].weights[head, -1], tokens)
        assert f"gives most weight to {top!r} ({w:.2f})" in app.inner_text()  # the last row, read aloud
        page.screenshot(path=str(shots_dir() / f"04-explorer-l{layer}-h{head}.png"))
    cell = app.locator("td[title*='→']").nth(5)
    cell.scroll_into_view_if_needed()
    cell.hover()  # the value of a cell on hover
    assert float(cell.get_attribute("title").rsplit(": ", 1)[1]) >= 0
    screenshots(page, "04")


def test_05_kv_cache_animates(browser, lab):
    """Both apps play and step: each move redraws the picture, and the info line's step, token count and
    bytes agree with each other and with tiny's KV bytes per token."""
    import json
    import re

    from kvlib import memory, models

    page, errors = open_and_run(browser, lab, "05_kv_cache.ipynb", timeout_s=400)
    check_clean(page, errors, "05")
    settle(page, errors, "05", "running all cells")
    tiny = json.loads((models.TINY_DIR / "config.json").read_text())
    per_token = memory.kv_bytes_per_token(tiny["n_layer"], tiny["n_head"], tiny["n_embd"] // tiny["n_head"])
    apps = page.locator(".widget-vbox").filter(has=page.locator(".widget-play"))
    assert apps.count() == 2
    grid, growth = apps.nth(0), apps.nth(1)

    def seen(app):  # (step shown, its info line, its picture)
        info = app.locator(".widget-html").first.inner_text()
        return int(re.search(r"Step (\d+):", info).group(1)), info, app.locator("img").first.get_attribute("src")

    def check_grid(step, info, first_fed):
        fed = int(re.search(r"the model is fed (\d+) tokens", info).group(1))
        assert fed == first_fed + step, info
        if step:
            assert float(re.search(r"largest change ([-+.e\d]+)\)", info).group(1)) < 1e-4, info

    def check_growth(step, info, first_held):
        held = int(re.search(r"now holds (\d+) tokens", info).group(1))
        total, layers, tokens, each = re.search(r"([\d,]+) bytes in all (\d+) layers \((\d+) tokens × ([\d,]+) "
                                                r"bytes per token\)", info).groups()
        assert held == int(tokens) == first_held + step, info
        assert int(layers) == tiny["n_layer"] and int(each.replace(",", "")) == per_token, info
        assert int(total.replace(",", "")) == held * per_token, info

    last = {}
    for k, (app, check, count) in enumerate(((grid, check_grid, r"fed (\d+) tokens"),
                                             (growth, check_growth, r"holds (\d+) tokens"))):
        app.locator(".widget-play").scroll_into_view_if_needed()
        step, info, picture = seen(app)
        assert step == 0
        first = int(re.search(count, info).group(1))
        check(0, info, first)
        app.locator(".widget-play button").first.click()  # Play
        page.wait_for_function("([el, s]) => el.innerText.includes(`Step ${s}:`)",
                               arg=[app.element_handle(), 2], timeout=60_000)
        settle(page, errors, "05", f"Play in app {k}")
        pause = app.locator(".widget-play button:has(i.fa-pause)")
        if pause.count():
            pause.click()  # a playing app keeps replacing its picture
        settle(page, errors, "05", f"Pause in app {k}")
        step, info, now = seen(app)
        assert step >= 2 and now != picture, f"app {k}: the picture did not change after playing to step {step}"
        check(step, info, first)
        picture = now
        page.screenshot(path=str(shots_dir() / f"05-play{k}-step{step}.png"))
        for key, move in (("ArrowLeft", -1), ("ArrowLeft", -1), ("ArrowRight", 1)):  # the slider, by keyboard
            app.locator(".noUi-handle").first.press(key)
            page.wait_for_function("([el, s]) => el.innerText.includes(`Step ${s}:`)",
                                   arg=[app.element_handle(), step + move], timeout=30_000)
            settle(page, errors, "05", f"{key} on the slider of app {k}")
            before, (step, info, picture) = picture, seen(app)
            assert picture != before, f"app {k}: the picture did not change at step {step}"
            check(step, info, first)
        last[k] = step, picture

    grid.locator("select").first.select_option(label="layer 1")  # another layer: another grid, the same step
    page.wait_for_function("([el, src]) => el.querySelector('img').getAttribute('src') !== src",
                           arg=[grid.element_handle(), last[0][1]], timeout=30_000)
    settle(page, errors, "05", "choosing layer 1")
    assert seen(grid)[0] == last[0][0]
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    page.wait_for_timeout(1000)
    screenshots(page, "05", (".jp-RenderedImage img",))


def test_06_prompt_caching(browser, lab):
    import re
    page, errors = open_and_run(browser, lab, "06_prompt_caching.ipynb", timeout_s=400)
    check_clean(page, errors, "06")
    send, forward = "button:has-text('Send next request')", "button:has-text('Fast-forward')"
    stream = page.locator(".widget-vbox").filter(has=page.locator(send)).first  # the first stream app
    stream.scroll_into_view_if_needed()
    for button in (send, forward):  # every label whole: the text fits its button
        assert stream.locator(button).evaluate("b => b.scrollWidth <= b.clientWidth"), f"06: {button} is cut short"
    rows = stream.locator("table tr")
    assert rows.count() == 5  # the header and the four requests the notebook sent

    def sent_row(k):  # request, tenant, blocks, input, cached, written, prefill, cost, expired/evicted
        cells = rows.nth(k).locator("td")
        return [cells.nth(i).inner_text().strip() for i in range(cells.count())]

    for k, label in ((5, "system + question 3"), (6, "first token changed")):
        stream.locator(send).click()
        page.wait_for_function("([el, n]) => el.querySelectorAll('table tr').length === n",
                               arg=[stream.element_handle(), k + 1], timeout=30_000)
        settle(page, errors, "06", f"Send next request ({label})")
        name, tenant, _, n_in, cached, _, _, cost, _ = sent_row(k)
        n_in, cached, cost = int(n_in), int(cached), float(cost.replace(",", ""))
        assert name == label and tenant == "acme"
        # the shared system prompt is a hit in whole blocks; a changed first token hits nothing
        assert (cached > 0 and cached % 16 == 0) if k == 5 else cached == 0, (label, cached)
        assert abs(cost - (n_in - 0.9 * cached)) < 0.06, (label, cost)  # GPT-5's ratios: a cached token costs 0.1
        assert f"{cached} of {n_in} tokens cached" in stream.inner_text()
    held = int(re.search(r"cache holds (\d+) blocks", stream.inner_text()).group(1))
    assert held > 0
    stream.locator(forward).click()
    page.wait_for_function("(el) => el.innerText.includes('blocks expired')", arg=stream.element_handle(),
                           timeout=30_000)
    settle(page, errors, "06", "Fast-forward")
    text = stream.inner_text()
    assert f"{held} blocks expired" in text and "cache holds 0 blocks" in text, text[:400]
    screenshots(page, "06")


def test_07_long_context_memory(browser, lab):
    import re

    from kvlib import memory

    page, errors = open_and_run(browser, lab, "07_long_context_memory.ipynb", timeout_s=400)
    check_clean(page, errors, "07")
    app = page.locator(".widget-vbox").filter(has_text="per batch of").first
    app.scroll_into_view_if_needed()

    def shown():  # (context, batch, bytes) as the calculator prints them
        m = re.search(r"per sequence of ([\d,]+) tokens.*per batch of (\d+): ([\d,]+) bytes", app.inner_text(), re.S)
        return tuple(int(g.replace(",", "")) for g in m.groups())

    assert shown() == (131072, 1, memory.kv_bytes(memory.CATALOGUE["Llama-3-8B"], 131072))
    app.locator("select").first.select_option("Gemma-2-9B")
    page.wait_for_function("(el) => el.innerText.includes('Gemma-2-9B')", arg=app.element_handle(), timeout=30_000)
    settle(page, errors, "07", "choosing Gemma-2-9B")
    assert shown() == (131072, 1, memory.kv_bytes(memory.CATALOGUE["Gemma-2-9B"], 131072))
    assert "21 local layers capped" in app.inner_text()
    before = shown()
    app.locator(".noUi-handle").first.focus()
    page.keyboard.press("ArrowRight")  # the context slider: 128K -> 256K tokens
    page.wait_for_function("(el) => el.innerText.includes('262,144 tokens')", arg=app.element_handle(),
                           timeout=30_000)
    settle(page, errors, "07", "moving the context to 256K")
    assert shown() == (262144, 1, memory.kv_bytes(memory.CATALOGUE["Gemma-2-9B"], 262144)) != before
    page.screenshot(path=str(shots_dir() / "07-calculator.png"))
    screenshots(page, "07")
