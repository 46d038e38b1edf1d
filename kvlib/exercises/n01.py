"""Notebook 1's exercises: answers computed live from the models the notebook passes."""

from . import exercise
from ..generate import feed_loop, generate, softmax_at

CAPITAL = "The capital of France is"


@exercise("01.capital", uses=("smollm2",),
          hint="It is a well-known fact; type the word alone, without the space before it.",
          explain="SmolLM2's highest score after 'The capital of France is' goes to the token ' {answer}' "
                  "(with its leading space): a trained model has learned facts from its text.")
def capital(smol):
    """What word does SmolLM2 pick greedily after "The capital of France is"?"""
    return smol.decode([int(smol.forward(CAPITAL)[-1].argmax())]).strip()


@exercise("01.passes", hint="Each new token needs the model's scores for what comes next: one run each.",
          explain="{answer} forward passes: one per new token. Without a cache each pass reads the whole "
                  "sequence so far, which is why it gets slower as the text grows.")
def passes(model):
    """How many forward passes does generating 10 tokens take without a cache?"""
    gen = generate(model, "ROMEO.\n", 10, use_cache=False, stop_at_eos=False)
    return len(gen.step_seconds)  # one timed forward pass per step


@exercise("01.tokens_read", uses=("smollm2",),
          hint="Step 1 reads the 5 prompt tokens, step 2 reads 6, step 3 reads 7... add up ten steps.",
          explain="{answer} tokens in all (5 + 6 + ... + 14), to write 10. The prompt alone is read ten times: "
                  "notebook 5's KV cache cuts this to one read of each token.")
def tokens_read(smol):
    """Without a cache, how many tokens does SmolLM2 read in all (summed over the steps) to write 10 tokens
    after the 5-token prompt "The capital of France is"?"""
    return sum(len(fed) for fed in feed_loop(smol, CAPITAL, 10, "whole").inputs)


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
