"""Notebook 3's exercises: answers computed live from the model the notebook passes."""
from .. import embeddings
from . import exercise


@exercise("03.table_numbers", tolerance=0.01,
          hint={"en": "The model's line above gives its vocabulary (rows) and its dims (numbers per row): multiply them.",
                "zh": "上面打印模型的那一行给出了词表大小（行数）和 dims（每行几个数）：把它们乘起来。"},
          explain={"en": "The table has one row per token in the vocabulary and n_embd numbers per row: {answer:,} "
                         "numbers, all learned in training.",
                   "zh": "词表里每个 token 在表里占一行，每行 n_embd 个数：一共 {answer:,} 个数，全是训练学出来的。"})
def table_numbers(model):
    """How many numbers does the model's embedding table hold?"""
    return model.config.vocab_size * model.config.n_embd


@exercise("03.king_queen_or_table", uses=("smollm2",),
          hint={"en": "Words used in the same kind of sentence get rows that point the same way (a cosine near 1).",
                "zh": "用在同一类句子里的词，它们的行指向相近的方向（余弦接近 1）。"},
          explain={"en": "{answer!r} it is: in SmolLM2's table ' king' points much more nearly the same way as "
                         "' queen' than as ' table'. Nobody wrote that in; training put words used alike near each other.",
                   "zh": "是 {answer!r}：在 SmolLM2 的表里，' king' 的方向和 ' queen' 比和 ' table' 接近得多。"
                         "没有人把这一点写进去；是训练让用法相近的词靠在一起。"})
def king_queen_or_table(smollm2):
    """Which row points more nearly the same way as ' king' in SmolLM2: (a) ' queen' or (b) ' table'?"""
    return "a" if embeddings.similarity(smollm2, "king", "queen") > embeddings.similarity(smollm2, "king", "table") \
        else "b"


@exercise("03.dims_to_85", uses=("smollm2",),
          hint={"en": "One dimension keeps only the widest difference; each one added gives the families more room. "
                      "Then run the next cell and read its curve: SmolLM2's first dot at or above 85 %.",
                "zh": "一维只留下差别最大的那个方向；每多一维，各族就多一点地方。"
                      "然后运行下一个单元格，读它的曲线：SmolLM2 第一个到达或超过 85% 的点。"},
          explain={"en": "SmolLM2's families first reach 85 % separation with {answer} dimensions kept: fewer are too "
                         "few to hold what sets the families apart, out of the 576 its table has.",
                   "zh": "保留 {answer} 维时，SmolLM2 的词族分离度第一次达到 85%：它的表有 576 维，"
                         "比这更少的维数装不下区分各族的那些差别。"})
def dims_to_85(smollm2):
    """In how many PCA dimensions does the family separation of SmolLM2's embeddings first reach 85 %?"""
    return embeddings.dims_to_reach(embeddings.separation_by_dims(smollm2), 0.85)
