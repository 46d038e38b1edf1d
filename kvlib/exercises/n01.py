"""Notebook 1's exercises: answers computed live from the models the notebook passes."""

from . import exercise
from ..generate import feed_loop, softmax_at

CAPITAL = "The capital of France is"


@exercise("01.capital", uses=("smollm2",),
          hint="It is a well-known fact; type the word alone, without the space before it.",
          explain="This copy of SmolLM2 gives its highest score after 'The capital of France is' to the token "
                  "' {answer}' (with its leading space). Its training text most likely held that fact many times; "
                  "one prompt shows what it picks, not why.")
def capital(smol):
    """What word does SmolLM2 pick greedily after "The capital of France is"?"""
    return smol.decode([int(smol.forward(CAPITAL)[-1].argmax())]).strip()


@exercise("01.tokens_read", uses=("smollm2",),
          hint="Step 1 reads the 5 prompt tokens, step 2 reads 6, step 3 reads 7... add up ten steps.",
          explain="{answer} tokens in all (5 + 6 + ... + 14), to write 10. The prompt alone is read ten times: "
                  "notebook 5's KV cache cuts this to one read of each token.")
def tokens_read(smol):
    """Without a cache, how many tokens does SmolLM2 read in all (summed over the steps) to write 10 tokens
    after the 5-token prompt "The capital of France is"?"""
    return sum(len(fed) for fed in feed_loop(smol, CAPITAL, 10, "whole").inputs)


@exercise("01.doubling", uses=("smollm2",), tolerance=0.03,
          hint="Twice the passes, but the later passes are longer: add up the inputs of 20 steps "
               "(5, 6, ... 24) and divide by the 10-step total.",
          explain="About {answer:.2f} times: twice as many passes, and the extra passes are the longest ones. "
                  "Without a cache the reading grows faster than the answer (with the square of its length, "
                  "for long answers); notebook 5's cache makes it grow in step.")
def doubling(smol):
    """Without a cache, writing 20 tokens after the 5-token question takes twice the forward passes of writing 10.
    How many times as many tokens does SmolLM2 read in all?"""
    read = [len(fed) for fed in feed_loop(smol, CAPITAL, 20, "whole").inputs]  # tokens fed at each step
    return sum(read) / sum(read[:10])  # greedy: the first 10 steps are the 10-token run


@exercise("01.hotter", uses=("smollm2",),
          hint="Dividing the scores by 2 brings them closer together: does the leader keep its lead?",
          explain="({answer}) Dividing every score by T = 2 shrinks the gaps between them, so softmax spreads "
                  "the probability more evenly and the favourite loses some of it.")
def hotter(smol):
    """After "The capital of France is", is SmolLM2's top token more likely at temperature 2 than at
    temperature 1? (a) more likely (b) less likely (c) the same"""
    logits = smol.forward(CAPITAL)[-1]
    p1, p2 = softmax_at(logits, 1.0).max(), softmax_at(logits, 2.0).max()
    return "a" if p2 > p1 else "b" if p2 < p1 else "c"
