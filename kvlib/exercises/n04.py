"""Notebook 4's exercises: answers computed live from the model the notebook passes."""
from . import exercise
from .. import attention
from ..trace import Trace

SHORT, KING = "The king is", "The king is dead, long live the"  # the notebook's running example


def read_king(model):  # -> the Trace of one pass over KING, and its tokens as text
    ids = model.encode(KING)
    trace = Trace()
    model.forward(ids, trace=trace)
    return trace, [model.decode([i]) for i in ids]


@exercise("04.masked_weights",
          hint={"en": "Go row by row: the first token's row hides every token after it, the next row one fewer... "
                      "Count the tokens in the cell above, then add up what each row hides.",
                "zh": "一行一行地数：第一个 token 的那一行遮住它后面所有的 token，下一行少遮一个……"
                      "先数出上面单元格里有几个 token，再把每一行遮住的个数加起来。"},
          explain={"en": "{answer}: each row hides the tokens after its own (for T tokens, T - 1 in the first row, "
                         "then T - 2, down to 0 in the last), and e^−∞ = 0 gives each of them no weight at all.",
                   "zh": "{answer}：每一行遮住排在它后面的 token（T 个 token 时，第一行遮 T - 1 个，下一行 T - 2 个，"
                         "最后一行 0 个），e^−∞ = 0，被遮住的 token 一点权重也分不到。"})
def masked_weights(model):
    """In layer 0, head 0, how many weights of "The king is dead, long live the" does the mask set to 0?"""
    return int(attention.explain(model, KING).masked.isinf().sum())


@exercise("04.top_word", uses=("smollm2",),
          hint={"en": "Run the next cell to see its top guess, then try again: three words leave a model many ways "
                      "to go on.",
                "zh": "运行下一个单元格，看看它最看好的词，再试一次：只有三个词，模型可以有很多种接法。"},
          explain={"en": "SmolLM2 ranks {answer!r} first after 'The king is' (its probability is printed by the next "
                         "cell): with so little text, many continuations are likely.",
                   "zh": "在 'The king is' 后面，SmolLM2 排第一的是 {answer!r}（概率由下一个单元格打印）："
                         "文本这么短，好几种接法的可能性都不小。"})
def top_word(smollm2):
    """Which word does SmolLM2 rank first after "The king is"? (type the word, without a space)"""
    return attention.top_next(smollm2, SHORT, k=1)[0].token.strip()


@exercise("04.layer10_head1", uses=("smollm2",),
          hint={"en": "Pick layer 10 and head 1 in the SmolLM2 explorer above and read the last row (where the "
                      "explorer shows as text, run views.AttentionGrid.of(smollm2, king, layer=10, head=1) in a new "
                      "cell).",
                "zh": "在上面 SmolLM2 的注意力查看器里选第 10 层、头 1，读最后一行（查看器只显示成文字时，"
                      "在新单元格里运行 views.AttentionGrid.of(smollm2, king, layer=10, head=1)）。"},
          explain={"en": "In SmolLM2's layer 10, head 1, the last token ' the' puts most of its weight on {answer!r}.",
                   "zh": "在 SmolLM2 的第 10 层、头 1 里，最后一个 token ' the' 把最多的权重放在 {answer!r} 上。"})
def layer10_head1(smollm2):
    """In SmolLM2's layer 10, head 1, which earlier word does the last token of "The king is dead, long live the"
    weigh most?"""
    trace, tokens = read_king(smollm2)
    return attention.most_attended(trace.layers[10].weights[1, -1], tokens).token.strip()


@exercise("04.keys_per_layer", uses=("smollm2",),
          hint={"en": "One key per token for each K/V head (not each query head): count SmolLM2's tokens for the "
                      "text in the grid above.",
                "zh": "每个 K/V 头给每个 token 算一个键（不是每个 query 头）：数一数上面注意力网格里 SmolLM2 把这句话切成几个 token。"},
          explain={"en": "{answer} keys: one per token for each of the layer's K/V heads. Nine query heads read them, "
                         "but keys are computed (and in notebook 5 kept) per K/V head.",
                   "zh": "{answer} 个键：这一层的每个 K/V 头给每个 token 算一个。读它们的 query 头有 9 个，"
                         "但键是按 K/V 头算的（第 5 课里也是按 K/V 头存的）。"})
def keys_per_layer(smollm2):
    """How many rows of K, counted over every K/V head, does one layer of SmolLM2 compute for
    "The king is dead, long live the"?"""
    heads, tokens, _ = read_king(smollm2)[0].layers[0].k.shape  # [n_kv_head, T, head_dim]
    return heads * tokens
