"""The course's languages: one switch, `set_language("zh")` in a notebook's first cell, and one table.

What a learner reads that kvlib writes, beside the notebook's own prose (exercise verdicts, the apps' and
views' labels, lines kvlib prints), has one entry in `TEXT`: its English and its Chinese side by side,
formatted by `t(key, **values)` in the language set. A view gets its words as plain data in its state
(`words(prefix)`), so its JS holds no language. Error messages stay English: they name code.
A string not in the table is English in every language.
"""

import math

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


def named(kind, name):
    """A name kvlib gives (a provider, a router, a word family) as the learner reads it: TEXT["kind.name"] in the language set;
    a name of the learner's own, which TEXT does not hold, as they gave it."""
    return t(f"{kind}.{name}") if f"{kind}.{name}" in TEXT else name


def local(text, language=None):
    """A text given per language ({"en": ..., "zh": ...}) -> the one to show now (or in `language`); a plain str is
    every language's."""
    return text.get(language or _language, text["en"]) if isinstance(text, dict) else text


def magnitude(n):
    """A large count (of multiply-adds) as the learner reads it: in English in millions ("37.9 million"), as the
    English lessons count work; in Chinese in 万, 亿 or 万亿, to three significant figures ("3790 万")."""
    if _language != "zh":
        return f"{n / 1e6:,.1f} million"
    if n == 0:
        return "0"
    n = round(n, 2 - math.floor(math.log10(abs(n))))  # rounded first, so 9999.6 万 becomes 1 亿, not 10000 万
    size, unit = next(((size, unit) for size, unit in ((1e12, " 万亿"), (1e8, " 亿"), (1e4, " 万")) if abs(n) >= size),
                      (1, ""))
    value = n / size
    return f"{value:.{max(2 - math.floor(math.log10(abs(value))), 0)}f}{unit}"


def words(prefix, language=None):
    """Every entry under "prefix." in the language set (or in `language`: a static page's, kvlib/tools/site.py), keyed by
    the rest of its name: a view's labels."""
    return {key[len(prefix) + 1:]: local(text, language) for key, text in TEXT.items() if key.startswith(prefix + ".")}


TEXT = {
    # exercises (kvlib/lessons/exercises): the verdict on a prediction, or on what a learner's own code computed
    "check.pending": {"en": "✏️ Replace <code>...</code> with your answer, then run this cell again.",
                      "zh": "✏️ 把 <code>...</code> 换成你的答案，再运行这个单元格。"},
    "check.right": {"en": "✅ <b>Right.</b>", "zh": "✅ <b>答对了。</b>"},
    "check.wrong": {"en": "❌ <b>Not quite</b> (you said {guess}). Hint: {hint}",
                    "zh": "❌ <b>还不对</b>（你的答案是 {guess}）。提示：{hint}"},
    "check.reveal": {"en": "Show the answer", "zh": "看答案"},
    "check.answer": {"en": "<b>Answer:</b> <code>{answer}</code>. {why}", "zh": "<b>答案：</b><code>{answer}</code>。{why}"},
    # kvlib.load_model with no model named and no GPT-2 downloaded (models.default_name)
    "models.bundled_tiny": {"en": "kvlib: using the bundled 'tiny' Shakespeare model; for real GPT-2 run `{hint}`",
                            "zh": "kvlib：正在使用自带的莎士比亚小模型 tiny；想用真正的 GPT-2，请运行 `{hint}`"},
    # notebook 1: the generation loop's pictures, its chat app, and why generate stopped
    "plot.loop.text": {"en": "text", "zh": "文本"},
    "plot.loop.tokens": {"en": "tokens\n(ids)", "zh": "token\n（id）"},
    "plot.loop.embeddings": {"en": "embeddings\n(+ position)", "zh": "嵌入向量\n（+ 位置）"},
    "plot.loop.layers": {"en": "{n} layers:\nattention +\nfeed-forward", "zh": "{n} 层：\n注意力 +\n前馈网络"},
    "plot.loop.probs": {"en": "next-token\nprobabilities", "zh": "下一个 token\n的概率"},
    "plot.loop.pick": {"en": "pick one\ntoken", "zh": "挑出一个\ntoken"},
    "plot.loop.back": {"en": "append the token to the sequence and feed it all back in, until an end token or a limit",
                       "zh": "把这个 token 接在后面，整段重新喂回模型，直到遇上结束 token 或达到上限"},
    "plot.step": {"en": "step {step}: {n} in", "zh": "第 {step} 步：读 {n} 个"},
    "plot.growth.title": {"en": "Without a cache every step feeds the whole sequence again (blue: prompt, "
                                "beige: tokens generated so far, orange: the token this step picks)",
                          "zh": "没有缓存时，每一步都把整段重新喂一遍（蓝：提示词，米黄：已经生成的 token，橙：这一步挑出的 token）"},
    "plot.feeds.whole": {"en": "feed: whole", "zh": "喂入：全部文本（真正的循环）"},
    "plot.feeds.prompt only": {"en": "feed: prompt only", "zh": "喂入：只有提示词"},
    "plot.feeds.answer only": {"en": "feed: answer only", "zh": "喂入：只有答案"},
    "plot.feeds.title": {"en": "What each loop feeds the model (blue: prompt, beige: answer so far, orange: the token "
                               "picked)",
                         "zh": "每种循环喂给模型的是什么（蓝：提示词，米黄：目前的答案，橙：挑出的 token）"},
    "plot.temperature.ylabel": {"en": "probability", "zh": "概率"},
    "plot.temperature.title": {"en": "The same scores at {n} temperatures: low T sharpens, high T flattens",
                               "zh": "同一组分数在 {n} 个温度下：T 低，分布更尖；T 高，分布更平"},
    "chat.prompt": {"en": "Prompt", "zh": "提示词"},
    "chat.max_tokens": {"en": "Max tokens", "zh": "token 上限"},
    "chat.temperature": {"en": "Temperature", "zh": "温度"},
    "chat.send": {"en": "Send", "zh": "发送"},
    "chat.stop": {"en": "Stop", "zh": "停止"},
    "chat.ready": {"en": "Model: <b>{model}</b>. Greedy (temperature 0) always gives the same answer; raise it to "
                         "sample.",
                   "zh": "模型：<b>{model}</b>。温度为 0 是贪心解码，答案每次都一样；调高温度就会随机采样。"},
    "chat.streamed": {"en": "{n} tokens streamed", "zh": "已流出 {n} 个 token"},
    "chat.done": {"en": "{model}: {n} tokens in {seconds:.2f} s ({ms:.0f} ms per token); stopped: {reason}",
                  "zh": "{model}：{n} 个 token，用时 {seconds:.2f} 秒（每个 token {ms:.0f} 毫秒）；停止原因：{reason}"},
    "stop.max_new_tokens": {"en": "max_new_tokens ({n}) reached", "zh": "已写满 max_new_tokens（{n} 个）"},
    "stop.eos": {"en": "end-of-text token", "zh": "遇到了文本结束 token"},
    "stop.context": {"en": "context full: {model} holds {n} tokens", "zh": "上下文满了：{model} 最多容纳 {n} 个 token"},
    "stop.on_token": {"en": "stopped by on_token", "zh": "被 on_token 叫停（比如按了“停止”）"},
    # tokenization and the token apps (notebook 2)
    "tokenizer.loaded": {"en": "{model} (the loaded model)", "zh": "{model}（当前加载的模型）"},
    "strip.title": {"en": "{name}: {tokens} tokens for {chars} characters ({bytes} bytes)",
                     "zh": "{name}：{chars} 个字符（{bytes} 个字节）切成 {tokens} 个 token"},
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
                          "zh": "前 {shared} 个 token 相同；从位置 {index} 起不同（红色竖线之后是虚线框）"},
    "divergence.same": {"en": "the same tokens: all {shared} shared", "zh": "token 完全相同：{shared} 个全部共享"},
    "divergence.prefix": {"en": "one is a prefix of the other: {shared} tokens shared",
                          "zh": "一个是另一个的前缀：共享 {shared} 个 token"},
    "plot.ratios.ylabel": {"en": "tokens, × {baseline}", "zh": "token 数（{baseline}的倍数）"},
    "plot.ratios.title": {"en": "The same sentence costs more tokens in some languages (dashed: as many as in {baseline})",
                          "zh": "同一句话，有的语言要多花好几倍 token（虚线：和{baseline}一样多）"},
    # notebook 03 (embeddings): the lookup app, the embedding map (views/embedding.js) and its space, the figures
    "lookup.ids": {"en": "token ids", "zh": "token id"},
    "lookup.rows": {"en": "embedding rows", "zh": "嵌入行"},
    "lookup.strip": {"en": "{ids} token ids, each a row number in the embedding table",
                     "zh": "{ids} 个 token id，每个都是嵌入表里的一个行号"},
    "lookup.info": {"en": "{ids} rows picked from the table of shape {shape} (vocabulary × dimensions, {numbers} "
                          "parameters): the result has shape {rows}. Hover a row for all its numbers.",
                    "zh": "从形状为 {shape} 的表（词表大小 × 维数，{numbers} 个参数）里取出 {ids} 行：结果的形状是 {rows}。"
                          "鼠标停在一行上，能看到它所有的数。"},
    "lookup.matrix": {"en": "embedding rows (one per token)", "zh": "嵌入行（每个 token 一行）"},
    "space.word": {"en": "Neighbours of", "zh": "找近邻"},
    "space.split": {"en": " (the first piece of {word}, which the tokenizer splits)",
                    "zh": "（{word} 被分词器切开了，这是它的第一块）"},
    "space.nearest": {"en": "nearest tokens to {token}{split} (cosine similarity): ",
                      "zh": "离 {token}{split} 最近的 token（余弦相似度）："},
    "family.number words": {"en": "number words", "zh": "数词"},
    "family.kin and rank": {"en": "kin and rank", "zh": "亲属和爵位"},
    "family.names": {"en": "names", "zh": "人名"},
    "family.body": {"en": "body", "zh": "身体部位"},
    "family.verbs": {"en": "verbs", "zh": "动词"},
    "map.title": {"en": "{count} token embeddings of {model} ({dims} dims) projected by PCA",
                  "zh": "{model} 的 {count} 个 token 嵌入（{dims} 维），用 PCA 投影"},
    "map.summary": {"en": "words nearest their own family's centre: ", "zh": "离自己那一族的中心最近的词："},
    "map.project": {"en": "Project to ", "zh": "投影到 "},
    "map.component": {"en": "component {k}", "zh": "主成分 {k}"},
    "map.axis_x": {"en": "component 1 →", "zh": "主成分 1 →"},
    "map.axis_y": {"en": "component 2 ↑", "zh": "主成分 2 ↑"},
    "map.aria": {"en": "{count} words in {dims}D", "zh": "{dims}D 里的 {count} 个词"},
    "map.aria_turn": {"en": ": drag or press the arrow keys to turn", "zh": "：拖动或按方向键来转动"},
    "map.hint_turn": {"en": "  drag the picture, or click it and press ← → ↑ ↓, to turn it",
                      "zh": "  拖动图，或者点一下图再按 ← → ↑ ↓，就能转动它"},
    "map.hint_hover": {"en": "  hover a point for its word", "zh": "  鼠标停在点上，能看到它是哪个词"},
    "map.score_in": {"en": "In {dims}D, ", "zh": "在 {dims}D 里，"},
    "map.score_hits": {"en": "{hits} of the {count} words", "zh": "{count} 个词中有 {hits} 个"},
    "map.score_rest": {"en": " ({share}%) sit nearest their own family's centre ({families} families; guessing: {guess}%).",
                       "zh": "（{share}%）离自己那一族的中心最近（共 {families} 族；瞎猜是 {guess}%）。"},
    "plot.projection.x": {"en": "component 1", "zh": "主成分 1"},
    "plot.projection.y": {"en": "component 2", "zh": "主成分 2"},
    "plot.distance.zero": {"en": "0: unrelated directions", "zh": "0：方向毫不相关"},
    "plot.distance.x": {"en": "distance between the two positions", "zh": "两个位置之间的距离"},
    "plot.distance.y": {"en": "mean cosine similarity", "zh": "平均余弦相似度"},
    "plot.separation.chance": {"en": "chance ({chance})", "zh": "瞎猜（{chance}）"},
    "plot.separation.x": {"en": "dimensions kept (PCA)", "zh": "保留的维数（PCA）"},
    "plot.separation.y": {"en": "words nearest their own family", "zh": "离自己那一族最近的词"},
    "plot.widths.x": {"en": "numbers per token (n_embd)", "zh": "每个 token 的数（n_embd）"},
    # notebook 04 (attention): the toy's printed parts, the worked step (views/step.js), the attention grid
    # (views/attention.js) and its explorer
    "toy.masked": {"en": "masked: −∞ above the diagonal", "zh": "masked：对角线以上换成 −∞"},
    "toy.weights": {"en": "weights = softmax of each row", "zh": "weights = 每一行做 softmax"},
    "toy.gets": {"en": "{token} gets {part} / {total} = {weight}", "zh": "{token} 分到 {part} / {total} = {weight}"},
    "step.summary_mask": {"en": "  (all 0: the newest token may read every token, so nothing is hidden)",
                          "zh": "  （全是 0：最新的 token 可以读每一个 token，没有要遮住的）"},
    "att.summary": {"en": "layer {layer}, {which}: each row is a token looking at itself and the tokens before it; "
                          "its weights sum to 1",
                    "zh": "第 {layer} 层、{which}：每一行是一个 token 在看它自己和它前面的 token；一行权重加起来是 1"},
    "att.summary_mean": {"en": "mean of heads", "zh": "各头的平均"},
    "att.summary_top": {"en": "the last token {last} looks most at {top}", "zh": "最后一个 token {last} 看得最多的是 {top}"},
    "att.title": {"en": "{model}: attention over {tokens} tokens", "zh": "{model}：{tokens} 个 token 的注意力"},
    # notebook 5: the KV cache (widgets.GridFilling, views.AttentionGrid, views.CacheGrowth, views.DecodeStep,
    # the stepper and matrix they share, cache_evidence.step_table, memory.macs_table, plots.macs_by_part/step_costs)
    "stepper.play": {"en": "Play", "zh": "播放"},
    "stepper.pause": {"en": "Pause", "zh": "暂停"},
    "stepper.back": {"en": "step back", "zh": "上一步"},
    "stepper.forward": {"en": "step forward", "zh": "下一步"},
    "stepper.step": {"en": "step", "zh": "步"},
    "matrix.position": {"en": "position", "zh": "位置"},
    "matrix.numbers": {"en": "numbers", "zh": "个数"},
    "matrix.dim": {"en": "dim", "zh": "维"},
    "matrix.token": {"en": "token", "zh": "token"},
    "matrix.dims": {"en": "dims", "zh": "维"},
    "matrix.tokens": {"en": "tokens", "zh": "token"},
    "grid.title": {"en": "{model}, without a cache: each step recomputes the whole grid",
                   "zh": "{model}，不用缓存：每一步都把整张表重算一遍"},
    "grid.first": {"en": "The model reads the prompt's {n} tokens: a {n} × {n} grid.",
                   "zh": "模型读入提示词的 {n} 个 token：一张 {n} × {n} 的表。"},
    "grid.again": {"en": "The model reads all {n} tokens again. Rows 0–{old} came out as at step {before} (largest "
                         "change in any layer and head: {change}); only the last row is new. Wasted: {old_rows} rows "
                         "of attention and {macs} multiply-adds in the whole model.",
                   "zh": "模型把全部 {n} 个 token 又读了一遍。第 0–{old} 行和第 {before} 步时一模一样（所有层、所有头里"
                         "最大的变化：{change}）；只有最后一行是新的。白算了：{old_rows} 行注意力，整个模型 {macs} 次乘加。"},
    "grid.summary_first": {"en": "step 0: the prompt's {n} tokens, a {n} × {n} grid.",
                           "zh": "第 0 步：提示词的 {n} 个 token，一张 {n} × {n} 的表。"},
    "grid.summary_again": {"en": "steps 1–{last}: each reads every token again, one more each time; the old rows come out "
                                 "as before (largest change in any layer and head: {change}), and only the last row is new.",
                           "zh": "第 1–{last} 步：每一步都把所有 token 重读一遍，每次多一个；旧的行和上一步一样（所有层、所有头里"
                                 "最大的变化：{change}），只有最后一行是新的。"},
    "grid.summary_last": {"en": "step {last} alone recomputed {rows} old rows, {macs} multiply-adds in the whole model: "
                                "the work a cache saves.",
                          "zh": "光是第 {last} 步，就把 {rows} 行旧的重算了一遍，整个模型加起来是 {macs}次乘加：这就是缓存能省下的计算。"},
    "att.caption": {"en": "Row: the token that looks (query). Column: the token it looks at (key). Each row sums to 1; "
                          "darker = more weight; hatched = masked (a token cannot look ahead).",
                    "zh": "行：发出“看”的 token（query）。列：被看的 token（key）。每行加起来是 1；颜色越深，权重越大；"
                          "斜线格是被遮住的（token 不能往后看）。"},
    "att.layer": {"en": "Layer ", "zh": "层 "},
    "att.head": {"en": "Head ", "zh": "头 "},
    "att.layer_n": {"en": "layer {l}", "zh": "第 {l} 层"},
    "att.head_n": {"en": "head {h}", "zh": "头 {h}"},
    "att.mean": {"en": "average of heads", "zh": "各头平均"},
    "att.average": {"en": "average", "zh": "平均"},
    "att.corner": {"en": "looks ↓ at →", "zh": "谁 ↓ 看谁 →"},
    "att.col": {"en": "{q} (position {j}) is looked at by itself and every later token",
                "zh": "{q}（位置 {j}）被它自己和后面每个 token 看"},
    "att.row": {"en": "{q} (position {i}) looks at {n} tokens: itself and every earlier one",
                "zh": "{q}（位置 {i}）看 {n} 个 token：它自己和前面每一个"},
    "att.row_one": {"en": "{q} (position {i}) looks at 1 token: itself and every earlier one",
                    "zh": "{q}（位置 {i}）只看 1 个 token：它自己"},
    "att.masked": {"en": "{q} cannot look at {k}: it comes later", "zh": "{q} 看不到 {k}：它在后面"},
    "att.masked_why": {"en": "masked: score −∞, weight 0", "zh": "被遮住：分数 −∞，权重 0"},
    "att.cell": {"en": "{q} looks at {k}: {v}", "zh": "{q} 看 {k}：{v}"},
    "att.where": {"en": "layer {layer}, {head}", "zh": "第 {layer} 层、{head}"},
    "att.at": {"en": "step {step} of {last}: {n} tokens", "zh": "第 {step} 步（共 {last} 步）：{n} 个 token"},
    "att.loading": {"en": "loading layer {layer}…", "zh": "正在加载第 {layer} 层…"},
    "att.set_aside": {"en": "layer {layer} was set aside to stay small: pick it again to load it",
                      "zh": "为了省流量，第 {layer} 层没有先发过来：再选一次就会加载"},
    "att.aloud": {"en": "Layer {layer}, {head}: the last token {q} gives most weight to {k} ({v}).",
                  "zh": "第 {layer} 层、{head}：最后一个 token {q} 给 {k} 的权重最大（{v}）。"},
    "cache.title": {"en": "The KV cache of {model}: {layers} layers, each keeping one K row and one V row per token",
                    "zh": "{model} 的 KV 缓存：{layers} 层，每层为每个 token 存一行 K、一行 V"},
    "cache.summary_title": {"en": "The KV cache of {model}, step by step: each of its {layers} layers keeps one K row and "
                                  "one V row per token ({bytes} bytes per token in all):",
                            "zh": "{model} 的 KV 缓存，一步一步看：{layers} 层里，每层为每个 token 存一行 K、一行 V"
                                  "（每个 token 一共 {bytes} 字节）："},
    "cache.summary_step": {"en": "step {step}: fed {fed} token(s), holds {held} ({last} last): {nbytes} bytes",
                           "zh": "第 {step} 步：送进 {fed} 个 token，缓存里一共 {held} 个（最后一个是 {last}）：{nbytes} 字节"},
    "cache.row": {"en": "{q} · position {t} · layer {l}", "zh": "{q} · 位置 {t} · 第 {l} 层"},
    "cache.row_bytes": {"en": "its K and V rows here: 2 × {nkv} K/V heads × {hs} numbers × {b} bytes = {total} bytes",
                        "zh": "它在这一层的 K、V 两行：2 × {nkv} 个 KV 头 × {hs} 个数 × {b} 字节 = {total} 字节"},
    "cache.k_nums": {"en": "K, K/V head 0, dims 0–{last}: {nums}", "zh": "K，第 0 个 KV 头，第 0–{last} 维：{nums}"},
    "cache.v_nums": {"en": "V, K/V head 0, dims 0–{last}: {nums}", "zh": "V，第 0 个 KV 头，第 0–{last} 维：{nums}"},
    "cache.token": {"en": "token", "zh": "token"},
    "cache.bytes": {"en": "bytes", "zh": "字节"},
    "cache.tokname": {"en": "{q} · position {t}", "zh": "{q} · 位置 {t}"},
    "cache.climbing": {"en": "{q} · layer {l}: K and V computed at this step, as the token climbs",
                       "zh": "{q} · 第 {l} 层：K 和 V 是这一步算的，token 正一层层往上走"},
    "cache.stored": {"en": "{q} · layer {l}: K and V stored at step {s}, read again, never recomputed",
                     "zh": "{q} · 第 {l} 层：K 和 V 在第 {s} 步存下，这里只是再读一次，从不重算"},
    "cache.layer_n": {"en": "layer {l}", "zh": "第 {l} 层"},
    "cache.prompt_enters": {"en": "▲ the prompt enters here", "zh": "▲ 提示词从这里进"},
    "cache.token_enters": {"en": "▲ {q} enters here", "zh": "▲ {q} 从这里进"},
    "cache.tokens": {"en": "{n} tokens", "zh": "{n} 个 token"},
    "cache.tokens_one": {"en": "{n} token", "zh": "{n} 个 token"},
    "cache.history": {"en": "{n} history tokens", "zh": "{n} 个历史 token"},
    "cache.history_one": {"en": "{n} history token", "zh": "{n} 个历史 token"},
    "cache.stack_prefill": {"en": "The same cache as a stack, layer 0 at the bottom; a square is one token's K and V in "
                                  "one layer. ▲: in the prefill the prompt's {tokens} climb the stack together.",
                            "zh": "同一个缓存，叠成一摞：第 0 层在最下面，一个小方块是一个 token 在一层里的 K 和 V。"
                                  "▲：预填充时，提示词的 {tokens} 一起往上走。"},
    "cache.stack_step": {"en": "Grey: {history}, their K and V sitting in every layer. ▲: the new token climbs layer by "
                               "layer, adding its own.",
                         "zh": "灰色：{history}，它们的 K 和 V 留在每一层里不动。▲：新 token 一层一层往上走，"
                               "每层添上自己的 K 和 V。"},
    "cache.where": {"en": "step {s} of {last}", "zh": "第 {s} 步（共 {last} 步）"},
    "cache.prefill": {"en": "Step 0, the prefill: the prompt's {n} tokens go in at once, and every layer stores {n} K "
                            "rows and {n} V rows.",
                      "zh": "第 0 步，预填充：提示词的 {n} 个 token 一次全部送进去，每一层存下 {n} 行 K、{n} 行 V。"},
    "cache.decode": {"en": "Step {s}: fed one token, {q}; it climbs all {layers} layers, and each appends 1 K row and 1 "
                           "V row and now holds {n}. The {old} rows already there are read, not recomputed.",
                     "zh": "第 {s} 步：只送进一个 token，{q}；它走过全部 {layers} 层，每层添上 1 行 K、1 行 V，"
                           "现在各有 {n} 行。原有的 {old} 行只读不算。"},
    "cache.formula": {"en": "{n} tokens × 2 (K and V) × {layers} layers × {nkv} K/V heads × {hs} numbers × {b} bytes "
                            "= {formula} bytes; cache.nbytes, measured: ",
                      "zh": "{n} 个 token × 2（K 和 V）× {layers} 层 × {nkv} 个 KV 头 × {hs} 个数 × {b} 字节 "
                            "= {formula} 字节；实测 cache.nbytes："},
    "cache.total": {"en": "{total} bytes", "zh": "{total} 字节"},
    "cache.differs": {"en": " ✗ (differs)", "zh": " ✗（对不上）"},
    "cache.layer_held": {"en": "layer {l}: bytes held", "zh": "第 {l} 层占的字节"},
    "step.toy_title": {"en": "Toy numbers: the cached step that feeds {token}: K's and V's first {cached} rows read "
                             "from the cache, the last one new; head size {hs}",
                       "zh": "玩具数字：送进 {token} 的那一步（用缓存）：K 和 V 的前 {cached} 行从缓存里读，"
                             "最后一行是新的；头的维数 head_dim 为 {hs}"},
    "step.title": {"en": "{model}, layer {layer}, head {head}{reads}: the step that feeds {token}",
                   "zh": "{model}，第 {layer} 层、头 {head}{reads}：送进 {token} 的那一步"},
    "step.reads": {"en": " (reading K/V head {kv})", "zh": "（读 K/V 头 {kv}）"},
    "step.toy": {"en": "Made-up numbers small enough to check by hand; the real head follows.",
                 "zh": "编出来的小数字，小到可以手算核对；下面接着是真实的头。"},
    "step.back": {"en": "◀ Back", "zh": "◀ 上一步"},
    "step.next": {"en": "Next ▶", "zh": "下一步 ▶"},
    "step.where": {"en": "part {k} of {n}: {name}", "zh": "第 {k} 部分（共 {n} 部分）：{name}"},
    "step.now": {"en": "  ◀ now", "zh": "  ◀ 当前"},
    "step.input": {"en": "  input", "zh": "  输入"},
    "step.name_K": {"en": "K (cache + new row)", "zh": "K（缓存 + 新的一行）"},
    "step.name_V": {"en": "V (cache + new row)", "zh": "V（缓存 + 新的一行）"},
    "step.name_mask": {"en": "mask", "zh": "mask（掩码）"},
    "step.q": {"en": "The new token {me} is fed alone. Its query q is one row of {hs} numbers: what it is looking for.",
               "zh": "新 token {me} 单独送进来。它的 query q 是一行 {hs} 个数：它在找什么。"},
    "step.q_prefill": {"en": "The last token {me}'s query q: its row of Q, {hs} numbers.",
                       "zh": "最后一个 token {me} 的 query q：Q 里属于它的那一行，{hs} 个数。"},
    "step.K": {"en": "Its key is appended to the {cached} cached keys (▶ marks the new row). K is now {S} × {hs}; the "
                     "older rows were read from the cache, not recomputed.",
               "zh": "它的 key 接在缓存里的 {cached} 个 key 后面（▶ 标出新的一行）。K 现在是 {S} × {hs}；"
                     "旧的几行是从缓存里读的，没有重算。"},
    "step.K_prefill": {"en": "K: every token's key, {S} × {hs}, the last token's own included (▶).",
                       "zh": "K：每个 token 的 key，{S} × {hs}，最后一个 token 自己的也在内（▶）。"},
    "step.scores": {"en": "One score per token: q · (its row of K) / √{hs}. For {first}: ({terms}) / {root} = {score}.",
                    "zh": "每个 token 一个分数：q · （它在 K 里的那一行）/ √{hs}。以 {first} 为例：({terms}) / {root} = {score}。"},
    "step.mask": {"en": "Nothing to hide: {me} is the newest token, so every token in the cache is earlier (or itself). "
                        "The mask adds 0 to all {S} scores; −∞ would hide a later token, and there is none yet.",
                  "zh": "没有什么要遮：{me} 是最新的 token，缓存里每个 token 都在它前面（或者就是它自己）。"
                        "掩码给全部 {S} 个分数加 0；−∞ 是用来遮住后面的 token 的，而现在后面还没有 token。"},
    "step.mask_prefill": {"en": "Nothing to hide: {me} is the newest token, so every token is earlier (or itself). "
                                "The mask adds 0 to all {S} scores; −∞ would hide a later token, and there is none yet.",
                          "zh": "没有什么要遮：{me} 是最新的 token，每个 token 都在它前面（或者就是它自己）。"
                                "掩码给全部 {S} 个分数加 0；−∞ 是用来遮住后面的 token 的，而现在后面还没有 token。"},
    "step.weights": {"en": "softmax turns scores into weights that sum to 1: e^score / (sum of all e^score). For {first}: "
                           "e^{score} / {total} = {weight}.",
                     "zh": "softmax 把分数变成加起来等于 1 的权重：e^score /（所有 e^score 之和）。以 {first} 为例："
                           "e^{score} / {total} = {weight}。"},
    "step.V": {"en": "Its value is appended to the {cached} cached values (▶): V is {S} × {hs}. Values are what each "
                     "token gives.",
               "zh": "它的 value 接在缓存里的 {cached} 个 value 后面（▶）：V 是 {S} × {hs}。value 是每个 token 拿出来给别人的东西。"},
    "step.V_prefill": {"en": "V: every token's value, {S} × {hs} (▶ the last token's).",
                       "zh": "V：每个 token 的 value，{S} × {hs}（▶ 是最后一个 token 的）。"},
    "step.out": {"en": "The output mixes V's rows by the weights. Its first number: {terms} = {value}. One row of {hs}, "
                       "the only new row of this head's output.",
                 "zh": "输出按权重把 V 的各行混在一起。它的第一个数：{terms} = {value}。一行 {hs} 个数，"
                       "是这个头的输出里唯一新的一行。"},
    "step.out_prefill": {"en": "The output mixes V's rows by the weights. Its first number: {terms} = {value}. One row "
                               "of {hs}, the last row of this head's output.",
                         "zh": "输出按权重把 V 的各行混在一起。它的第一个数：{terms} = {value}。一行 {hs} 个数，"
                               "是这个头的输出的最后一行。"},
    "step.products": {"en": "{shown} + … ({n} products)", "zh": "{shown} + …（共 {n} 项乘积）"},
    "steppart.q": {"en": "the new token's query", "zh": "新 token 的 query"},
    "steppart.k": {"en": "its key, appended to the cache", "zh": "它的 key，追加进缓存"},
    "steppart.v": {"en": "its value, appended to the cache", "zh": "它的 value，追加进缓存"},
    "steppart.K": {"en": "every key in the cache, this token's included", "zh": "缓存里所有的 key，包括这个 token 自己的"},
    "steppart.V": {"en": "every value in the cache", "zh": "缓存里所有的 value"},
    "steppart.scores": {"en": "q·Kᵀ / √head_dim: one row per head", "zh": "q·Kᵀ / √head_dim：每个头一行"},
    "steppart.weights": {"en": "softmax of the scores: one new row of the grid", "zh": "分数的 softmax：注意力表里新的一行"},
    "steppart.out": {"en": "weights · V: one output row per head", "zh": "weights · V：每个头一行输出"},
    "macs.header": {"en": "after {n} tokens:\nmillions of multiply-adds", "zh": "{n} 个 token 之后：\n乘加次数（百万）"},
    "macs.cached": {"en": "cached", "zh": "用缓存"},
    "macs.uncached": {"en": "uncached", "zh": "不用缓存"},
    "macs.times": {"en": "uncached\n÷ cached", "zh": "不用缓存\n÷ 用缓存"},
    "macs.Q projection": {"en": "Q projection", "zh": "Q 投影"},
    "macs.K and V projections": {"en": "K and V projections", "zh": "K、V 投影"},
    "macs.attention (scores and mixing)": {"en": "attention (scores and mixing)", "zh": "注意力（打分和混合）"},
    "macs.output projection": {"en": "output projection", "zh": "输出投影"},
    "macs.feed-forward": {"en": "feed-forward", "zh": "前馈网络"},
    "macs.logits": {"en": "logits", "zh": "logits"},
    "macs.whole step": {"en": "whole step", "zh": "整步合计"},
    "plot.macs.without": {"en": "without cache", "zh": "不用缓存"},
    "plot.macs.with": {"en": "with cache", "zh": "用缓存"},
    "plot.macs.xlabel": {"en": "multiply-adds, in millions (log scale: each grid line is 10x)",
                         "zh": "乘加次数，单位百万（对数坐标：每条网格线是 10 倍）"},
    "plot.steps.without": {"en": "without cache: the whole sequence again", "zh": "不用缓存：整段序列重算"},
    "plot.steps.with": {"en": "with cache: one new token", "zh": "用缓存：只算一个新 token"},
    "plot.steps.xlabel": {"en": "tokens in the sequence", "zh": "序列里的 token 数"},
    # notebook 07 (long context and memory): the KV calculator (widgets), the cache tables (longcontext), the
    # compression results, the prompt-caching report (speed) and the plots
    "calc.model": {"en": "Model", "zh": "模型"},
    "calc.numbers": {"en": "Numbers", "zh": "数字格式"},
    "calc.context": {"en": "Context", "zh": "上下文"},
    "calc.batch": {"en": "Batch", "zh": "Batch"},
    "calc.fp32 (4 bytes)": {"en": "fp32 (4 bytes)", "zh": "fp32（4 字节）"},
    "calc.bf16 / fp16 (2 bytes)": {"en": "bf16 / fp16 (2 bytes)", "zh": "bf16 / fp16（2 字节）"},
    "calc.fp8 / int8 (1 byte)": {"en": "fp8 / int8 (1 byte)", "zh": "fp8 / int8（1 字节）"},
    "calc.fits": {"en": "fits", "zh": "放得下"},
    "calc.does_not_fit": {"en": "does not fit", "zh": "放不下"},
    "calc.layers": {"en": "{n} layers", "zh": "{n} 层"},
    "calc.latent": {"en": "latent attention: {latent} + {rope} numbers per layer per token, shared by all heads",
                    "zh": "潜在注意力：每层每个 token {latent} + {rope} 个数，所有头共享"},
    "calc.heads": {"en": "{heads} K/V heads × {size} numbers", "zh": "{heads} 个 K/V 头 × {size} 个数"},
    "calc.per_number": {"en": "{n} byte(s) per number.", "zh": "每个数 {n} 字节。"},
    "calc.per_layer": {"en": "per layer: <b>{bytes} bytes</b>", "zh": "每层：<b>{bytes} 字节</b>"},
    "calc.or": {"en": " or ", "zh": " 或 "},
    "calc.local": {"en": " ({n} local layers capped at their {window}-token window)",
                   "zh": "（{n} 个局部层，封顶在各自 {window} 个 token 的窗口）"},
    "calc.per_sequence": {"en": "per sequence of {context} tokens: <b>{bytes} bytes</b> ({gb})",
                          "zh": "每条 {context} 个 token 的序列：<b>{bytes} 字节</b>（{gb}）"},
    "calc.per_batch": {"en": "per batch of {batch}: <b>{bytes} bytes</b> ({gb}) beside {weights} of weights",
                       "zh": "每批 {batch} 条：<b>{bytes} 字节</b>（{gb}），权重 {weights}"},
    "calc.outweighs": {"en": "the cache outweighs the weights from <b>{when}</b>{at_batch}",
                       "zh": "缓存超过权重的起点：<b>{when}</b>{at_batch}"},
    "calc.never": {"en": "never (within 10M tokens)", "zh": "永远不会（1000 万 token 以内）"},
    "calc.tokens": {"en": "{n} tokens", "zh": "{n} 个 token"},
    "calc.at_batch": {"en": " per sequence, at this batch", "zh": "（每条序列，这个 batch 下）"},
    "calc.beyond": {"en": "{label} tokens is past {name}'s trained context of {context}: the cache would take this "
                          "much, the model was not trained to read it.",
                    "zh": "{label} 个 token 超过了 {name} 训练时的上下文 {context}：缓存会占这么多，但模型没学过读这么长。"},
    "calc.heads_row": {"en": "<th>GPU</th><th>memory</th><th>cache / memory</th><th>cache + weights</th>",
                       "zh": "<th>GPU</th><th>显存</th><th>缓存 / 显存</th><th>缓存 + 权重</th>"},
    "longcontext.model": {"en": "model", "zh": "模型"},
    "longcontext.tokens": {"en": "{n} tokens", "zh": "{n} 个 token"},
    "longcontext.weights": {"en": "weights", "zh": "权重"},
    "longcontext.past": {"en": "{mark} past the model's trained context: the bytes the formula gives, for a text the "
                               "model was not trained to read",
                         "zh": "{mark} 超过模型训练时的上下文：公式给出的字节数，对应一段模型没学过读的文本"},
    "longcontext.none": {"en": "{name}: none of the classic mistakes applies", "zh": "{name}：哪个经典错误都不适用"},
    "longcontext.right": {"en": "{name} at {context} tokens: right answer {size}",
                          "zh": "{name}，{context} 个 token：正确答案 {size}"},
    "longcontext.mistake": {"en": "mistake", "zh": "错误"},
    "longcontext.estimate": {"en": "estimate", "zh": "估计"},
    "longcontext.of_right": {"en": "of the right answer", "zh": "是正确答案的"},
    "longcontext.head_dim taken as hidden / heads": {"en": "head_dim taken as hidden / heads",
                                                     "zh": "把 head_dim 当成 hidden / 头数"},
    "longcontext.shared K/V heads ignored (GQA or MQA counted as one K/V head per query head)": {
        "en": "shared K/V heads ignored (GQA or MQA counted as one K/V head per query head)",
        "zh": "忽略共享的 K/V 头（把 GQA 或 MQA 算成每个 query 头一个 K/V 头）"},
    "longcontext.sliding window applied to every layer": {"en": "sliding window applied to every layer",
                                                          "zh": "把滑动窗口套到每一层"},
    "longcontext.sliding window ignored": {"en": "sliding window ignored", "zh": "忽略滑动窗口"},
    "longcontext.latent attention counted as full K and V per head": {
        "en": "latent attention counted as full K and V per head", "zh": "把潜在注意力算成每个头完整的 K 和 V"},
    "compression.result": {"en": "{name}: {bytes} bytes/token vs {baseline} ({saving} saved), loss {loss} vs "
                                 "{baseline_loss} nats, KL {kl} nats",
                           "zh": "{name}：每 token {bytes} 字节，原来 {baseline}（省下 {saving}），损失 {loss}，原来 "
                                 "{baseline_loss} nats，KL {kl} nats"},
    "compression.in_dtype": {"en": "{baseline} in {dtype}", "zh": "{dtype} 的 {baseline}"},
    "compression.grouped": {"en": "{kind}: {heads} for {n} query heads (averaged, not trained)",
                            "zh": "{kind}：{n} 个 query 头共用 {heads}（平均出来的，不是训练出来的）"},
    "compression.kv_head": {"en": "1 K/V head", "zh": "1 个 K/V 头"},
    "compression.kv_heads": {"en": "{n} K/V heads", "zh": "{n} 个 K/V 头"},
    "compression.quantized": {"en": "int{bits} cache (keys per {keys}, values per {values}, {recent} recent kept)",
                              "zh": "int{bits} 缓存（key {keys}量化，value {values}量化，最近 {recent} 个保留原样）"},
    "compression.token": {"en": "token", "zh": "逐 token "},
    "compression.channel": {"en": "channel", "zh": "逐通道"},
    "compression.full": {"en": "full-precision cache", "zh": "全精度缓存"},
    "compression.window": {"en": "sliding window of {window} + {sinks} sink tokens",
                           "zh": "{window} 个 token 的滑动窗口 + {sinks} 个注意力汇 token"},
    "speed.report": {"en": "{model}, {n}-token prompt, time to first token (median of runs):",
                     "zh": "{model}，{n} 个 token 的提示词，首 token 时间（多次运行的中位数）："},
    "speed.none": {"en": "no prompt cache", "zh": "不用提示词缓存"},
    "speed.cold": {"en": "prompt cache, cold (0 % hits)", "zh": "提示词缓存，冷（0% 命中）"},
    "speed.warm": {"en": "prompt cache, warm", "zh": "提示词缓存，热"},
    "speed.receipt": {"en": "  warm receipt: {input} input, {cached} cached, {written} written",
                      "zh": "  热缓存的收据：输入 {input}，命中 {cached}，写入 {written}"},
    "speed.faster": {"en": "  warm vs cold: warm was {x}x faster", "zh": "  热缓存对冷缓存：热缓存快了约 {x} 倍（用时约为冷缓存的 1/{x}）"},
    "speed.slower": {"en": "  warm vs cold: warm was {x}x slower", "zh": "  热缓存对冷缓存：热缓存反而更慢，用的时间是冷缓存的 {x} 倍"},
    "speed.noise": {"en": " (within noise: their runs overlapped)", "zh": "（在误差之内：两者的各次运行有重叠）"},
    "speed.zero_hits": {"en": "  cost of a 0 % hit rate: {cost} over no prompt cache",
                        "zh": "  命中率 0% 的代价：相对不用提示词缓存 {cost}"},
    "speed.zero_hits_none": {"en": "  cost of a 0 % hit rate: none measured, cold took {less} less than no prompt cache",
                             "zh": "  命中率 0% 的代价：没有测出来，冷缓存反而比不用提示词缓存少用 {less}"},
    # speed.growth: a timed curve read as it came out
    "speed.curve.cold": {"en": "The cold prefill", "zh": "冷预填充的用时"},
    "speed.curve.uncached": {"en": "The step without the cache", "zh": "不用缓存时一步的用时"},
    "speed.grows": {"en": "{what} grew with the length at every point here: {first} ms at {a} tokens → {last} ms at "
                          "{b} ({x}x the time for {y}x the tokens).",
                    "zh": "{what}在这里随长度逐点增加：{a} 个 token 用 {first} ms → {b} 个用 {last} ms"
                          "（token 是 {y} 倍，时间是 {x} 倍）。"},
    "speed.bends": {"en": "{what} is not monotone here: {pairs}. This machine's noise outweighed the work between "
                          "those lengths: read no trend there (a rerun moves it).",
                    "zh": "{what}在这里不是单调的：{pairs}。在这几个长度之间，这台机器的波动盖过了工作量的差别："
                          "别从那里读出趋势（重跑一次，它会变）。"},
    "speed.bend": {"en": "{a} tokens took longer than {b} ({x} against {y} ms)",
                   "zh": "{a} 个 token 反而比 {b} 个慢（{x} ms 对 {y} ms）"},
    "speed.bend_join": {"en": "; ", "zh": "；"},
    "plot.context.measured": {"en": "measured (fastest of several repeats)", "zh": "实测（多次重复中最快的一次）"},
    "plot.context.trend": {"en": "trend: {intercept} ms + {slope} ms per 1,000 cached tokens",
                           "zh": "趋势：{intercept} ms + 每 1,000 个缓存 token {slope} ms"},
    "plot.context.xlabel": {"en": "tokens already in the cache", "zh": "缓存里已有的 token 数"},
    "plot.context.ylabel": {"en": "milliseconds per step", "zh": "每步毫秒数"},
    "plot.share.half": {"en": "attention is half the step", "zh": "注意力占一步的一半"},
    "plot.share.trained": {"en": "{name}: trained context (dashed past it)", "zh": "{name}：训练时的上下文（超出部分画虚线）"},
    "plot.share.xlabel": {"en": "tokens in the cache (log scale)", "zh": "缓存里的 token 数（对数刻度）"},
    "plot.share.ylabel": {"en": "% of the step's multiply-adds", "zh": "占一步乘加次数的百分比（%）"},
    "plot.savings.xlabel": {"en": "% of the cache's bytes saved", "zh": "缓存字节省下的百分比（%）"},
    "plot.savings.ylabel": {"en": "KL from the full model (nats, log)", "zh": "与完整模型的 KL（nats，对数）"},
    "plot.loss.xlabel": {"en": "position in the text (tokens)", "zh": "在文本中的位置（token）"},
    "plot.loss.ylabel": {"en": "loss (nats), mean of {n} positions", "zh": "损失（nats），{n} 个位置的平均"},
    # notebook 08 (serving): the throughput plot, the serving timeline (views/timeline), the engine's tables
    "plot.batch.free": {"en": "dotted: b x batch 1 (free batching)", "zh": "点线：b 倍于 batch 1（批处理不花钱）"},
    "plot.batch.xlabel": {"en": "batch size b (sequences decoded together)", "zh": "batch 大小 b（一起解码的序列数）"},
    "plot.batch.ylabel": {"en": "tokens per second, all sequences", "zh": "每秒 token 数，所有序列合计"},
    "timeline.title": {"en": "Serving a stream of requests: which request holds which slot at each step",
                       "zh": "服务一串请求：每一步，哪个请求占着哪个槽位"},
    "timeline.static": {"en": "static batching", "zh": "静态批处理"},
    "timeline.continuous": {"en": "continuous batching", "zh": "连续批处理"},
    "timeline.named": {"en": "{policy}, {name}", "zh": "{policy}，{name}"},
    "timeline.prefix caching": {"en": "prefix caching", "zh": "前缀缓存"},
    "timeline.no prefix caching": {"en": "no prefix caching", "zh": "无前缀缓存"},
    "timeline.prefill": {"en": "prefill: its whole prompt in one call, which gives its first token",
                         "zh": "预填充：一次调用算完整个提示词，得到第一个 token"},
    "timeline.reused": {"en": "prefill that read cached blocks (prefix caching): only the rest of its prompt computed",
                        "zh": "读了缓存块的预填充（前缀缓存）：只算提示词剩下的部分"},
    "timeline.decode": {"en": "decode: one more token, in one call with every other running request",
                        "zh": "解码：再生成一个 token，和其他正在运行的请求在同一次调用里"},
    "timeline.idle": {"en": "idle: no request in this slot", "zh": "空闲：这个槽位里没有请求"},
    "timeline.chunk": {"en": "prefill chunk (step_tokens): part of a long prompt, its tokens under the letter; "
                             "decodes share its step",
                       "zh": "预填充分段（step_tokens）：长提示词的一段，字母下是它的 token 数；解码和它共用这一步"},
    "timeline.preempted": {"en": "preempted: a running request's next tokens found no free block, so the one admitted "
                                 "last gave its blocks back; fed again later",
                           "zh": "被抢占：正在运行的请求的下一批 token 找不到空闲块，于是最后加入的那个请求交还它的块；之后重新输入"},
    "timeline.preemption": {"en": "{n} preemption", "zh": "{n} 次抢占"},
    "timeline.preemptions": {"en": "{n} preemptions", "zh": "{n} 次抢占"},
    "timeline.slot": {"en": "{n} slot", "zh": "{n} 个槽位"},
    "timeline.slots": {"en": "{n} slots", "zh": "{n} 个槽位"},
    "timeline.step": {"en": "{n} step", "zh": "{n} 步"},
    "timeline.steps": {"en": "{n} steps", "zh": "{n} 步"},
    "timeline.request": {"en": "{n} request", "zh": "{n} 个请求"},
    "timeline.requests": {"en": "{n} requests", "zh": "{n} 个请求"},
    "timeline.token": {"en": "{n} token", "zh": "{n} 个 token"},
    "timeline.tokens": {"en": "{n} tokens", "zh": "{n} 个 token"},
    "timeline.prompt_token": {"en": "{n} prompt token", "zh": "{n} 个提示词 token"},
    "timeline.prompt_tokens": {"en": "{n} prompt tokens", "zh": "{n} 个提示词 token"},
    "timeline.block": {"en": "{n} block", "zh": "{n} 个块"},
    "timeline.blocks": {"en": "{n} blocks", "zh": "{n} 个块"},
    "timeline.figures": {"en": "{name} · {slots} · {steps} · {tokens} tokens in {ms} = {rate} tokens/s · "
                               "mean latency {latency} · mean time to first token {ttft} · {idle} of slot-steps idle",
                         "zh": "{name} · {slots} · {steps} · {tokens} 个 token 用时 {ms}，每秒 {rate} 个 token · "
                               "平均延迟 {latency} · 平均首 token 时间 {ttft} · {idle} 的槽位步空闲"},
    "timeline.caption": {"en": "blocks: {allocated} allocated, {freed} freed, {cached} kept by the index at the end; "
                               "pool of {n}",
                         "zh": "块：分配 {allocated} 个，释放 {freed} 个，结束时索引留着 {cached} 个；块池共 {n} 个"},
    "timeline.step_head": {"en": "step", "zh": "步"},
    "timeline.slot_head": {"en": "slot {slot}", "zh": "槽位 {slot}"},
    "timeline.blocks_head": {"en": "blocks", "zh": "块"},
    "timeline.idle_tip": {"en": "{run} · step {step} · slot {slot}: idle", "zh": "{run} · 第 {step} 步 · 槽位 {slot}：空闲"},
    "timeline.waiting": {"en": "{requests} still waiting to start", "zh": "还有 {requests}在等着开始"},
    "timeline.static_wait": {"en": "static batching: the slot waits until its batch's last request is done",
                             "zh": "静态批处理：这个槽位要等同批最后一个请求做完"},
    "timeline.cell_tip": {"en": "request {label} · {run} · step {step} · slot {slot}",
                          "zh": "请求 {label} · {run} · 第 {step} 步 · 槽位 {slot}"},
    "timeline.decode_tip": {"en": "decode: token {k} of {n}", "zh": "解码：第 {k} 个 token，共 {n} 个"},
    "timeline.chunk_tip": {"en": "prefill in {m} chunks of at most {budget} tokens a step: chunk {j}, {tokens}; "
                                 "{done} of {total} fed",
                           "zh": "预填充分成 {m} 段，每步最多 {budget} 个 token：第 {j} 段，{tokens}；已输入 {total} 中的 {done}"},
    "timeline.preempted_tip": {"en": "preempted: a running request's next tokens (its own or an older one's) found no "
                                     "free block, so this one, admitted last, gave its blocks back and waits in front",
                               "zh": "被抢占：正在运行的请求（它自己或更早的请求）的下一批 token 找不到空闲块，于是最后加入的这个请求交还它的块，排到等待队列最前面"},
    "timeline.preempted_cost": {"en": "its cost: {steps} without it, then from step {again} {tokens} fed again",
                                "zh": "代价：{steps}里没有它，然后从第 {again} 步起重新输入 {tokens}"},
    "timeline.recompute_tip": {"en": "prefill again after its preemption: its prompt and the answer it had made, "
                                     "{tokens} fed again (past the blocks the index kept)",
                               "zh": "被抢占后重新预填充：它的提示词和已有的回答，重新输入 {tokens}（索引留着的块除外）"},
    "timeline.preempted_times": {"en": "{n} in this run", "zh": "这次运行中共 {n}"},
    "timeline.reused_tip": {"en": "prefill: {reused} of its {prompt} read from cached blocks, {computed} computed",
                            "zh": "预填充：{prompt} 中有 {reused} 个从缓存块读出，计算了 {computed} 个"},
    "timeline.lengths": {"en": "prompt {prompt} · answer {answer}", "zh": "提示词 {prompt} · 回答 {answer}"},
    "timeline.times": {"en": "time to first token {ttft} · latency {latency} (from its arrival, at 0)",
                       "zh": "首 token 时间 {ttft} · 延迟 {latency}（从它到达时算起，到达时刻为 0）"},
    "timeline.blocks_tip": {"en": "{run} · after step {step}: {used} of {n} blocks in use ({size} tokens each)",
                            "zh": "{run} · 第 {step} 步之后：{n} 个块里有 {used} 个在用（每块 {size} 个 token）"},
    "timeline.cached_tip": {"en": "{blocks} kept by the index, held by no request (cached)",
                            "zh": "索引留着 {blocks}，没有请求占用（已缓存）"},
    "timeline.took": {"en": "the step took {ms}", "zh": "这一步用时 {ms}"},
    "timeline.fed": {"en": "{preemptions} · {fed} tokens fed, recomputed ones included",
                     "zh": "{preemptions} · 共输入 {fed} 个 token，含重算的"},
    "timeline.budget": {"en": "at most {n} tokens a step", "zh": "每步最多 {n} 个 token"},
    "timeline.ratio": {"en": "continuous / static: tokens/s {rate}× · mean latency {latency}× · "
                             "mean time to first token {ttft}× · steps {steps} against {static}",
                       "zh": "连续 / 静态：每秒 token 数 {rate}× · 平均延迟 {latency}× · "
                             "平均首 token 时间 {ttft}× · 步数 {steps} 对 {static}"},
    "timeline.empty": {"en": "No runs to show yet: give ServingTimeline.of the runs of serving.side_by_side (or serving.serve).",
                       "zh": "还没有可显示的运行：把 serving.side_by_side（或 serving.serve）的运行交给 ServingTimeline.of。"},
    "timeline.broken": {"en": "This view could not draw its data: {error}", "zh": "这个视图画不出它的数据：{error}"},
    "timeline.text_empty": {"en": "No runs to show: give ServingTimeline.of the runs of serving.side_by_side (or serving.serve).",
                            "zh": "没有可显示的运行：把 serving.side_by_side（或 serving.serve）的运行交给 ServingTimeline.of。"},
    "timeline.text_cells": {"en": "cells: a request's letter; ▸ its prefill; ↺ its prefill, reading cached blocks; "
                                  "▸n a prefill chunk of n tokens; ✕ preempted; . an idle slot",
                            "zh": "格子：请求的字母；▸ 它的预填充；↺ 读了缓存块的预填充；▸n n 个 token 的预填充分段；"
                                  "✕ 被抢占；. 空闲的槽位"},
    "timeline.text_run": {"en": "run {j} · {name}: {tokens} tokens in {ms} ms = {rate} tokens/s; mean latency {latency} ms, "
                                "mean time to first token {ttft} ms; {idle} of slot-steps idle; blocks: {allocated} "
                                "allocated, {freed} freed, {cached} kept by the index",
                          "zh": "运行 {j} · {name}：{tokens} 个 token 用时 {ms} ms，每秒 {rate} 个 token；平均延迟 {latency} ms，"
                                "平均首 token 时间 {ttft} ms；{idle} 的槽位步空闲；块：分配 {allocated} 个，释放 {freed} 个，"
                                "索引留着 {cached} 个"},
    "engine.stream_heads": {"en": "request|prompt\ntokens|kvlib\nreused|llama-server\nreused|kvlib first token\nwith / without|"
                                  "llama-server first token\nwith / without",
                            "zh": "请求|提示词\ntoken|kvlib\n复用|llama-server\n复用|kvlib 首 token\n有缓存 / 无缓存|"
                                  "llama-server 首 token\n有缓存 / 无缓存"},
    "engine.slots_heads": {"en": "round|request|slot|reused|computed|first token|round took",
                           "zh": "轮次|请求|槽位|复用|计算|首 token|这一轮用时"},
    "engine.first": {"en": "first", "zh": "第一次"},
    "engine.again": {"en": "again", "zh": "再一次"},
    "engine.swapped": {"en": "swapped", "zh": "交换槽位"},
    # notebook 06, prompt caching: the PromptBlocks view (its JS reads the "blocks." entries as words)
    "blocks.hit": {"en": "hit: read from the cache", "zh": "命中：从缓存里读出"},
    "blocks.written": {"en": "written: computed, then stored", "zh": "写入：算完后存进缓存"},
    "blocks.computed": {"en": "computed, not stored", "zh": "算过，但没存"},
    "blocks.col.label": {"en": "request", "zh": "请求"},
    "blocks.col.tenant": {"en": "tenant", "zh": "租户"},
    "blocks.col.at": {"en": "sent", "zh": "发送于"},
    "blocks.col.blocks": {"en": "blocks", "zh": "块"},
    "blocks.col.input": {"en": "input", "zh": "输入"},
    "blocks.col.cached": {"en": "cached", "zh": "命中"},
    "blocks.col.written": {"en": "written", "zh": "写入"},
    "blocks.col.cost": {"en": "cost", "zh": "费用"},
    "blocks.col.gone": {"en": "expired / evicted", "zh": "过期 / 逐出"},
    "blocks.expired": {"en": "expired", "zh": "过期"},
    "blocks.evicted": {"en": "evicted", "zh": "被逐出"},
    "blocks.chip": {"en": "{label} · block {k} · tokens {start}–{end} · {state}",
                    "zh": "{label} · 第 {k} 块 · token {start}–{end} · {state}"},
    "blocks.hash": {"en": "hash {hash} … (its first 8 bytes; it names this block and every token before it)",
                    "zh": "哈希 {hash} …（前 8 个字节；它认的是这一块和它前面的所有 token）"},
    "blocks.used_by": {"en": "used again by {by} at {at}", "zh": "{at} 时被“{by}”再次用到"},
    "blocks.dropped": {"en": "{gone} at {at}, before any later request used it",
                       "zh": "{at} 时{gone}，后来的请求还没用上它"},
    "blocks.rewritten": {"en": "; written again since", "zh": "；之后又被重新写入"},
    "blocks.not_held": {"en": "; no longer in the cache", "zh": "；已不在缓存里"},
    "blocks.gone_now": {"en": "{gone} at {at}: no longer in the cache", "zh": "{at} 时{gone}：已不在缓存里"},
    "blocks.stored": {"en": "stored: expires at {expires}, in {left} unless used again",
                      "zh": "已存：如果没人再用，再过 {left}（到 {expires}）就过期"},
    "blocks.stale": {"en": "stored, its TTL over: dropped at the cache's next look",
                     "zh": "已存，但 TTL 已到：缓存下次查看时就丢掉"},
    "blocks.made_room": {"en": "evicted to make room for {request}", "zh": "被逐出，给“{request}”腾地方"},
    "blocks.tail": {"en": "{n} more", "zh": "另 {n} 个"},
    "blocks.tail_tip": {"en": "{n} tokens after the last block: always computed (the next token needs the last one's scores)",
                        "zh": "最后一个整块之后的 {n} 个 token：每次都要算（下一个 token 要用最后一个 token 的分数来挑）"},
    "blocks.clock": {"en": "clock: {t}", "zh": "时钟：{t}"},
    "blocks.seconds": {"en": "{t} s", "zh": "{t} 秒"},  # a time on the cache's clock, in the tooltips and table
    "blocks.caption": {"en": "  (simulated) · the bar under a stored block: its time to live left, of {ttl}",
                       "zh": "（模拟的）· 已存块下面的横条：剩下的存活时间（TTL 共 {ttl}）"},
    "blocks.legend_gone": {"en": " expired or evicted before a later request used it",
                           "zh": " 还没被后来的请求用上，就过期或被逐出了"},
    "blocks.legend_tail": {"en": "n more", "zh": "另 n 个"},
    "blocks.legend_tail_what": {"en": " last tokens, after the last full block: always computed",
                                "zh": " 最后一个整块之后的 token：每次都要算"},
    # notebook 06: a cache's mode, in the blocks view's title and in the price table
    "mode.automatic": {"en": "automatic", "zh": "自动"},
    "mode.explicit": {"en": "explicit", "zh": "显式"},
    "blocks.title": {"en": "{mode} caching · TTL {ttl} s · {size} · cache holds {n} blocks, {held:,}{budget} bytes",
                     "zh": "{mode}缓存 · TTL {ttl} 秒 · {size} · 缓存里有 {n} 个块，{held:,} 字节{budget}"},
    "blocks.size": {"en": "blocks of {n} tokens", "zh": "每块 {n} 个 token"},
    "blocks.size_marked": {"en": ", filed to each mark", "zh": "，存到每个标记处为止"},
    "blocks.budget": {"en": " of {n:,}", "zh": "（上限 {n:,}）"},
    "blocks.fate_used": {"en": "read again by {by} at {at:,.0f} s", "zh": "在 {at:,.0f} 秒时被“{by}”再次读取"},
    "blocks.fate_dropped": {"en": "{gone} at {at:,.0f} s{why}, before any later use",
                            "zh": "一直没人再用，在 {at:,.0f} 秒时{gone}{why}"},
    "blocks.fate_room": {"en": " to make room for {request}", "zh": "，给“{request}”腾地方"},
    "blocks.fate_kept": {"en": "still stored", "zh": "还存着"},
    "blocks.fate_until": {"en": "still stored, until {t:,.0f} s unless used again",
                          "zh": "还存着，如果没人再用，存到 {t:,.0f} 秒"},
    "blocks.fate_gone": {"en": "{gone} at {at:,.0f} s", "zh": "在 {at:,.0f} 秒时{gone}"},
    "blocks.fate_one": {"en": "{n} block {what}", "zh": "{n} 个块{what}"},
    "blocks.fate_many": {"en": "{n} blocks {what}", "zh": "{n} 个块{what}"},
    "blocks.fate_sep": {"en": "; ", "zh": "；"},
    "blocks.fate_line": {"en": "  {label}: {fate}", "zh": "  {label} → {fate}"},
    "blocks.summary_clock": {"en": "clock {t:.0f} s (simulated)", "zh": "时钟：{t:.0f} 秒（模拟的）"},
    "blocks.summary_key": {"en": "blocks: ✓ read from the cache, + written, · computed and not kept; "
                                 "n more: the tokens after the last full block, always computed",
                           "zh": "块：✓ 从缓存读出，+ 写入，· 算了但不存；另 n 个：最后一个整块之后的 token，每次都要算"},
    "blocks.summary_more": {"en": " {n} more", "zh": " 另 {n} 个"},
    "blocks.summary_fates": {"en": "what became of the blocks each request read or wrote:",
                             "zh": "每个请求读过或写下的块，后来怎样了："},
    # notebook 06: the PromptCacheStream app
    "stream.send": {"en": "Send next request", "zh": "发送下一个请求"},
    "stream.no_ttl": {"en": "No TTL: entries never expire", "zh": "没有 TTL：永不过期"},
    "stream.forward": {"en": "Fast-forward {t}", "zh": "快进 {t}"},
    "stream.minutes": {"en": "{n:g} min", "zh": "{n:g} 分钟"},
    "stream.note": {"en": "cost: in units of one uncached input token at {provider}'s ratios (cached {read:g}x, "
                          "written {write:g}x), as if past its {least:,}-token minimum",
                    "zh": "费用：以一个不走缓存的输入 token 为 1，按 {provider} 的比例算（命中 {read:g} 倍，"
                          "写入 {write:g} 倍），并假设已超过它 {least:,} 个 token 的门槛"},
    "stream.all_sent": {"en": "All requests sent. ", "zh": "请求都发完了。"},
    "stream.build_new": {"en": "Build a new stream.", "zh": "要再看，请新建一个请求流。"},
    "stream.forward_or_new": {"en": "Fast-forward the clock or build a new stream.",
                              "zh": "可以快进时钟，或者新建一个请求流。"},
    "stream.sent": {"en": "Sent <b>{label}</b>: {cached} of {n} tokens cached, {written} written; cost {cost:,.1f} "
                          "(uncached: {n})",
                    "zh": "已发送 <b>{label}</b>：{n} 个 token 里 {cached} 个来自缓存，写入 {written} 个；"
                          "费用 {cost:,.1f}（不走缓存是 {n}）"},
    "stream.evicted": {"en": "; {n} blocks evicted to stay within the budget", "zh": "；为了不超预算，逐出了 {n} 个块"},
    "stream.end": {"en": ".", "zh": "。"},
    "stream.expired": {"en": "Clock moved past the TTL: {n} blocks expired; the cache holds {held} now.",
                       "zh": "时钟已越过 TTL：{n} 个块过期了；缓存里现在有 {held} 个块。"},
    # notebook 06: the price list (kvlib.lessons.pricing.table) and the long prompt's seats
    "pricing.provider": {"en": "provider", "zh": "服务商"},
    "pricing.mode": {"en": "mode", "zh": "模式"},
    "pricing.read": {"en": "read", "zh": "读"},
    "pricing.write": {"en": "write", "zh": "写"},
    "pricing.minimum": {"en": "minimum", "zh": "最少 token"},
    "pricing.hits": {"en": "hits come in", "zh": "命中的单位"},
    "pricing.kept": {"en": "kept unused", "zh": "闲置保留"},
    "pricing.steps": {"en": "steps of {n}", "zh": "每 {n} 个一档"},
    "pricing.marked": {"en": "marked prefixes", "zh": "标记的前缀"},
    "pricing.by_model": {"en": "{low:,}-{high:,} by model", "zh": "{low:,}～{high:,}，因模型而异"},
    "pricing.range": {"en": "{low}-{high}", "zh": "{low}～{high}"},
    "pricing.min": {"en": "{n} min", "zh": "{n} 分钟"},
    "pricing.hours": {"en": "{n} h", "zh": "{n} 小时"},
    "pricing.per_token": {"en": "read and write: per token, as a share of an uncached input token",
                          "zh": "读、写：每个 token 的价格，以一个不走缓存的输入 token 为 1"},
    "pricing.sources": {"en": "sources:", "zh": "来源（原文引用，附日期）："},
    "pricing.source": {"en": "  {provider}: {source}", "zh": "  {provider}：{source}"},
    "pricing.min_source": {"en": "  Anthropic's minimum by model: {source}", "zh": "  Anthropic 各模型的最少 token 数：{source}"},
    # the providers' names as the price list, the app's note and notebook 08 show them (the key: Pricing.provider)
    "provider.OpenAI, GPT-4o": {"en": "OpenAI, GPT-4o", "zh": "OpenAI GPT-4o"},
    "provider.OpenAI, GPT-5": {"en": "OpenAI, GPT-5", "zh": "OpenAI GPT-5"},
    "provider.Anthropic, 5-minute cache": {"en": "Anthropic, 5-minute cache", "zh": "Anthropic（5 分钟缓存）"},
    "provider.Anthropic, 1-hour cache": {"en": "Anthropic, 1-hour cache", "zh": "Anthropic（1 小时缓存）"},
    "pricing.seat": {"en": "Seat {seat}: row {row}, {price} shillings.", "zh": "{seat} 号座：{row} 排，{price} 先令。"},
    # notebook 06: its plots
    "plot.ttft.cold": {"en": "cold: the whole prompt computed", "zh": "冷：整个提示词都要算"},
    "plot.ttft.warm": {"en": "warm: all but the last 16 tokens cached", "zh": "热：除了最后 16 个 token，都从缓存读"},
    "plot.ttft.xlabel": {"en": "prompt tokens", "zh": "提示词的 token 数"},
    "plot.resend.router": {"en": "router: {name}", "zh": "路由：{name}"},
    # the routers' names (routing.ROUTERS) as the resend plot's legend shows them; the code keeps the English names
    "router.prefix hash": {"en": "prefix hash", "zh": "按前缀哈希"},
    "router.random": {"en": "random", "zh": "随机"},
    "router.prefix hash + overflow": {"en": "prefix hash + overflow", "zh": "按前缀哈希 + 溢出"},
    "plot.resend.chance": {"en": "1 / replicas", "zh": "1 / 副本数"},
    "plot.resend.xlabel": {"en": "replicas (machines, each with its own cache)", "zh": "副本数（机器，各有各的缓存）"},
    "plot.resend.ylabel": {"en": "resends that hit", "zh": "重发命中的比例"},
    "plot.leak.sent": {"en": "the victim sent it", "zh": "受害者发过"},
    "plot.leak.unsent": {"en": "nobody sent it", "zh": "没人发过"},
    "plot.leak.title": {"en": "{title}: Mann-Whitney p = {p:.2g}", "zh": "{title}：Mann-Whitney 检验 p = {p:.2g}"},
    "plot.leak.xlabel": {"en": "attacker's time to first token (ms)", "zh": "攻击者测到的首 token 时间（ms）"},
    "plot.leak.ylabel": {"en": "prompts", "zh": "提示词数"},
}
