"""Notebook 1's exercises: answers computed live from the models the notebook passes."""

from ..loop import feed_loop, softmax_at
from . import exercise

LINE = "The king is dead, long live the"  # the course's running example, notebooks 1 to 6


@exercise("01.second_token", uses=("smollm2",),
          hint={"en": "The loop feeds back the whole line with SmolLM2's first pick on the end. In a text that "
                      "held that line, what would come next?",
                "zh": "循环把整句话连同 SmolLM2 挑出的第一个 token 一起喂回去。一段文字里写到这里，接下来会是什么？"},
          explain={"en": "SmolLM2 picks {answer!r} after its first pick: the loop fed back the line with that token "
                         "appended, and this is its greedy choice for the token after. The answer went back in, so the "
                         "model continues from it.",
                   "zh": "SmolLM2 在第一个 token 之后挑了 {answer!r}：循环把这句话和那个 token 一起喂了回去，这是它贪心选出的"
                         "下一个 token。答案回到了输入里，模型才能接着往下写。"})
def second_token(smol):
    """SmolLM2 picks a token after "The king is dead, long live the"; the loop appends it and runs again.
    Which token does it pick next?"""
    return feed_loop(smol, LINE, 2, "whole").tokens[1].strip()


@exercise("01.tokens_read", uses=("smollm2",),
          hint={"en": "Step 1 reads the whole line, step 2 one token more, step 3 one more again... add up ten steps.",
                "zh": "第 1 步读整句话，第 2 步多读一个 token，第 3 步再多一个……把十步加起来。"},
          explain={"en": "{answer} tokens in all, to write 10: the line alone is read ten times. Notebook 5's KV cache "
                         "cuts this to one read of each token.",
                   "zh": "为了写 10 个 token，一共读了 {answer} 个：光是那句话就读了十遍。第 5 课的 KV 缓存让每个 token "
                         "只读一遍。"})
def tokens_read(smol):
    """Without a cache, how many tokens does SmolLM2 read in all (summed over the steps) to write 10 tokens
    after "The king is dead, long live the"?"""
    return sum(len(fed) for fed in feed_loop(smol, LINE, 10, "whole").inputs)


@exercise("01.doubling", uses=("smollm2",), tolerance=0.03,
          hint={"en": "Twice the passes, but the later passes are longer: add up the inputs of 20 steps and divide by "
                      "the 10-step total.",
                "zh": "前向计算多了一倍，可后面的每一次都更长：把 20 步的输入加起来，再除以 10 步的总数。"},
          explain={"en": "About {answer:.2f} times: twice as many passes, and the extra passes are the longest ones. "
                         "Without a cache the reading grows faster than the answer (with the square of its length, "
                         "for long answers); notebook 5's cache makes it grow in step.",
                   "zh": "大约 {answer:.2f} 倍：前向计算多了一倍，而多出来的恰好是最长的那些。没有缓存，读的量比答案长得快"
                         "（答案很长时，跟长度的平方成正比）；第 5 课的缓存让两者同步增长。"})
def doubling(smol):
    """Without a cache, writing 20 tokens after "The king is dead, long live the" takes twice the forward passes
    of writing 10. How many times as many tokens does SmolLM2 read in all?"""
    read = [len(fed) for fed in feed_loop(smol, LINE, 20, "whole").inputs]  # tokens fed at each step
    return sum(read) / sum(read[:10])  # greedy: the first 10 steps are the 10-token run


@exercise("01.hotter", uses=("smollm2",),
          hint={"en": "Dividing the scores by 2 brings them closer together: does the leader keep its lead?",
                "zh": "分数都除以 2，彼此就靠得更近了：领先的那个还能保住优势吗？"},
          explain={"en": "({answer}) Dividing every score by T = 2 shrinks the gaps between them, so softmax spreads "
                         "the probability more evenly and the favourite loses some of it.",
                   "zh": "（{answer}）每个分数都除以 T = 2，差距就缩小了，softmax 把概率分得更均匀，最被看好的那个就分走得少了。"})
def hotter(smol):
    """After "The king is dead, long live the", is SmolLM2's top token more likely at temperature 2 than at
    temperature 1? (a) more likely (b) less likely (c) the same"""
    logits = smol.forward(LINE)[-1]
    p1, p2 = softmax_at(logits, 1.0).max(), softmax_at(logits, 2.0).max()
    return "a" if p2 > p1 else "b" if p2 < p1 else "c"
