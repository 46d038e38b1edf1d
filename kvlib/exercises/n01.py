"""Notebook 1's exercises: answers computed live from the models the notebook passes."""

from . import exercise
from ..generate import feed_loop, softmax_at

LINE = "To be, or not to be, that is the"  # the notebook's running example


@exercise("01.second_token", uses=("smollm2",),
          hint="The loop feeds back the whole line with SmolLM2's first pick on the end. What would a text "
               "that held Hamlet's line, or any sentence like it, have next?",
          explain="SmolLM2 picks {answer!r} after its first pick: the loop fed back the line with that token "
                  "appended, and this is its greedy choice for the token after. The answer went back in, so the "
                  "model continues from it.")
def second_token(smol):
    """SmolLM2 picks a token after "To be, or not to be, that is the"; the loop appends it and runs again.
    Which token does it pick next?"""
    return feed_loop(smol, LINE, 2, "whole").tokens[1].strip()


@exercise("01.tokens_read", uses=("smollm2",),
          hint="Step 1 reads the whole line, step 2 one token more, step 3 one more again... add up ten steps.",
          explain="{answer} tokens in all, to write 10: the line alone is read ten times. Notebook 5's KV cache "
                  "cuts this to one read of each token.")
def tokens_read(smol):
    """Without a cache, how many tokens does SmolLM2 read in all (summed over the steps) to write 10 tokens
    after "To be, or not to be, that is the"?"""
    return sum(len(fed) for fed in feed_loop(smol, LINE, 10, "whole").inputs)


@exercise("01.doubling", uses=("smollm2",), tolerance=0.03,
          hint="Twice the passes, but the later passes are longer: add up the inputs of 20 steps and divide by "
               "the 10-step total.",
          explain="About {answer:.2f} times: twice as many passes, and the extra passes are the longest ones. "
                  "Without a cache the reading grows faster than the answer (with the square of its length, "
                  "for long answers); notebook 5's cache makes it grow in step.")
def doubling(smol):
    """Without a cache, writing 20 tokens after "To be, or not to be, that is the" takes twice the forward passes
    of writing 10. How many times as many tokens does SmolLM2 read in all?"""
    read = [len(fed) for fed in feed_loop(smol, LINE, 20, "whole").inputs]  # tokens fed at each step
    return sum(read) / sum(read[:10])  # greedy: the first 10 steps are the 10-token run


@exercise("01.hotter", uses=("smollm2",),
          hint="Dividing the scores by 2 brings them closer together: does the leader keep its lead?",
          explain="({answer}) Dividing every score by T = 2 shrinks the gaps between them, so softmax spreads "
                  "the probability more evenly and the favourite loses some of it.")
def hotter(smol):
    """After "To be, or not to be, that is the", is SmolLM2's top token more likely at temperature 2 than at
    temperature 1? (a) more likely (b) less likely (c) the same"""
    logits = smol.forward(LINE)[-1]
    p1, p2 = softmax_at(logits, 1.0).max(), softmax_at(logits, 2.0).max()
    return "a" if p2 > p1 else "b" if p2 < p1 else "c"
