"""The course's languages: one switch, `set_language("zh")` in a notebook's first cell, and one table.

What a learner reads that kvlib writes, beside the notebook's own prose (exercise verdicts, the apps' and
views' labels, lines kvlib prints), has one entry in `TEXT`: its English and its Chinese side by side,
formatted by `t(key, **values)` in the language set. A view gets its words as plain data in its state
(`words(prefix)`), so its JS holds no language. Error messages stay English: they name code.
A string not in the table yet is English in every language (notebooks 1, 3-8 are not translated yet).
"""

LANGUAGES = {"en": "English", "zh": "简体中文"}
_language = "en"  # module state, like matplotlib's rcParams: set once per notebook, read by whatever prints


def set_language(code):
    """Set the language kvlib speaks in this kernel: "en" (the default) or "zh" (Simplified Chinese)."""
    global _language
    if code not in LANGUAGES:
        raise ValueError(f"no language {code!r}: choose one of {', '.join(LANGUAGES)}")
    _language = code


def language():
    return _language


def t(key, **values):
    """The entry `key` in the language set, its {names} filled from values."""
    return local(TEXT[key]).format(**values)


def local(text):
    """A text given per language ({"en": ..., "zh": ...}) -> the one to show now; a plain str is every language's."""
    return text.get(_language, text["en"]) if isinstance(text, dict) else text


def words(prefix):
    """Every entry under "prefix." in the language set, keyed by the rest of its name: a view's labels."""
    return {key[len(prefix) + 1:]: local(text) for key, text in TEXT.items() if key.startswith(prefix + ".")}


TEXT = {
    # exercises (kvlib/exercises): the verdict on a prediction
    "check.pending": {"en": "✏️ Replace <code>...</code> with your prediction, then run this cell again.",
                      "zh": "✏️ 把 <code>...</code> 换成你的预测，再运行这个单元格。"},
    "check.right": {"en": "✅ <b>Right.</b>", "zh": "✅ <b>答对了。</b>"},
    "check.wrong": {"en": "❌ <b>Not quite</b> (you said {guess}). Hint: {hint}",
                    "zh": "❌ <b>还不对</b>（你的答案是 {guess}）。提示：{hint}"},
    "check.reveal": {"en": "Show the answer", "zh": "看答案"},
    "check.answer": {"en": "<b>Answer:</b> <code>{answer}</code>. {why}", "zh": "<b>答案：</b><code>{answer}</code>。{why}"},
    # tokenization and the token apps (notebook 2)
    "tokenizer.loaded": {"en": "{model} (the loaded model)", "zh": "{model} (当前加载的模型)"},
    "strip.title": {"en": "{name}: {tokens} tokens for {chars} characters ({bytes} bytes)",
                     "zh": "{name}：{chars} 个字符（{bytes} 字节）切成 {tokens} 个 token"},
    "tokens.position": {"en": "position", "zh": "位置"},
    "tokens.byte": {"en": "byte", "zh": "字节"},
    "tokens.bytes": {"en": "bytes", "zh": "字节"},
    "tokens.parted": {"en": "the prompts part here", "zh": "两个提示词从这里开始不同"},
    "strip.differs": {"en": "‖ differs from here:", "zh": "‖ 从这里开始不同："},
    "app.text": {"en": "Text", "zh": "文本"},
    "app.prompt_a": {"en": "Prompt A", "zh": "提示词 A"},
    "app.prompt_b": {"en": "Prompt B", "zh": "提示词 B"},
    "divergence.parted": {"en": "the first {shared} tokens are shared; they differ from token {index} on "
                                "(a red bar, then dashed outlines)",
                          "zh": "前 {shared} 个 token 相同；从第 {index} 个 token 起不同（红色竖线之后是虚线框）"},
    "divergence.same": {"en": "the same tokens: all {shared} shared", "zh": "token 完全相同：{shared} 个全部共享"},
    "divergence.prefix": {"en": "one is a prefix of the other: {shared} tokens shared",
                          "zh": "一个是另一个的前缀：共享 {shared} 个 token"},
    "plot.ratios.ylabel": {"en": "tokens, × {baseline}", "zh": "token 数，{baseline}的几倍"},
    "plot.ratios.title": {"en": "The same sentence costs more tokens in some languages (dashed: as many as in {baseline})",
                          "zh": "同一句话，有的语言要多花好几倍 token（虚线：和{baseline}一样多）"},
}
