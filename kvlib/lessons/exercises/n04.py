"""Notebook 4's exercises: answers computed live from the model the notebook passes."""
from ...model.trace import Trace
from .. import attention
from . import exercise

SHORT, KING = "The king is", "The king is dead, long live the"  # the notebook's running example
LINE = "To be, or not to be, that is the"  # Hamlet's line: a text the learner has not seen in notebook 4's heads
PREVIOUS_TOKEN_HEAD = 16, 0  # SmolLM2's (layer, head) whose every row weighs the token just before it most, on
#                              every text tried: KING, LINE, "Mary had a little lamb, ...", "The capital of France is"...


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
          hint={"en": "A model ranks each word by how often it came next in text like its training text, summed over "
                      "every way the sentence could go on. So a word that begins many endings wins: after 'I want', "
                      "the endings 'to go', 'to eat', 'to sleep', 'more' and 'you' make 'to' likelier than any other. "
                      "Which short word begins the most endings of 'The king is ...'?",
                "zh": "模型给每个词排名，看的是在它读过的那类文字里这个词接在后面有多常见，把句子所有可能的接法都加在一起。"
                      "所以能开启很多种结尾的词占便宜：'I want' 后面可以接 to go、to eat、to sleep、more、you，"
                      "to 打头的最多，它就比别的词更可能。'The king is ...' 的各种结尾里，哪个短词打头的最多？"},
          explain={"en": "SmolLM2 ranks {answer!r} first after 'The king is' (the next cell prints its probability): "
                         "with so little text no one ending is likely, so a short word that begins many of them beats "
                         "any vivid one.",
                   "zh": "在 'The king is' 后面，SmolLM2 排第一的是 {answer!r}（概率由下一个单元格打印）："
                         "文本这么短，没有哪一种结尾特别可能，所以能开启很多种结尾的短词胜过任何一个具体的词。"})
def top_word(smollm2):
    """Which word does SmolLM2 rank first after "The king is"? (type the word, without a space)"""
    return attention.top_next(smollm2, SHORT, k=1)[0].token.strip()


@exercise("04.previous_token", uses=("smollm2",),
          hint={"en": "In the explorer, pick layer 16, head 0 and compare each row's darkest cell with the row's own "
                      "token: how far back is it? Take the same step back from the last ' the' of the new text.",
                "zh": "在注意力查看器里选第 16 层、头 0，把每一行颜色最深的那一格和这一行自己的 token 比一比：往回隔了几个？"
                      "从新句子最后的 ' the' 往回隔同样几个。"},
          explain={"en": "{answer!r}, the token just before ' the'. Layer 16, head 0 is a previous-token head: each "
                         "query weighs the key one position back most, whatever the words there, so the rule you found "
                         "on one sentence predicts its rows on a text you never looked at in it.",
                   "zh": "{answer!r}，也就是紧挨在 ' the' 前面的那个 token。第 16 层、头 0 是一个“前一个 token”头："
                         "每个 query 都最看重往回一个位置的 key，不管那里是什么词，所以你在一句话上找到的规律，"
                         "能预测它在一段你从没在这个头里看过的文字上的每一行。"})
def previous_token(smollm2):
    """In SmolLM2's layer 16, head 0, each token of "The king is dead, long live the" gives most of its weight to
    one earlier token: find the rule in the explorer. Then predict: in that head, reading "To be, or not to be, that
    is the", which word does the last token ' the' weigh most?"""
    ids, trace = smollm2.encode(LINE), Trace()
    smollm2.forward(ids, trace=trace)
    layer, head = PREVIOUS_TOKEN_HEAD
    return attention.most_attended(trace.layers[layer].weights[head, -1], [smollm2.decode([i]) for i in ids]).token.strip()


@exercise("04.keys_per_layer", uses=("smollm2",),
          hint={"en": "One key per token for each K/V head (not each query head): count SmolLM2's tokens for the "
                      "text in the grid above.",
                "zh": "每个 K/V 头给每个 token 算一个 key（不是每个 query 头）：数一数上面注意力网格里 SmolLM2 把这句话切成几个 token。"},
          explain={"en": "{answer} keys: one per token for each of the layer's K/V heads. Nine query heads read them, "
                         "but keys are computed (and in notebook 5 kept) per K/V head.",
                   "zh": "{answer} 个 key：这一层的每个 K/V 头给每个 token 算一个。读它们的 query 头有 9 个，"
                         "但 key 是按 K/V 头算的（第 5 课里也是按 K/V 头存的）。"})
def keys_per_layer(smollm2):
    """How many rows of K, counted over every K/V head, does one layer of SmolLM2 compute for
    "The king is dead, long live the"?"""
    heads, tokens, _ = read_king(smollm2)[0].layers[0].k.shape  # [n_kv_head, T, head_dim]
    return heads * tokens
