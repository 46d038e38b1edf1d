"""Notebook 2's exercises: answers computed live from the tokenizers."""

from .. import tokenization
from . import exercise

CHOICES = {"a": tokenization.gpt2, "b": lambda: tokenization.openai("cl100k_base"),
           "c": lambda: tokenization.openai("o200k_base")}


@exercise("02.will_tokens",
          hint={"en": "Count the coloured boxes in the GPT-2 row of the app below: its text starts with Will will.",
                "zh": "数一数下面小工具里 GPT-2 那一行的彩色方块：文本开头就是 Will will。"},
          explain={"en": "GPT-2 cuts 'Will will' into {answer} tokens: 'Will' and ' will' (the space belongs to the "
                         "second word), two different ids.",
                   "zh": "GPT-2 把 'Will will' 切成 {answer} 个 token：'Will' 和 ' will'（空格归后一个词），"
                         "是两个不同的 id。"})
def will_tokens(model):
    """How many tokens does GPT-2's tokenizer use for "Will will"?"""
    return len(tokenization.gpt2().encode("Will will"))


@exercise("02.space_same_id",
          hint={"en": "Type 'will', then ' will' (a space first), into the app below, and compare the ids in the "
                      "GPT-2 row.",
                "zh": "在下面的小工具里先输入 'will'，再输入 ' will'（前面带空格），比较 GPT-2 那一行的 id。"},
          explain={"en": "{answer}: the space is part of the chunk, so ' will' and 'will' are different entries in "
                         "the vocabulary, with different ids.",
                   "zh": "{answer}：空格是 token 的一部分，所以 ' will' 和 'will' 是词表里两个不同的条目，id 也不同。"})
def space_same_id(model):
    """Does " will" (with a space before it) get the same GPT-2 id as "will"? (True or False)"""
    gpt2 = tokenization.gpt2()
    return gpt2.encode(" will") == gpt2.encode("will")


@exercise("02.fewest_chinese",
          hint={"en": "Bigger vocabularies have room for more whole Chinese words. Which of the three is the newest?",
                "zh": "词表越大，能整块收下的中文词就越多。三个里哪个最新？"},
          explain={"en": "({answer}) The newest vocabulary, o200k_base (about 200,000 tokens), holds many Chinese "
                         "words whole; GPT-2's 50,257 mostly cut Chinese characters into bytes.",
                   "zh": "（{answer}）最新的词表 o200k_base（约 20 万个 token）把很多中文词整个收了进去；"
                         "GPT-2 那 5 万多个 token 的词表，大多只能把汉字拆成字节。"})
def fewest_chinese(model):
    """Which tokenizer uses the fewest tokens for the Chinese sentence? (a) GPT-2 (b) cl100k_base (GPT-4)
    (c) o200k_base (GPT-4o / GPT-5)"""
    text = tokenization.SAME_SENTENCE["Chinese"]
    return min(CHOICES, key=lambda k: len(CHOICES[k]().encode(text)))
