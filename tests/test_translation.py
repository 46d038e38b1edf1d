"""The Chinese course kept in step with the English (tools/translation.py), and kvlib speaking the notebook's
language (kvlib/i18n.py): what a learner reads from kvlib is Chinese after set_language("zh"), English otherwise."""

import json
import re
import shutil
import string
import sys
from pathlib import Path

import pytest

import kvlib
from kvlib import i18n
from kvlib.lessons import embeddings, exercises, tokenization
from kvlib.ui import widgets

REPO = Path(__file__).parent.parent
sys.path.insert(0, str(REPO / "tools"))
import translation  # noqa: E402

TRANSLATIONS = sorted((REPO / "notebooks").glob("*/*.ipynb"))


@pytest.fixture
def zh():
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def test_there_is_a_translation():
    assert "zh/02_tokens.ipynb" in [p.relative_to(REPO / "notebooks").as_posix() for p in TRANSLATIONS]  # the tests' copy


@pytest.mark.parametrize("path", TRANSLATIONS, ids=lambda p: p.parent.name + "/" + p.stem)
def test_each_translation_is_in_step_with_the_english(path):
    assert translation.stale(path) == []


HAN = "[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]"


@pytest.mark.parametrize("path", TRANSLATIONS, ids=lambda p: p.parent.name + "/" + p.stem)
def test_no_line_breaks_between_two_chinese_characters(path):
    """A browser shows a line break inside a paragraph as a space, which between two Chinese characters reads as a
    gap in a word (JupyterLab and the site alike): a Chinese paragraph is one line."""
    breaks = [(i, m.group(0)) for i, cell in enumerate(translation.read(path)["cells"]) if cell["cell_type"] == "markdown"
              for m in re.finditer(HAN + "\n(?![-*>#|`]|\\d+\\. )" + HAN, translation.source(cell))]
    assert breaks == [], f"{path.name}: line breaks inside Chinese text (cell, characters): {breaks[:5]}"


@pytest.fixture
def copy(tmp_path):
    """notebooks/02_tokens.ipynb and its translation, copied: -> (English path, translation path)."""
    (tmp_path / "zh").mkdir()
    en, zh = tmp_path / "02_tokens.ipynb", tmp_path / "zh" / "02_tokens.ipynb"
    shutil.copy(REPO / "notebooks" / en.name, en)
    shutil.copy(REPO / "notebooks" / "zh" / zh.name, zh)
    return en, zh


def edit(path, i, change):  # change cell i's source (a str -> a str) in the notebook at path
    nb = translation.read(path)
    nb["cells"][i]["source"] = translation.lines(change(translation.source(nb["cells"][i])))
    translation.write(path, nb)


def test_an_edited_english_markdown_cell_is_named_until_its_translation_is_marked(copy):
    en, zh = copy
    i = next(k for k, c in enumerate(translation.read(en)["cells"]) if translation.source(c).startswith("## Same text"))
    edit(en, i, lambda s: s + "\nA sentence the translation does not have yet.")
    problems = translation.stale(zh)
    assert len(problems) == 1 and f"cell {i} ('## Same text, same ids: where do two prompts part ')" in problems[0]
    assert "the English changed" in problems[0]
    assert translation.main(["check", str(zh)]) == 1
    edit(zh, i, lambda s: s + "\n译文也补上了这一句。")  # the translator updates it, then marks it
    translation.mark(zh, [i])
    assert translation.stale(zh) == [] and translation.main(["check", str(zh)]) == 0


def test_a_replacement_the_english_code_no_longer_has_is_named(copy):
    en, zh = copy
    edit(en, 22, lambda s: s.replace('running + " queen"', 'running + " prince"'))
    problems = translation.stale(zh)
    assert len(problems) == 1 and "cell 22 ('div = widgets.Divergence" in problems[0] and "0 times" in problems[0]


def test_an_english_code_change_reaches_the_translation_by_sync(copy):
    en, zh = copy
    edit(en, 25, lambda s: s.replace("== text\n", "== text, text\n"))
    assert ["cell 25" in p and "`sync` writes it" in p for p in translation.stale(zh)] == [True]
    assert translation.sync(zh) == []
    assert "== text, text\n" in translation.source(translation.read(zh)["cells"][25])


def test_a_code_cell_edited_in_the_translation_alone_is_named(copy):
    _, zh = copy
    edit(zh, 2, lambda s: s + "\nprint('只在中文版里')")
    assert ["cell 2" in p for p in translation.stale(zh)] == [True]


def test_a_cell_added_to_the_english_is_named(copy):
    en, zh = copy
    nb = translation.read(en)
    nb["cells"].insert(3, {"cell_type": "markdown", "id": "new", "metadata": {}, "source": ["A new paragraph."]})
    translation.write(en, nb)
    assert ["cells' kinds" in p for p in translation.stale(zh)] == [True]


def test_a_new_translation_starts_untranslated(tmp_path):
    (tmp_path / "zh").mkdir()
    shutil.copy(REPO / "notebooks" / "02_tokens.ipynb", tmp_path)
    problems = translation.sync(tmp_path / "zh" / "02_tokens.ipynb")
    markdown = [c for c in translation.read(tmp_path / "02_tokens.ipynb")["cells"] if c["cell_type"] == "markdown"]
    assert len(problems) == len(markdown) and all(p.endswith("not translated yet") for p in problems)


def fields(text):
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_entry_has_each_language_with_the_same_blanks():
    for key, entry in i18n.TEXT.items():
        assert entry.keys() == i18n.LANGUAGES.keys(), key
        assert fields(entry["zh"]) == fields(entry["en"]), key


def test_an_unknown_language_is_refused():
    with pytest.raises(ValueError, match="en, zh"):
        kvlib.set_language("fr")


def checked_exercises(path):
    text = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    return re.findall(r"exercises\.check\(\s*\"([^\"]+)\"", text)


def wrong_loop(model, prompt_ids, n):  # feeds one cache as a cached loop does, and returns wrong ids
    model.forward(prompt_ids, cache=model.new_cache())
    return [10**6]


@pytest.mark.parametrize("path", TRANSLATIONS, ids=lambda p: p.parent.name + "/" + p.stem)
def test_a_translated_notebooks_exercises_speak_its_language(path, tiny):
    language = path.parent.name
    ids = checked_exercises(path)
    assert ids
    i18n.set_language(language)
    try:
        for id in ids:
            ex = exercises.REGISTRY[id]
            assert isinstance(ex.hint, dict) and language in ex.hint and language in ex.explain, id
            if ex.uses != ("model",):  # one on SmolLM2 or random-gpt2: its words are checked above, not run here
                continue
            if ex.run is not None:  # it takes the learner's function: what the run saw is said in the language too
                said = exercises.check(id, 10**6, tiny).verdict.value  # the ids, not the function
                assert ex.run(10**6, tiny)[1][language] in said.replace("&quot;", '"')
            wrong = exercises.check(id, 10**6 if ex.run is None else wrong_loop, tiny)
            assert ex.hint[language] in wrong.verdict.value.replace("&#x27;", "'")
            wrong.show_answer()
            assert "答案" in wrong.answer.value and "Answer" not in wrong.answer.value
    finally:
        i18n.set_language("en")


def test_the_token_apps_speak_chinese_and_english(tiny, zh):
    app = widgets.Tokens(tiny, "轩辕家养了一只虎皮鹦鹉")
    strip = app.strips[0]
    assert strip.title == f"tiny（当前加载的模型）：11 个字符（33 个字节）切成 {len(tiny.encode('轩辕家养了一只虎皮鹦鹉'))} 个 token"
    assert strip.words == {"position": "位置", "byte": "字节", "bytes": "字节", "parted": "两个提示词从这里开始不同"}
    assert app.text.description == "文本"
    div = widgets.Divergence(tiny, "轩辕家养了一只虎皮鹦鹉", "轩辕家养了一只小猫")
    assert div.a.description == "提示词 A" and div.note.value.startswith(f"前 {div.index} 个 token 相同")
    i18n.set_language("en")
    assert widgets.Tokens(tiny, "Will").strips[1].words["position"] == "position"
    assert tokenization.for_model(tiny).name == "tiny (the loaded model)"


def test_the_embedding_map_and_its_app_speak_chinese_and_english(tiny, zh):
    app = widgets.EmbeddingSpace(tiny)
    families = embeddings.word_families(tiny)
    assert set(app.view.labels) == {i18n.t("family." + f) for f in families} and "亲属和爵位" in app.view.labels
    assert app.view.words["project"] == "投影到 " and app.word.description == "找近邻"
    assert app.neighbour_view.value.startswith("离 <code>&#x27; king&#x27;</code> 最近的 token（余弦相似度）：")
    lookup = widgets.Lookup(tiny, "The king")
    assert [label for label, _ in lookup.mode.options] == ["token id", "嵌入行"]
    lookup.mode.value = "embedding rows"
    assert lookup.info.value.startswith("从形状为 (") and lookup.view.title == "嵌入行（每个 token 一行）"
    i18n.set_language("en")
    assert widgets.EmbeddingSpace(tiny).view.labels[0] == next(iter(families))  # English: the families' own names


def test_every_family_of_words_has_its_names():
    assert all("family." + f in i18n.TEXT for f in embeddings.WORD_FAMILIES)


def test_the_prompt_cache_stream_speaks_chinese_and_english(tiny, zh):
    """Notebook 6's app, its blocks view, the price list and the seat list in Chinese; the same app in English."""
    from kvlib.lessons import pricing
    from kvlib.server.prompt_cache import ManualClock
    from kvlib.texttable import width
    from kvlib.ui.views import PromptBlocks

    system = "你是迫克，一个乐于助人的小精灵。" * 4
    pc = kvlib.PromptCache(tiny, block_size=16, ttl_seconds=300, clock=ManualClock())
    app = widgets.PromptCacheStream(pc, [("问题 1", "acme", system + "什么是爱？"), ("问题 2", "acme", system + "为什么？")])
    app.send(), app.send()
    r = app.results[1].prefill.receipt
    assert r.cached_tokens > 0
    assert (app.next.description, app.forward.description) == ("发送下一个请求", "快进 6 分钟")
    assert app.status.value.startswith(f"已发送 <b>问题 2</b>：{r.input_tokens} 个 token 里 {r.cached_tokens} 个来自缓存")
    view = app.view
    assert view.words["hit"] == "命中：从缓存里读出" and view.words["col.tenant"] == "租户"
    assert view.words["seconds"] == "{t} 秒"  # the tooltips' and the table's times (blocks.js fills it)
    assert view.title.startswith(f"自动缓存 · TTL 300 秒 · 每块 16 个 token · 缓存里有 {len(pc.index)} 个块")
    assert f"  问题 1 → {r.cached_tokens // 16} 个块在 10 秒时被“问题 2”再次读取" in view.summary()
    held = len(pc.index)
    app.fast_forward()
    assert app.status.value == f"时钟已越过 TTL：{held} 个块过期了；缓存里现在有 0 个块。"
    table = pricing.table(pricing.EXPLICIT).splitlines()
    assert table[0].split() == ["服务商", "模式", "读", "写", "最少", "token", "命中的单位", "闲置保留"]
    assert len({width(line) for line in table[:4]}) == 1  # a Chinese character takes two columns: the rows line up
    assert "reads 0.1x" in table[-2]  # the sources as published, with their dates
    assert pricing.seat_prices(1) == "1 号座：B 排，6 先令。"
    i18n.set_language("en")
    assert widgets.PromptCacheStream(pc, []).next.description == "Send next request"
    assert PromptBlocks(pc).words["hit"] == "hit: read from the cache"
    assert pricing.seat_prices(1) == "Seat 1: row B, 6 shillings."


def test_the_chat_and_the_loops_pictures_speak_chinese(tiny, zh):
    from kvlib.lessons.loop import feed_loop
    from kvlib.ui import plots

    chat = widgets.Chat(tiny, "从前有座山，山里有座庙，庙里", max_new_tokens=6)
    assert (chat.prompt.description, chat.max_tokens.description, chat.send.description) == ("提示词", "token 上限", "发送")
    assert chat.status.value.startswith("模型：<b>tiny</b>。温度为 0 是贪心解码")
    chat.send.click()
    chat.wait(60)
    assert chat.last.stop_reason == "已写满 max_new_tokens（6 个）" and len(chat.last.ids) == 6
    assert chat.status.value.startswith("tiny：6 个 token，用时 ") and chat.status.value.endswith("停止原因：已写满 max_new_tokens（6 个）")
    runs = [feed_loop(tiny, "To be", 2, "prompt only")]
    fig = plots.feed_variants(runs)
    assert fig._suptitle.get_text().startswith("每种循环喂给模型的是什么")
    assert fig.axes[0].get_title(loc="left") == "喂入：只有提示词"
    assert [tick.get_text() for tick in fig.axes[0].get_yticklabels()] == ["第 1 步：读 2 个", "第 2 步：读 2 个"]
    i18n.set_language("en")
    assert widgets.Chat(tiny).send.description == "Send" and plots.feed_variants(runs).axes[0].get_title(loc="left") == "feed: prompt only"


def test_in_chinese_a_finished_request_still_gives_its_blocks_back(tiny, zh):
    """Stops are codes that code compares; only their words are translated: under Chinese, serving, batching and
    the prompt cache end each request where English does and release its blocks, and its words are Chinese."""
    from kvlib.server import serving
    from kvlib.server.generate import generate_batch

    pc = kvlib.PromptCache(tiny, block_size=4)
    answer = pc.answer(tiny.encode("The king is dead, long live the"), max_new_tokens=3)
    assert answer.stop == "max_new_tokens" and answer.stop_reason == "已写满 max_new_tokens（3 个）"
    assert pc.cache.pool.in_use == 0 and pc.cache.pool.cached > 0  # released, its prompt's full blocks kept
    requests = serving.request_stream(tiny, 6, seed=1, max_len=96)
    run = serving.serve(tiny, requests, max_batch=2)
    assert [len(s.ids) for s in run.served] == [r.max_new_tokens for r in requests]  # each ran to its end
    assert run.blocks_in_use == 0 and run.blocks_allocated == run.blocks_freed + run.blocks_cached
    gens = generate_batch(tiny, ["The king is dead", "long live the"], 4)
    assert [g.stop for g in gens] == ["max_new_tokens", "max_new_tokens"]
