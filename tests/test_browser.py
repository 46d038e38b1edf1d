"""The notebooks in a real browser: JupyterLab on 127.0.0.1, driven by Playwright on
Debian's Chromium. Run every cell, press the buttons, type into the apps and the exercises, hover
the views, read the DOM: widgets, views and pictures render, each app answers with the kernel's
numbers, hovers show them, no error output, no console errors, no request beyond 127.0.0.1. No
fixed sleeps: every wait is for a condition. With $KVLIB_SCREENSHOTS set, screenshots of every
picture, app and view go there for a person to look at.

The notebooks' default model here is a GPT-2-format directory holding tiny's weights, with SmolLM2
present so every `%%needs smollm2` cell runs too: the one browser run of each notebook (why, and the
other set-ups: tests/test_notebooks.py).
"""

import re
from pathlib import Path

import pytest

from browser import (CACHE_ROWS, GRID_ROWS, Lab, check_clean, chromium, close_all, copy_notebooks, drag_across, js_num,
                     kernel_holds, lab_server, no_kernel_request, open_and_run, play_through, save_gpt2_format,
                     screenshots, settle, shot, tip)
from conftest import toy_by_hand

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpt2_format(tmp_path_factory):
    return save_gpt2_format(tmp_path_factory.mktemp("tiny-gpt2-format"))


@pytest.fixture(scope="module")
def model(gpt2_format):
    """The notebooks' default model in this lab, loaded as their kernels load it."""
    import kvlib

    return kvlib.load_model(str(gpt2_format), device="cpu")


@pytest.fixture(scope="module")
def lab(tmp_path_factory, gpt2_format):
    root = tmp_path_factory.mktemp("lab")
    copy_notebooks(root)
    with lab_server(root, {"KVLIB_MODEL": str(gpt2_format)}) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture(autouse=True)
def alone(request):
    """After each test its pages close and its kernel shuts down, so each notebook runs alone."""
    yield
    if {"browser", "lab"} <= set(request.fixturenames):
        close_all(request.getfixturevalue("browser"))


def check_saved(page, name):
    """Saved from the page, the run reads as a learner's must (test_notebooks.py's check, on this set-up's outputs):
    nothing on stderr, each view or app with a text fallback that reads without widgets."""
    import nbformat

    from test_notebooks import WITHOUT_VIEWS, check_as_a_learner_sees_it

    page.get_by_role("menuitem", name="File", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Save Notebook(?! As)")).click()  # its name ends with the shortcut
    page.wait_for_selector(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current:not(.jp-mod-dirty)", timeout=30_000)
    nb = nbformat.read(Lab.root / name, as_version=4)
    assert any(c.get("outputs") for c in nb.cells), f"{name}: saved without its outputs"
    views = check_as_a_learner_sees_it(Lab.root / name, nb)
    assert views > 0 or Path(name).name[:2] in WITHOUT_VIEWS, f"{name}: no view with a text fallback"  # zh/07_... too


def leaves(params, at=""):  # a model's nested weights -> {"h.0.c_attn_w": tensor, ...}
    if isinstance(params, dict):
        return {k: v for key, sub in params.items() for k, v in leaves(sub, f"{at}{key}.").items()}
    if isinstance(params, (list, tuple)):
        return {k: v for i, sub in enumerate(params) for k, v in leaves(sub, f"{at}{i}.").items()}
    return {at.rstrip("."): params}


def test_the_labs_model_is_tiny_in_gpt2s_format(tiny, model):
    """The lab's default model and tiny by its name are one model under two names: the same config, weights and
    tokenizer, and the notebooks never compare a name with 'tiny'; so the browser run is the run on tiny too."""
    import ast
    import json
    import torch

    from browser import REPO

    assert model.config == tiny.config and model.name != tiny.name
    mine, theirs = leaves(model.params), leaves(tiny.params)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert model.tokenizer.get_vocab() == tiny.tokenizer.get_vocab() and model.eos_token_id == tiny.eos_token_id
    text = "ROMEO.\nWill will Will's will be done? 轩辕养了一只黄色的虎皮鹦鹉 🦜"
    assert model.encode(text) == tiny.encode(text) and model.decode(tiny.encode(text)) == text
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code" and not "".join(cell["source"]).startswith("%%"):
                tree = ast.parse("".join(cell["source"]))
                # a test for the name (model.name == "tiny", "tiny" in ...) would tell the two apart; loading tiny by
                # name for work any model shows alike (notebook 6's hundreds of routed resends) does not
                tests = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
                         and any(isinstance(x, ast.Constant) and x.value == "tiny" for x in [n.left, *n.comparators])]
                assert not tests, f"{path.name}: {ast.unparse(tests[0]) if tests else ''}"


def test_01_generation_loop(browser, lab, model, smollm2):
    import kvlib
    from kvlib.lessons.exercises.n01 import LINE  # the notebook's running example
    from kvlib.lessons.loop import feed_loop

    page, errors = open_and_run(browser, lab, "01_generation_loop.ipynb", timeout_s=400)  # SmolLM2 cells
    check_clean(page, errors, "01")
    check_saved(page, "01_generation_loop.ipynb")
    body = page.locator("body").inner_text()
    stuck = feed_loop(smollm2, LINE, 8, "prompt only")  # SmolLM2, by name: its first pick, 8 times over
    assert f"'prompt only': {stuck.text!r}" in body and len(set(stuck.ids)) == 1
    assert "Model('smollm2', llama family" in body
    chat = page.locator(".widget-vbox").filter(has_text="Max tokens").first
    assert f"Model: {model.name}" in chat.inner_text()
    box, number = chat.locator("textarea"), chat.locator("input[type='number']")
    for prompt, n in (("ROMEO.\n", 40), ("JULIET.\n", 6)):
        changed = [new for new, now in ((prompt, box.input_value()), (n, int(number.input_value()))) if new != now]
        kernel_holds(page, lambda: (box.fill(prompt), number.fill(str(n)), number.press("Tab")), *changed)
        chat.locator("button:has-text('Send')").click()
        expected = kvlib.generate(model, prompt, n)
        page.wait_for_function("([el, name, n]) => el.innerText.includes(`${name}: ${n} tokens in`)",
                               arg=[chat.element_handle(), model.name, len(expected.ids)], timeout=60_000)
        settle(page, errors, "01", f"Send with {prompt!r}, {n} tokens")
        streamed = chat.locator(".widget-html pre b").inner_text()
        assert " ".join(streamed.split()) == " ".join(expected.text.split()), (streamed, expected.text)
        assert "ms per token); stopped" in chat.inner_text()
    screenshots(page, "01")


def test_zh_01_generation_loop(browser, lab, model, smollm2):
    """The Chinese notebook 1: the chat app speaks Chinese (its labels, its status, why it stopped) and streams a
    Chinese prompt's answer, held back while a character is still arriving, as kvlib.generate writes it."""
    import kvlib
    from kvlib.lessons.exercises.n01 import LINE  # the notebook's running example
    from kvlib.lessons.loop import feed_loop

    page, errors = open_and_run(browser, lab, "zh/01_generation_loop.ipynb", timeout_s=400)  # SmolLM2 cells
    check_clean(page, errors, "zh/01")
    check_saved(page, "zh/01_generation_loop.ipynb")
    stuck = feed_loop(smollm2, LINE, 8, "prompt only")  # a printed line, translated
    assert f"只喂提示词，它把 {stuck.tokens[0]!r} 挑了 {len(stuck.ids)} 遍" in page.locator("body").inner_text()
    chat = page.locator(".widget-vbox").filter(has_text="token 上限").first
    assert f"模型：{model.name}。" in chat.inner_text()
    prompt = chat.locator("textarea").input_value()
    assert prompt == "从前有座山，山里有座庙，庙里"
    chat.locator("button:has-text('发送')").click()
    expected = kvlib.generate(model, prompt, 40)
    page.wait_for_function("([el, name, n]) => el.innerText.includes(`${name}：${n} 个 token，用时`)",
                           arg=[chat.element_handle(), model.name, len(expected.ids)], timeout=60_000)
    settle(page, errors, "zh/01", "发送")
    streamed = chat.locator(".widget-html pre b").inner_text()
    assert " ".join(streamed.split()) == " ".join(expected.text.split()), (streamed, expected.text)
    assert "停止原因：已写满 max_new_tokens（40 个）" in chat.inner_text()
    screenshots(page, "zh-01")

def test_02_tokens(browser, lab, model):
    from kvlib.lessons import tokenization

    toks = tokenization.available(model)
    page, errors = open_and_run(browser, lab, "02_tokens.ipynb")
    check_clean(page, errors, "02")
    check_saved(page, "02_tokens.ipynb")
    gpt2_row = " ".join(f"{c.text!r}={c.id}" for c in tokenization.chunks(tokenization.gpt2(), "Will will send his sister a selfie"))
    assert gpt2_row.startswith("'Will'=8743 ' will'=481") and gpt2_row in page.locator("body").inner_text()  # GPT-2's ids
    app = page.locator(".widget-vbox").filter(has=page.locator("textarea")).first
    box = app.locator("textarea")
    box.fill("Will will")
    box.press("Tab")  # continuous_update=False: the app updates when the box loses focus
    strips = app.locator(".kv-tokens")
    page.wait_for_function("([el, t]) => el.innerText.includes(t)", timeout=30_000, arg=[  # the app stays, its views redraw
        app.element_handle(), f"{toks[0].name}: {len(toks[0].encode('Will will'))} tokens for 9 characters"])
    settle(page, errors, "02", "typing 'Will will'")
    assert strips.count() == len(toks)
    for tok, k in zip(toks, range(len(toks))):  # each strip shows that tokenizer's own ids, e.g. GPT-2's 8743 and 481
        strip, ids = strips.nth(k), tok.encode("Will will")
        assert strip.locator(".kv-title").inner_text().startswith(f"{tok.name}: {len(ids)} tokens for 9 characters")
        assert [int(i) for i in strip.locator("[data-id]").evaluate_all("cs => cs.map(c => c.dataset.id)")] == ids
        first = bytes(tok.token_bytes(ids[0]))  # hover the first chip: its id, position and bytes
        assert tip(page, strip.locator("[data-id]").first) == (f"{tok.decode([ids[0]])!r} · position 0\n"
                                                               f"id {ids[0]} · {len(first)} byte{'s' * (len(first) > 1)}: {first.hex(' ')}")
    assert tokenization.gpt2().encode("Will will") == [8743, 481]
    div = page.locator(".widget-vbox").filter(has_text="Prompt B").first
    check_divergence(page, errors, "02", div, tokenization.for_model(model), lambda a, b: (a, shorter(a)))
    reveal_answer(page, errors, "02", "Show the answer", "Answer: 2.")
    screenshots(page, "02")


def reveal_answer(page, errors, name, button, shown):
    """Press the first exercise's answer button (its label in the notebook's language); wait for the answer."""
    reveal = page.locator(f"button:has-text('{button}')").first
    reveal.scroll_into_view_if_needed()
    reveal.click()
    page.wait_for_function("(shown) => document.body.innerText.includes(shown)", arg=shown, timeout=30_000)
    settle(page, errors, name, button)


def test_zh_02_tokens(browser, lab, model):
    """The Chinese notebook 2 (one switch, kvlib.set_language("zh"), in its first cell): its apps and views speak
    Chinese, from a strip's title and a chip's tooltip to the exercise's button and answer."""
    from kvlib.lessons import tokenization

    page, errors = open_and_run(browser, lab, "zh/02_tokens.ipynb")
    check_clean(page, errors, "zh/02")
    check_saved(page, "zh/02_tokens.ipynb")
    text = "Will will 轩辕家养了一只虎皮鹦鹉，它每天早上都会说“你好”。 🦜"  # the notebook's text, as its app shows it
    gpt2 = tokenization.gpt2()
    app = page.locator(".widget-vbox").filter(has=page.locator("textarea")).first
    assert app.locator(".widget-label").first.inner_text() == "文本"
    strip = app.locator(".kv-tokens").nth(1)  # the loaded model's own, then GPT-2's
    assert strip.locator(".kv-title").inner_text() == (f"GPT-2：{len(text)} 个字符（{len(text.encode())} 个字节）"
                                                       f"切成 {len(gpt2.encode(text))} 个 token")
    piece = tokenization.chunks(gpt2, text)[2]  # the first Chinese character's first byte, with the space before it
    assert piece.text == " <0xE8>"
    assert tip(page, strip.locator("[data-id]").nth(2)) == (f"' <0xE8>' · 位置 2\n"
                                                            f"id {piece.id} · {len(piece.bytes)} 字节: {piece.bytes.hex(' ')}")
    div = page.locator(".widget-vbox").filter(has_text="提示词 B").first
    shared = re.search(r"前 (\d+) 个 token 相同；从位置 (\d+) 起不同", div.inner_text())
    assert shared and shared[1] == shared[2], div.inner_text()  # n shared: position n (from 0, as the strip) parts
    reveal_answer(page, errors, "zh/02", "看答案", "答案：2。")
    screenshots(page, "zh-02")


def test_zh_05_kv_cache(browser, lab, model):
    """The Chinese notebook 5: the cache's stack, its byte formula checked against cache.nbytes, the grid's
    controls and the worked step speak Chinese, with the kernel's own numbers."""
    from kvlib.lessons.exercises.n05 import EXAMPLE

    prompt = model.encode(EXAMPLE)
    c = model.config
    per_token = 2 * c.n_layer * c.n_kv_head * c.head_dim * 4
    page, errors = open_and_run(browser, lab, "zh/05_kv_cache.ipynb", timeout_s=400)
    check_clean(page, errors, "zh/05")
    check_saved(page, "zh/05_kv_cache.ipynb")
    grid, growth, toy = page.locator(".kv-att").first, page.locator(".kv-cachegrowth").first, page.locator(".kv-step").first
    assert grid.locator("button", has_text="播放").count() == 1 and grid.locator("label").first.inner_text().startswith("层")
    growth.scroll_into_view_if_needed()
    last = len(prompt) + 9  # 10 tokens made, the last never fed
    growth.locator("input.kv-slider").evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", 9)
    assert growth.locator(".kv-total").inner_text() == f"{last * per_token:,} 字节"
    assert growth.locator(".kv-note.kv-mono").inner_text().startswith(f"{last} 个 token × 2（K 和 V）× {c.n_layer} 层")
    toy.scroll_into_view_if_needed()
    toy.locator("button", has_text="下一步").click()
    assert toy.locator(".kv-controls .kv-caption").inner_text() == "第 2 部分（共 7 部分）：K（缓存 + 新的一行）"
    settle(page, errors, "zh/05", "stepping the cache and the worked step")
    screenshots(page, "zh-05", (".kv-view",))


def test_zh_07_long_context_memory(browser, lab):
    """The Chinese notebook 7: the KV calculator speaks Chinese (its labels, its report, its GPU table), and
    choosing a model redraws its report in Chinese from the kernel."""
    from kvlib.lessons import memory

    page, errors = open_and_run(browser, lab, "zh/07_long_context_memory.ipynb", timeout_s=400)
    check_clean(page, errors, "zh/07")
    check_saved(page, "zh/07_long_context_memory.ipynb")
    app = page.locator(".widget-vbox").filter(has_text="每批 1 条").first
    app.scroll_into_view_if_needed()
    labels = app.locator(".widget-label").all_inner_texts()
    assert labels[:4] == ["模型", "数字格式", "上下文", "Batch"], labels
    llama = memory.kv_bytes(memory.CATALOGUE["Llama-3.1-8B"], 131072)
    assert f"每条 131,072 个 token 的序列：{llama:,} 字节" in app.inner_text() and "放不下" in app.inner_text()
    app.locator("select").first.select_option("Gemma-2-9B")
    heading = f"Gemma-2-9B: {memory.CATALOGUE['Gemma-2-9B'].n_layer} 层"
    page.wait_for_function("([el, s]) => el.innerText.includes(s)", arg=[app.element_handle(), heading], timeout=30_000)
    settle(page, errors, "zh/07", "choosing Gemma-2-9B")
    assert "21 个局部层，封顶在各自 4,096 个 token 的窗口" in app.inner_text()
    shot(app, "zh-07-calculator")
    screenshots(page, "zh-07")


def test_zh_08_serving(browser, lab, model):
    """The Chinese notebook 8: its serving timelines speak Chinese (runs' names, figures, legend, a cell's tooltip)
    over the same schedule as the English, and section 3's Chinese system prompt is read from cached blocks."""
    from kvlib.lessons.exercises import n08
    from kvlib.server import serving

    page, errors = open_and_run(browser, lab, "zh/08_serving.ipynb", timeout_s=500)
    check_clean(page, errors, "zh/08")
    check_saved(page, "zh/08_serving.ipynb")
    stream = serving.request_stream(model, 16, seed=0)
    run = serving.serve(model, stream, "continuous", max_batch=4, prefix_caching=False)  # as section 2 runs it
    view = page.locator(".kv-view").filter(has=page.locator(".kv-sv-run")).first
    grid = view.locator(".kv-sv-run[data-policy='continuous']")
    assert grid.get_attribute("data-name") == "连续批处理"
    assert grid.locator(".kv-sv-figures").inner_text().startswith(f"连续批处理 · 4 个槽位 · {len(run.steps)} 步 · ")
    assert "空闲：这个槽位里没有请求" in view.locator(".kv-legend").inner_text()
    i = max(range(len(stream)), key=lambda j: stream[j].max_new_tokens)
    cell = grid.locator(f"td[data-request='{i}'][data-kind='decode']").first
    step, slot = cell.get_attribute("data-step"), cell.get_attribute("data-slot")
    assert tip(page, cell).startswith(f"请求 {stream[i].label} · 连续批处理 · 第 {step} 步 · 槽位 {slot}\n解码：")
    shot(view, "zh-08-timeline")
    on = page.locator(".kv-sv-run[data-name='连续批处理，前缀缓存'] td[data-kind='prefill']")
    assert on.all_inner_texts().count("▸A") == 1 and sum(t.startswith("↺") for t in on.all_inner_texts()) == 7
    reveal_answer(page, errors, "zh/08", "看答案", f"答案：{n08.users_fit(131072)}。")  # the first exercise's
    screenshots(page, "zh-08")


def test_zh_06_prompt_caching(browser, lab, model):
    """The Chinese notebook 6: its stream of requests on a Chinese system prompt speaks Chinese, from the blocks
    view's header, legend and a chip's tooltip to the app's button and status, and the exercise's answer."""
    from kvlib.lessons import exercises

    page, errors = open_and_run(browser, lab, "zh/06_prompt_caching.ipynb", timeout_s=400)
    check_clean(page, errors, "zh/06")
    check_saved(page, "zh/06_prompt_caching.ipynb")
    send = "button:has-text('发送下一个请求')"
    stream = page.locator(".widget-vbox").filter(has=page.locator(send)).first
    view = stream.locator(".kv-blocks")
    assert view.locator("th").all_inner_texts()[:3] == ["请求", "租户", "发送于"]
    assert "命中：从缓存里读出" in view.locator(".kv-legend").inner_text()
    text = tip(page, view.locator("tr.kv-request").nth(1).locator(".kv-block").first)
    assert text.startswith("系统提示词 + 问题 2 · 第 0 块 · token 0–15 · 命中：从缓存里读出"), text
    assert "哈希 " in text
    stream.locator(send).click()
    page.wait_for_function("(el) => el.innerText.includes('已发送')", arg=stream.element_handle(), timeout=30_000)
    settle(page, errors, "zh/06", "发送下一个请求")
    assert view.locator("tr.kv-request").nth(4).locator("td[data-field='label']").inner_text() == "系统提示词 + 问题 3"
    answer = exercises.REGISTRY["06.second_request_cached"].answer(model)
    reveal_answer(page, errors, "zh/06", "看答案", f"答案：{answer}。")
    screenshots(page, "zh-06")


def shorter(text):  # the first half of a prompt's words, then another word: the prompts part there
    words = text.split()
    return " ".join(words[:len(words) // 2] + ["elsewhere"])


def check_divergence(page, errors, name, app, tokenizer, edit):
    """A Divergence app: the prompts it offers, then edit(a, b) -> new prompts typed in; each time its note and
    strips show the shared tokens the tokenizer finds, and the first chip that differs says so on hover.
    -> the shared counts (as offered, after the edit)."""
    from kvlib.lessons.tokenization import first_divergence

    boxes = app.locator("input[type='text']")

    def shows(prompts, step):
        ids = [tokenizer.encode(p) for p in prompts]
        k = first_divergence(*ids)
        assert k is not None, prompts
        page.wait_for_function("""([el, k, ids]) => el.innerText.includes(`the first ${k} tokens are shared`) &&
            [...el.querySelectorAll('.kv-tokens')].every((s, i) =>
                JSON.stringify([...s.querySelectorAll('[data-id]')].map(c => +c.dataset.id)) === JSON.stringify(ids[i]))""",
                               arg=[app.element_handle(), k, ids], timeout=30_000)
        settle(page, errors, name, f"the prompts {step}")
        strips = app.locator(".kv-tokens")
        for i in range(2):
            assert strips.nth(i).locator(".kv-chip:not(.kv-differs)").count() == k, (step, prompts)
            assert strips.nth(i).locator(".kv-divider").count() == 1, (step, prompts)
        parted = strips.nth(1).locator(".kv-chip.kv-differs").first
        assert tip(page, parted).startswith(f"{tokenizer.decode([ids[1][k]])!r} · position {k}\n"), prompts
        return k

    offered = [boxes.nth(i).input_value() for i in range(2)]
    edited = edit(*offered)
    shared = shows(offered, "as offered")
    for i, text in enumerate(edited):
        boxes.nth(i).fill(text)
        boxes.nth(i).press("Tab")  # continuous_update=False: the app updates when the box loses focus
    return shared, shows(edited, "edited")


def test_03_embeddings(browser, lab, model, smollm2):
    """The lookup shows the ids, then the table's rows, of what is typed; an exercise answered right and wrong
    in its cell; the map switches 1D / 2D / 3D and turns in the browser (no kernel frame); a hovered point
    names the kernel's word; the score beside it is the kernel's separation."""
    from kvlib.lessons import embeddings
    from kvlib.ui.views import EmbeddingMap

    sent = EmbeddingMap.of(smollm2)  # what the kernel sends the browser: words, families, scores
    n = len(sent.tokens)
    page, errors = open_and_run(browser, lab, "03_embeddings.ipynb")
    check_clean(page, errors, "03")
    check_saved(page, "03_embeddings.ipynb")
    body = page.locator("body").inner_text()
    assert "Model('smollm2', llama family" in body and "Model('random-gpt2', gpt2 family" in body
    assert "one key turned by its place (RoPE)" in body  # SmolLM2's cell: one input, its key turned by position
    check_lookup(page, errors, model)
    table = embeddings.table(model)  # the exercise's answer, counted here from the table itself
    check_typed_exercise(page, errors, "03.table_numbers", table.numel(), table.shape[0] + table.shape[1])
    app = page.locator(".widget-vbox").filter(has=page.locator(".kv-embedding")).first
    view = app.locator(".kv-embedding")
    app.scroll_into_view_if_needed()
    points = view.locator(".kv-point")
    placed = lambda: points.evaluate_all("ps => ps.map(p => [+p.dataset.pos, p.getAttribute('transform')]).sort()")
    assert points.count() == n
    for dims in (2, 3, 1):
        before = placed()
        assert no_kernel_request(page, lambda: view.locator(f"button[data-dims='{dims}']").click()) == 0
        settle(page, errors, "03", f"switching to {dims}D")
        assert placed() != before, f"03: the picture did not change in {dims}D"
        hits = round(sent.scores[dims - 1] * n)
        assert f"In {dims}D, {hits} of the {n} words" in view.inner_text()
        shot(page, f"03-space-{dims}D")
    for i in (0, n // 2, n - 1):  # in 1D no point covers another: hover each for the kernel's word and family
        assert tip(page, view.locator(f".kv-point[data-pos='{i}']")).startswith(
            f"{sent.tokens[i]!r} · {sent.labels[i]} · id {sent.ids[i]}")
    view.locator("button[data-dims='3']").click()
    picture = view.locator("svg.kv-map")

    def keys():
        picture.focus()
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowDown")
        assert picture.evaluate("e => e === document.activeElement"), "03: the notebook took the arrow keys"

    def drag():
        drag_across(page, picture)

    for how, turn in (("the arrow keys", keys), ("a drag", drag)):
        before = placed()
        assert no_kernel_request(page, turn) == 0, how
        assert placed() != before, f"03: {how} did not turn the 3D picture"
    settle(page, errors, "03", "turning the 3D picture")
    word = app.locator("input[type='text']")
    word.fill("queen")
    word.press("Tab")
    # the whole line, scores and all: the first neighbour alone may already be among 'king''s
    line = ", ".join(f"{t!r} {s:.2f}" for t, s in embeddings.neighbours(smollm2, "queen"))
    page.wait_for_function("([el, t]) => el.innerText.includes(t)", arg=[app.element_handle(), line], timeout=30_000)
    settle(page, errors, "03", "typing 'queen'")
    reveal = page.locator("button:has-text('Show the answer')").nth(1)  # the king ~ queen or table exercise
    reveal.scroll_into_view_if_needed()
    reveal.click()
    page.wait_for_function("() => document.body.innerText.includes(\"Answer: 'a'.\")", timeout=30_000)
    settle(page, errors, "03", "Show the answer")
    screenshots(page, "03")


def check_lookup(page, errors, model):
    """Notebook 3's Lookup: its text's ids as chips; typed text, then the embedding rows of that text."""
    from kvlib.lessons import embeddings

    app = page.locator(".widget-vbox").filter(has=page.locator(".widget-toggle-buttons")).filter(
        has_text="embedding rows").first
    app.scroll_into_view_if_needed()
    box = app.locator("input[type='text']")
    chip_ids = lambda: [int(i) for i in app.locator(".kv-tokens [data-id]").evaluate_all("cs => cs.map(c => c.dataset.id)")]
    assert chip_ids() == model.encode(box.input_value())  # as offered
    text = "Romeo, Romeo! wherefore art thou"
    ids = model.encode(text)
    box.fill(text)
    box.press("Tab")  # continuous_update=False: the app updates when the box loses focus
    page.wait_for_function("([el, t]) => el.innerText.includes(t)", arg=[app.element_handle(),
                           f"{len(ids)} token ids, each a row number"], timeout=30_000)
    settle(page, errors, "03", f"typing {text!r} into the lookup")
    assert chip_ids() == ids
    app.locator("button", has_text="embedding rows").click()
    table = embeddings.table(model)
    page.wait_for_function("([el, t]) => el.innerText.includes(t)", arg=[app.element_handle(),
                           f"{len(ids)} rows picked from the table of shape {tuple(table.shape)}"], timeout=30_000)
    settle(page, errors, "03", "showing the embedding rows")
    assert f"the result has shape {(len(ids), table.shape[1])}" in app.inner_text()
    matrix = app.locator(".kv-matrix")
    assert matrix.locator("th.kv-rowhead").all_inner_texts() == [model.decode([i]).replace("\n", "↵") for i in ids]
    k = len(ids) - 1  # the last row: all its numbers on hover, each its table row's
    name, numbers = tip(page, matrix.locator(f"th.kv-rowhead[data-pos='{k}']")).split("\n")
    assert name == f"{model.decode([ids[k]])!r} (position {k})"
    shown = [js_num(x) for x in numbers.split(": ", 1)[1].split()]
    assert len(shown) == table.shape[1] and max(abs(a - b) for a, b in zip(shown, table[ids[k]].tolist())) <= 0.0051


def check_typed_exercise(page, errors, id, right, wrong):
    """Type an answer into an exercise's cell and run it, as a learner does: right, then wrong."""
    cell = page.locator(".jp-CodeCell").filter(has_text=f'exercises.check("{id}"')
    assert cell.count() == 1, id
    source = cell.locator(".cm-content").inner_text()
    for answer, verdict in ((right, "✅ Right."), (wrong, f"❌ Not quite (you said {wrong!r}).")):
        editor = cell.locator(".cm-content")
        editor.click()
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(re.sub(r"my_answer = .*", f"my_answer = {answer!r}", source, count=1))
        page.keyboard.press("Shift+Enter")
        page.wait_for_function("([el, t]) => el.innerText.includes(t)", arg=[
            cell.locator(".jp-OutputArea").element_handle(), verdict], timeout=60_000)
        settle(page, errors, id, f"answering {answer!r}")
    cell.locator("button:has-text('Show the answer')").click()  # shown after a wrong answer only on request
    page.wait_for_function("([el, t]) => el.innerText.includes(t)", arg=[
        cell.locator(".jp-OutputArea").element_handle(), f"Answer: {right!r}."], timeout=30_000)
    settle(page, errors, id, "Show the answer")


def test_zh_03_embeddings(browser, lab, model, smollm2):
    """The Chinese notebook 3: the lookup's switch, the map's title, controls, score, legend and a point's
    tooltip in Chinese, around the model's own English tokens."""
    import kvlib
    from kvlib.ui.views import EmbeddingMap

    kvlib.set_language("zh")
    try:
        sent = EmbeddingMap.of(smollm2)  # what the Chinese notebook's kernel sends: its families named in Chinese
    finally:
        kvlib.set_language("en")
    n = len(sent.tokens)
    page, errors = open_and_run(browser, lab, "zh/03_embeddings.ipynb")
    check_clean(page, errors, "zh/03")
    check_saved(page, "zh/03_embeddings.ipynb")
    body = page.locator("body").inner_text()
    assert "个 token id，每个都是嵌入表里的一个行号" in body and "嵌入行" in body  # the lookup and its switch
    view = page.locator(".kv-embedding").first
    view.scroll_into_view_if_needed()
    assert view.locator(".kv-title").inner_text() == f"smollm2 的 {n} 个 token 嵌入（576 维），用 PCA 投影"
    assert "投影到" in view.inner_text() and "亲属和爵位" in view.locator(".kv-legend").inner_text()
    assert no_kernel_request(page, lambda: view.locator("button[data-dims='2']").click()) == 0
    assert f"在 2D 里，{n} 个词中有 {round(sent.scores[1] * n)} 个" in view.inner_text()
    king = sent.tokens.index(" king")
    assert tip(page, view.locator(f".kv-point[data-pos='{king}']")).startswith(f"' king' · 亲属和爵位 · id {sent.ids[king]}")
    assert "主成分 2 ↑" in view.locator("svg.kv-map").text_content()
    reveal_answer(page, errors, "zh/03", "看答案", f"答案：{model.config.vocab_size * model.config.n_embd}。")
    screenshots(page, "zh-03")


def test_04_attention(browser, lab, model, smollm2):
    import kvlib
    from kvlib.lessons import attention

    king = "The king is dead, long live the"
    trace = kvlib.Trace()
    smollm2.forward(smollm2.encode(king), trace=trace)
    tokens = [smollm2.decode([i]) for i in smollm2.encode(king)]
    T = len(tokens)
    page, errors = open_and_run(browser, lab, "04_attention.ipynb")
    check_clean(page, errors, "04")
    check_saved(page, "04_attention.ipynb")
    body = page.locator("body").inner_text()
    assert "after 'The king is': ' a' 19%;  after 'The king is dead, long live the': ' king' 33%" in body
    assert "query heads that read the very same W_K: [[0, 1, 2], [3, 4, 5], [6, 7, 8]]" in body
    assert "' dead' takes 54% of its output from ' king'" in body  # the toy, worked by hand in test_toy_prefill.py
    toy = page.locator(".kv-step").first  # the toy's last row, part by part: a prompt's last row, not a cached step
    toy.scroll_into_view_if_needed()
    assert no_kernel_request(page, lambda: toy.locator("button", has_text="Next").click()) == 0
    assert toy.get_attribute("data-part") == "K" and "every token's key, 4 × 2" in toy.locator(".kv-explain").inner_text()
    assert "cache" not in toy.inner_text()
    grids = page.locator(".kv-att")  # the one head read aloud (layer 1, head 0), then the explorer's
    assert grids.count() == 2
    view = grids.nth(1)
    view.scroll_into_view_if_needed()
    cells = lambda: [js_num(t) for t in view.locator("td.kv-att-cell:not(.kv-masked)").all_inner_texts()]
    assert view.locator("td.kv-masked").count() == T * (T - 1) // 2  # the upper triangle, drawn empty
    shown = cells()
    for layer, head in ((10, 0), (10, 1), (20, 4), (20, "mean")):
        name = "average of heads" if head == "mean" else f"head {head}"
        frames = no_kernel_request(page, lambda: (view.locator("select.kv-att-layer").select_option(label=f"layer {layer}"),
                                                  view.locator("select.kv-att-head").select_option(label=name)))
        assert frames == 0, f"switching to layer {layer}, {name} asked the kernel"  # a short prompt sent every head
        assert (view.get_attribute("data-layer"), view.get_attribute("data-head")) == (str(layer), str(head))
        w = trace.layers[layer].weights.mean(0) if head == "mean" else trace.layers[layer].weights[head]
        now = cells()  # the lower triangle, row by row, 2 decimals
        assert len(now) == T * (T + 1) // 2 and max(abs(a - w[i, j].item()) for a, (i, j) in
                                                    zip(now, [(i, j) for i in range(T) for j in range(i + 1)])) < 6e-3
        assert now != shown, (layer, head)  # the numbers changed, not only the picture
        shown = now
        _, top, most = attention.most_attended(w[-1], tokens)
        said = re.search(r"gives most weight to (.+) \((\d\.\d\d)\)\.", view.inner_text())  # the last row, read aloud
        assert said and said.group(1) == repr(top) and abs(float(said.group(2)) - most) <= 0.0056, said  # 3 decimals, shown to 2
        shot(page, f"04-explorer-l{layer}-h{head}")
    assert no_kernel_request(page, lambda: view.locator("button.kv-att-thumb").nth(4).click()) == 0
    assert view.get_attribute("data-head") == "4" and "head 4" in view.locator(".kv-att-thumb.kv-selected").inner_text()
    j = int(trace.layers[20].weights[4, 3].argmax())  # the cell the last token weighs most
    first, second = tip(page, view.locator(f"tr.kv-att-row[data-pos='3'] td[data-col='{j}']")).splitlines()
    prefix = f"'{tokens[3]}' looks at '{tokens[j]}': "
    assert first.startswith(prefix) and second == "layer 20, head 4", first
    assert abs(js_num(first[len(prefix):]) - trace.layers[20].weights[4, 3, j].item()) < 6e-4  # 3 decimals
    assert "cannot look at" in tip(page, view.locator("tr.kv-att-row[data-pos='1'] td[data-col='2']"))
    tip(page, view.locator("th.kv-rowhead[data-pos='2']"))  # a token: its row and its column light up
    lit = 2 + 1 + T  # the row and its label, the column label and the column's T cells
    assert view.locator(".kv-linked").count() == lit and view.locator("tr.kv-att-row.kv-linked").count() == 1
    assert grids.nth(0).locator(".kv-linked").count() == lit  # and in the other view of the same run
    shot(page, "04-explorer-linked")
    steps = attention.explain(model, king, layer=0, head=0)  # the notebook's own model: Q and K as labelled matrices
    q = page.locator(".kv-view.kv-matrix").first
    assert q.locator("th.kv-rowhead").all_inner_texts() == [t.replace("\n", "↵") for t in steps.tokens]
    text = tip(page, q.locator("tr.kv-row[data-row='3'] td.kv-cell[data-j='5']"))
    assert text.startswith(f"{steps.tokens[3]!r}, dim 5: ") and abs(js_num(text.rsplit(": ", 1)[1]) - steps.Q[3, 5].item()) < 1e-4
    folded = tip(page, q.locator("tr.kv-row[data-row='3'] td.kv-gap")).splitlines()[1].split()  # dims 6 .. hs-3
    assert max(abs(js_num(a) - b) for a, b in zip(folded, steps.Q[3, 6:-2].tolist())) <= 0.0051
    assert len(folded) == steps.Q.shape[1] - 8
    settle(page, errors, "04", "switching layers and heads, hovering")
    screenshots(page, "04")


def test_zh_04_attention(browser, lab, model, smollm2):
    """The Chinese notebook 4: the toy's English tokens with Chinese words around them, the worked step and the
    attention explorer in Chinese (their buttons, explanations, menus, tooltips and the row read aloud)."""
    import kvlib
    from kvlib.lessons import attention, exercises

    king = "The king is dead, long live the"
    trace = kvlib.Trace()
    smollm2.forward(smollm2.encode(king), trace=trace)
    tokens = [smollm2.decode([i]) for i in smollm2.encode(king)]
    page, errors = open_and_run(browser, lab, "zh/04_attention.ipynb")
    check_clean(page, errors, "zh/04")
    check_saved(page, "zh/04_attention.ipynb")
    body = page.locator("body").inner_text()
    assert "' dead' 的输出有 54% 来自 ' king'" in body and "' king' 分到 2.03 / 3.76 = 0.54" in body
    toy = page.locator(".kv-step").first
    toy.scroll_into_view_if_needed()
    assert no_kernel_request(page, lambda: toy.locator("button", has_text="下一步").click()) == 0
    assert toy.get_attribute("data-part") == "K" and "每个 token 的 key，4 × 2" in toy.locator(".kv-explain").inner_text()
    assert "第 2 部分（共 7 部分）" in toy.inner_text()
    view = page.locator(".kv-att").nth(1)  # the explorer's grid
    view.scroll_into_view_if_needed()
    assert "行：发出“看”的 token（query）" in view.inner_text()
    view.locator("select.kv-att-layer").select_option(label="第 10 层")
    view.locator("select.kv-att-head").select_option(label="头 1")
    _, top, most = attention.most_attended(trace.layers[10].weights[1, -1], tokens)
    said = re.search(r"第 10 层、头 1：最后一个 token ' the' 给 (.+) 的权重最大（(\d\.\d\d)）。", view.inner_text())
    assert said and said.group(1) == repr(top) and abs(float(said.group(2)) - most) <= 0.0056, said  # 3 decimals, shown to 2
    first, second = tip(page, view.locator("tr.kv-att-row[data-pos='3'] td[data-col='1']")).splitlines()
    assert first.startswith(f"{tokens[3]!r} 看 {tokens[1]!r}：") and second == "第 10 层、头 1"
    assert tip(page, view.locator("tr.kv-att-row[data-pos='1'] td[data-col='2']")).startswith(f"{tokens[1]!r} 看不到")
    answer = exercises.REGISTRY["04.masked_weights"].answer(model)
    reveal_answer(page, errors, "zh/04", "看答案", f"答案：{answer}。")
    screenshots(page, "zh-04")


def test_a_long_prompts_grid_fetches_a_layer_once(browser, lab, smollm2):
    """SmolLM2 reading ~110 tokens: one layer's heads fill the 1 MB a view may send, so the grid holds the
    layer shown; picking another asks the kernel once (one frame) and then draws that layer's weights."""
    import nbformat

    import kvlib

    text = "Mary had a little lamb, its fleece was white as snow, and everywhere that Mary went the lamb was sure to go. " * 4
    trace = kvlib.Trace()
    smollm2.forward(smollm2.encode(text), trace=trace)
    code = f"import kvlib\nfrom kvlib.ui import views\nviews.AttentionGrid.of(kvlib.load_model('smollm2'), {text!r})"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)], metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}}), Lab.root / "long.ipynb")
    page, errors = open_and_run(browser, lab, "long.ipynb")
    settle(page, errors, "long prompt", "running it")
    view = page.locator(".kv-att").first
    n = len(smollm2.encode(text))
    assert view.locator("td.kv-att-cell").count() == n * n  # layer 0, sent with the view
    frames = no_kernel_request(page, lambda: view.locator("select.kv-att-layer").select_option(label="layer 29"))
    assert frames == 1, f"fetching layer 29 took {frames} kernel frames"
    page.wait_for_function("(v) => v.querySelectorAll('td.kv-att-cell').length > 0", arg=view.element_handle(),
                           timeout=30_000)
    j = int(trace.layers[29].weights[0, 5].argmax())
    first = tip(page, view.locator(f"tr.kv-att-row[data-pos='5'] td[data-col='{j}']")).splitlines()[0]
    assert abs(js_num(first.rsplit(": ", 1)[1]) - trace.layers[29].weights[0, 5, j].item()) < 6e-4, first
    settle(page, errors, "long prompt", "fetching layer 29")


def test_05_kv_cache_animates(browser, lab, model):
    """The grid and the cache play in the browser, one row per step (counted in the DOM), with no kernel
    request; hovers show the kernel's own numbers; hovering a token in the grid lights its rows in every
    layer of the cache, whose stack shows the new token alone climbing every layer; the worked step walks its
    seven parts."""
    import kvlib
    from kvlib.lessons.exercises.n05 import EXAMPLE  # the notebook's running example

    tiny = model  # the notebooks' default: tiny's weights
    prompt = tiny.encode(EXAMPLE)
    P, L = len(prompt), tiny.config.n_layer
    gen = kvlib.generate(tiny, prompt, 10, stop_at_eos=False)
    seq = prompt + gen.ids
    cache = tiny.new_cache()
    tiny.forward(seq[:-1], cache=cache)  # the cache after the last step: every token fed
    page, errors = open_and_run(browser, lab, "05_kv_cache.ipynb", timeout_s=400)
    check_clean(page, errors, "05")
    check_saved(page, "05_kv_cache.ipynb")
    grid, growth = page.locator(".kv-att").first, page.locator(".kv-cachegrowth").first

    grid.scroll_into_view_if_needed()
    seen, frames = play_through(page, grid, GRID_ROWS, 9)  # 10 tokens generated: 9 fed back
    assert frames == 0, "05: playing the grid sent the kernel a message"
    assert [s for s, _ in seen] == list(range(1, 10)) and all(n == P + s for s, n in seen), seen
    trace = kvlib.Trace()
    tiny.forward(seq, trace=trace)
    layer, head = int(grid.get_attribute("data-layer")), int(grid.get_attribute("data-head"))
    cell = grid.locator(f"tr.kv-att-row[data-pos='{P + 2}'] td.kv-att-cell[data-col='1']")
    w = trace.layers[layer].weights[head, P + 2, 1].item()
    text = tip(page, cell).split("\n")[0]
    assert text.startswith(f"{tiny.decode([seq[P + 2]])!r} looks at {tiny.decode([seq[1]])!r}: "), text
    assert abs(js_num(text.rsplit(": ", 1)[1]) - w) < 1e-3, (text, w)

    growth.scroll_into_view_if_needed()
    seen, frames = play_through(page, growth, CACHE_ROWS, 9)
    assert frames == 0, "05: playing the cache sent the kernel a message"
    assert [s for s, _ in seen] == list(range(1, 10)) and all(rows == [P + s] * L for s, rows in seen), seen
    per_token = 2 * L * tiny.config.n_kv_head * tiny.config.head_dim * 4
    assert growth.locator(".kv-total").inner_text() == f"{(P + 9) * per_token:,} bytes"
    stack = growth.locator(".kv-stack")  # every layer holds every token; only the one fed last climbs
    assert stack.locator(".kv-stackcell").count() == L * (P + 9)
    climbing = stack.locator(".kv-stackcell.kv-climb")
    assert climbing.count() == L and {climbing.nth(i).get_attribute("data-t") for i in range(L)} == {str(P + 8)}
    row = growth.locator(".kv-layer[data-layer='2'] .kv-kvrow[data-pos='3']")
    lines = tip(page, row).split("\n")
    assert lines[0] == f"{tiny.decode([seq[3]])!r} · position 3 · layer 2", lines
    assert lines[1].endswith(f"= {per_token // L:,} bytes"), lines
    for line, tensor in zip(lines[2:], (cache.layers[2].keys, cache.layers[2].values)):
        shown = [js_num(x) for x in line.split(": ")[1].split()]
        assert max(abs(a - b) for a, b in zip(shown, tensor[0, 3, :8].tolist())) <= 0.0051, (line, tensor[0, 3, :8])

    label = grid.locator("tr.kv-att-row[data-pos='3'] th.kv-rowhead")  # linked: the grid's ' little' ...
    label.scroll_into_view_if_needed()
    page.mouse.move(0, 0)
    assert growth.locator(".kv-linked").count() == 0  # nothing lit before the hover
    label.hover()
    lit = growth.locator(".kv-kvrow.kv-linked[data-pos='3']")  # ... lights its row in every layer of the cache
    assert lit.count() == L and growth.locator(".kv-kvrow.kv-linked").count() == L
    page.mouse.move(0, 0)
    assert growth.locator(".kv-linked").count() == 0

    for view, name in ((grid, "grid"), (growth, "cache")):  # mid-decode, a token hovered: for a person to look at
        for _ in range(4):
            view.locator("button[aria-label='step back']").click()
        assert view.get_attribute("data-step") == "5"
        view.scroll_into_view_if_needed()
        view.locator("[data-pos='3']").first.hover()
        shot(page, f"05-{name}-step5")
    page.mouse.move(0, 0)

    toy, real = page.locator(".kv-step").nth(0), page.locator(".kv-step").nth(1)
    toy.scroll_into_view_if_needed()
    parts = ["q", "K", "scores", "mask", "weights", "V", "out"]
    frames = no_kernel_request(page, lambda: [toy.locator("button", has_text="Next").click() for _ in parts[1:]])
    assert frames == 0 and toy.get_attribute("data-part") == "out"
    assert toy.locator(".kv-part.kv-current").get_attribute("data-part") == "out"
    assert [toy.locator(".kv-part.kv-input").nth(i).get_attribute("data-part") for i in range(2)] == ["weights", "V"]
    out = toy_by_hand()[-1]
    shown = [js_num(t) for t in toy.locator(".kv-part[data-part='out'] td.kv-cell").all_inner_texts()]
    assert max(abs(a - b) for a, b in zip(shown, out)) <= 0.0051, (shown, out)
    toy.locator("button", has_text="Back").click()  # the weights, mid-way: for a person to look at
    toy.locator("button", has_text="Back").click()
    shot(toy, "05-step-weights")
    toy.locator("button", has_text="Next").click()
    toy.locator("button", has_text="Next").click()
    assert toy.locator(".kv-explain").inner_text().endswith(f"= {out[0]:.2f}. One row of 2, the only new row of "
                                                            "this head's output.")
    step_trace = kvlib.Trace()
    step_cache = tiny.new_cache()
    fed = int(tiny.forward(prompt, cache=step_cache)[-1].argmax())
    tiny.forward([fed], cache=step_cache, trace=step_trace)
    text = tip(page, real.locator(".kv-part[data-part='out'] td.kv-cell[data-j='0']"))
    assert abs(js_num(text.rsplit(": ", 1)[1]) - step_trace.layers[0].out[0, 0, 0].item()) < 1e-4, text
    settle(page, errors, "05", "playing, hovering and stepping the views")
    screenshots(page, "05", (".kv-view",))


def test_06_prompt_caching(browser, lab, model):
    """Each new row's chips are the kernel's receipt and blocks (the notebook's streams, replayed here on the same
    model and clock); a chip's tooltip shows its tokens and hash; after Fast-forward the stored blocks show expired.
    The budget stream shows the blocks it evicted; the timestamp divergence shares more tokens with the stamps last."""
    import json

    import kvlib
    from browser import REPO
    from kvlib.lessons import memory, tokenization
    from kvlib.server.prompt_cache import ManualClock
    from kvlib.ui import widgets

    cells = json.loads((REPO / "notebooks" / "06_prompt_caching.ipynb").read_text())["cells"]
    code = lambda marker: next("".join(c["source"]) for c in cells if marker in "".join(c["source"]))
    replay = {"kvlib": kvlib, "memory": memory, "widgets": widgets, "ManualClock": ManualClock, "model": model}
    exec(code("stream = widgets.PromptCacheStream"), replay)  # the notebook's stream, its first four requests sent
    exec(code("small = widgets.PromptCacheStream"), replay)  # the budget stream, all its requests sent
    mirror = replay["stream"]
    page, errors = open_and_run(browser, lab, "06_prompt_caching.ipynb", timeout_s=400)
    check_clean(page, errors, "06")
    check_saved(page, "06_prompt_caching.ipynb")
    send, forward = "button:has-text('Send next request')", "button:has-text('Fast-forward')"
    stream = page.locator(".widget-vbox").filter(has=page.locator(send)).first  # the first stream app
    view = stream.locator(".kv-blocks")
    stream.scroll_into_view_if_needed()
    for button in (send, forward):  # every label whole: the text fits its button
        assert stream.locator(button).evaluate("b => b.scrollWidth <= b.clientWidth"), f"06: {button} is cut short"
    rows = view.locator("tr.kv-request")
    assert rows.count() == 4  # the four requests the notebook sent

    for k, label in ((4, "system + question 3"), (5, "first token changed")):
        stream.locator(send).click()
        page.wait_for_function("([el, n]) => el.querySelectorAll('tr.kv-request').length === n",
                               arg=[view.element_handle(), k + 1], timeout=30_000)
        settle(page, errors, "06", f"Send next request ({label})")
        mirror.send()
        sent, request = mirror.results[k], mirror.requests[k]
        tenant, r, prompt = sent.tenant, sent.prefill.receipt, request.prompt
        row = rows.nth(k)
        field = {td.get_attribute("data-field"): td.inner_text().strip() for td in row.locator("td").all()}
        n_in, cached, written = (int(field[f].replace(",", "")) for f in ("input", "cached", "written"))
        assert (field["label"], field["tenant"]) == (label, tenant) == (request.label, "acme")
        assert (n_in, cached, written) == (r.input_tokens, r.cached_tokens, r.written_tokens), label
        # the shared system prompt is a hit in whole blocks; a changed first token hits nothing
        assert (cached > 0 and cached % 16 == 0) if k == 4 else cached == 0, (label, cached)
        cost = float(field["cost"].replace(",", ""))
        assert abs(cost - (n_in - 0.9 * cached)) < 0.06, (label, cost)  # GPT-5's ratios: a cached token costs 0.1
        assert f"{cached} of {n_in} tokens cached" in stream.inner_text()
        ids = model.encode(prompt)
        spans = mirror.pc.spans(len(ids))
        keys = mirror.pc.block_keys(ids, tenant, spans)
        chips = row.locator(".kv-block")
        assert chips.evaluate_all("cs => cs.map(c => c.dataset.state)") == r.blocks, label
        assert chips.evaluate_all("cs => cs.map(c => c.dataset.hash)") == [key[:8].hex() for key in keys], label
        for j in (0, len(spans) - 1):  # hover a chip: its tokens and the first bytes of its hash
            (a, e), text = spans[j], tip(page, chips.nth(j))
            assert "'" + model.decode(ids[a:e]).replace("\n", "↵") + "'" in text, (label, j, text)  # newlines shown
            assert keys[j][:8].hex(" ") in text and f"tokens {a}–{e - 1}" in text, (label, j, text)
    held = {key[:8].hex() for key in mirror.pc.index}
    assert len(held) == int(re.search(r"cache holds (\d+) blocks", view.inner_text()).group(1)) > 0
    assert set(rows.locator(".kv-block:has(.kv-ttl)").evaluate_all("cs => cs.map(c => c.dataset.hash)")) == held
    stream.locator(forward).click()
    page.wait_for_function("(el) => el.innerText.includes('blocks expired')", arg=stream.element_handle(),
                           timeout=30_000)
    settle(page, errors, "06", "Fast-forward")
    text = stream.inner_text()
    assert f"{len(held)} blocks expired" in text and "cache holds 0 blocks" in text, text[:400]
    assert view.locator(".kv-ttl").count() == 0  # no block is stored any more: every one shows it went
    assert set(rows.locator(".kv-block.kv-gone").evaluate_all("cs => cs.map(c => c.dataset.hash)")) == held
    mirror.fast_forward()
    gone = rows.locator(".kv-block.kv-gone").first
    assert f"expired at {mirror.pc.clock():,.0f} s" in tip(page, gone)
    check_budget_stream(page, errors, page.locator(".widget-vbox").filter(has=page.locator(send)).nth(1), replay["small"])

    def stamps_last(a, b):  # "[2026-11-30 09:00] You are ..." -> "You are ... [2026-11-30 09:00]"
        return tuple(" ".join(reversed(re.fullmatch(r"(\[[^]]*\]) (.*)", p, re.S).groups())) for p in (a, b))

    div = page.locator(".widget-vbox").filter(has_text="Prompt B").first
    first, last = check_divergence(page, errors, "06", div, tokenization.for_model(model), stamps_last)
    assert last > first  # the lesson: a timestamp at the end leaves the prefix before it to the cache
    screenshots(page, "06")


def check_budget_stream(page, errors, app, mirror):
    """The stream under a byte budget: each row is the mirror's receipt, the blocks evicted show gone (hover:
    evicted, when), Send says all are sent, Fast-forward expires what is held."""
    from kvlib.ui.views.blocks import GONE

    app.scroll_into_view_if_needed()
    rows = app.locator(".kv-blocks tr.kv-request")
    assert rows.count() == len(mirror.results) == len(mirror.requests)
    for k, sent in enumerate(mirror.results):
        label, tenant, gone, r = sent.label, sent.tenant, sent.gone, sent.prefill.receipt
        field = {td.get_attribute("data-field"): td.inner_text().strip() for td in rows.nth(k).locator("td").all()}
        assert (field["label"], field["tenant"], field["gone"]) == (label, tenant, str(len(gone) or "")), field
        assert [int(field[f].replace(",", "")) for f in ("input", "cached", "written")] == \
            [r.input_tokens, r.cached_tokens, r.written_tokens], label
        assert rows.nth(k).locator(".kv-block").evaluate_all("cs => cs.map(c => c.dataset.state)") == r.blocks, label
    held = {key[:8].hex() for key in mirror.pc.index}
    evicted = {e.key[:8].hex(): e for e in mirror.pc.events if e.kind == "evict"}
    # each row as it was left: a block evicted is struck in the row that last used it, even if written again since
    for k, q in enumerate(mirror.view.requests):
        struck = rows.nth(k).locator(".kv-block").evaluate_all("cs => cs.map(c => c.classList.contains('kv-gone'))")
        assert struck == [b["then"] is not None and "gone" in b["then"] for b in q["blocks"]], q["label"]
    shown = rows.locator(".kv-block.kv-gone")
    assert evicted and set(shown.evaluate_all("cs => cs.map(c => c.dataset.hash)")) == set(evicted)
    e = evicted[shown.first.get_attribute("data-hash")]
    maker = next(q["label"] for q in mirror.view.requests if q["at"] == e.time)  # the request it made room for
    hover = tip(page, shown.first)
    assert f"{GONE[e.kind]} at {e.time:,.0f} s, before any later request used it" in hover
    assert f"evicted to make room for {maker}" in hover and f"to make room for {maker}" in mirror.view.summary()
    assert rows.locator(".kv-block.kv-gone .kv-ttl").count() == 0  # a struck chip shows no time to live
    rewritten = [h for h in shown.evaluate_all("cs => cs.map(c => c.dataset.hash)") if h in held]
    if rewritten:  # evicted, then written again by a later request: struck in the old row, whole in the new one
        old = rows.locator(f".kv-block.kv-gone[data-hash='{rewritten[0]}']").first
        assert "written again since" in tip(page, old)
        assert rows.locator(f".kv-block:not(.kv-gone)[data-hash='{rewritten[0]}']").count() > 0
    app.locator("button:has-text('Send next request')").click()
    page.wait_for_function("(el) => el.innerText.includes('All requests sent.')", arg=app.element_handle(),
                           timeout=30_000)
    settle(page, errors, "06", "Send next request on the budget stream, all sent")
    app.locator("button:has-text('Fast-forward')").click()
    page.wait_for_function("([el, n]) => el.innerText.includes(`${n} blocks expired`)", arg=[app.element_handle(), len(held)],
                           timeout=30_000)
    settle(page, errors, "06", "Fast-forward on the budget stream")
    assert held and app.locator(".kv-ttl").count() == 0 and "cache holds 0 blocks" in app.inner_text()


def test_07_long_context_memory(browser, lab):
    import re

    from kvlib.lessons import memory

    page, errors = open_and_run(browser, lab, "07_long_context_memory.ipynb", timeout_s=400)
    check_clean(page, errors, "07")
    check_saved(page, "07_long_context_memory.ipynb")
    app = page.locator(".widget-vbox").filter(has_text="per batch of").first
    app.scroll_into_view_if_needed()

    def shown():  # (context, batch, bytes) as the calculator prints them
        m = re.search(r"per sequence of ([\d,]+) tokens.*per batch of (\d+): ([\d,]+) bytes", app.inner_text(), re.S)
        return tuple(int(g.replace(",", "")) for g in m.groups())

    assert shown() == (131072, 1, memory.kv_bytes(memory.CATALOGUE["Llama-3.1-8B"], 131072))  # the app's default
    app.locator("select").first.select_option("Gemma-2-9B")
    # wait for the kernel's report's heading, not the bare name: the <select>'s own options already say it
    heading = f"Gemma-2-9B: {memory.CATALOGUE['Gemma-2-9B'].n_layer} layers"
    page.wait_for_function("([el, s]) => el.innerText.includes(s)", arg=[app.element_handle(), heading], timeout=30_000)
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
    shot(page, "07-calculator")
    screenshots(page, "07")


@pytest.mark.engine  # its engine cells run
def test_08_serving(browser, lab, model):
    """The timeline draws the kernel's schedule: each cell's request and kind are those the scheduler gives the same
    seeded stream on the same model (who runs when depends on the seed, never on the clock); a hover names the
    request and lights its cells in both runs, without asking the kernel. The engine's cells ran (make test builds
    it) and set its count of reused tokens beside kvlib's. An exercise typed right, then wrong."""
    from kvlib.server import serving

    page, errors = open_and_run(browser, lab, "08_serving.ipynb", timeout_s=500)
    check_clean(page, errors, "08")
    check_saved(page, "08_serving.ipynb")
    stream = serving.request_stream(model, 16, seed=0)
    view = page.locator(".kv-view").filter(has=page.locator(".kv-sv-run")).first
    view.scroll_into_view_if_needed()
    runs = {policy: serving.serve(model, stream, policy, max_batch=4, prefix_caching=False)  # as section 2 runs it
            for policy in serving.POLICIES}
    for policy, run in runs.items():
        grid = view.locator(f".kv-sv-run[data-policy='{policy}']")
        shown = grid.locator("td.kv-sv-cell").evaluate_all(
            "cs => cs.map(c => [+c.dataset.step, +c.dataset.slot, c.dataset.kind, "
            "c.dataset.request === undefined ? null : +c.dataset.request])")
        expected = [[k, slot, c[1] if c else "idle", c[0] if c else None]
                    for k, step in enumerate(run.steps) for slot, c in enumerate(step.cells)]
        assert sorted(shown) == sorted(expected), policy
        assert f"{len(run.steps)} steps" in grid.locator(".kv-sv-figures").inner_text(), policy
        assert f"{run.blocks_allocated} allocated, {run.blocks_freed} freed" in grid.inner_text(), policy
    assert len(runs["continuous"].steps) < len(runs["static"].steps)

    i = max(range(len(stream)), key=lambda j: stream[j].max_new_tokens)  # the longest answer: many cells to light
    s = runs["continuous"].served[i]
    cell = view.locator(f".kv-sv-run[data-policy='continuous'] td[data-request='{i}'][data-kind='decode']").first
    step, slot = cell.get_attribute("data-step"), cell.get_attribute("data-slot")
    text = {}
    assert no_kernel_request(page, lambda: text.update(tip=tip(page, cell))) == 0
    assert f"request {stream[i].label} · continuous batching · step {step} · slot {slot}" in text["tip"], text
    assert f"answer {stream[i].max_new_tokens} tokens" in text["tip"] and int(slot) == s.slot, text
    assert view.locator(".kv-sv-cell.kv-linked").count() == 2 * stream[i].max_new_tokens  # its cells, in both runs
    shot(view, "08-timeline")

    # section 3's timeline: every user after the first read the system prompt's blocks (↺), only with the index
    cached = page.locator(".kv-view").filter(has=page.locator(".kv-sv-run[data-name$=', prefix caching']")).first
    on = cached.locator(".kv-sv-run[data-name='continuous batching, prefix caching'] td[data-kind='prefill']")
    assert on.all_inner_texts().count("▸A") == 1 and sum(t.startswith("↺") for t in on.all_inner_texts()) == 7
    off = cached.locator(".kv-sv-run[data-name='continuous batching, no prefix caching'] td[data-kind='prefill']")
    assert all(t.startswith("▸") for t in off.all_inner_texts()) and off.count() == 8
    # the engine's cells ran: its reused count beside kvlib's, for the same eight users
    out = page.locator(".jp-CodeCell").filter(has_text="engine_reused = ").locator(".jp-OutputArea").inner_text()
    found = re.search(r"llama-server reused (\d+) tokens of each prompt.*kvlib's server read (\d+)", out)
    assert "skipped" not in out and found, out
    engine_reused, kvlib_reused = map(int, found.groups())  # to the token, and whole blocks of 16 within it
    assert kvlib_reused % 16 == 0 and 0 <= engine_reused - kvlib_reused < 16 and kvlib_reused >= 64, out
    slots = page.locator(".jp-CodeCell").filter(has_text="par.table()").locator(".jp-OutputArea").inner_text()
    assert "skipped" not in slots and "in the other's slot, only the 500 tokens both share" in slots, slots
    check_typed_exercise(page, errors, "08.shared_blocks", 15, 32)
    screenshots(page, "08")
