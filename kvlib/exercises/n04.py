"""Notebook 4's exercises: answers computed live from the model the notebook passes."""
from . import exercise
from .. import attention
from ..trace import Trace

MARY = "Mary had a little"


@exercise("04.row_sum", tolerance=0.01,
          hint="Softmax turns a row of scores into shares of one whole.",
          explain="Every row sums to {answer}: softmax makes the weights shares of one whole, so a token can only "
                  "move its attention around, never get more of it.")
def row_sum(model):
    """What does one row of attention weights add up to?"""
    return round(attention.explain(model, MARY).weights[-1].sum().item(), 4)


@exercise("04.mary_top_word", uses=("smollm2",),
          hint="Not the nursery rhyme: look at the top-5 the model printed, not at what you remember.",
          explain="SmolLM2 ranks {answer!r} first after 'Mary had a little', and with a small probability "
                  "(printed above): most text that starts like this is not the rhyme.")
def mary_top_word(smollm2):
    """Which word does SmolLM2 rank first after "Mary had a little"? (type the word, without a space)"""
    return attention.top_next(smollm2, MARY, k=1)[0][0].strip()


@exercise("04.layer10_head1", uses=("smollm2",),
          hint="Pick layer 10 and head 1 in the SmolLM2 explorer above and read the last row.",
          explain="In SmolLM2's layer 10, head 1, the last token ' little' puts most of its weight on {answer!r}.")
def layer10_head1(smollm2):
    """In SmolLM2's layer 10, head 1, which earlier word does the last token of "Mary had a little" weigh most?"""
    trace = Trace()
    smollm2.forward(smollm2.encode(MARY), trace=trace)
    tokens = [smollm2.decode([i]) for i in smollm2.encode(MARY)]
    return attention.most_attended(trace.layers[10].weights[1, -1], tokens)[1].strip()


@exercise("04.heads_per_kv", uses=("smollm2",),
          hint="Divide the number of query heads by the number of K/V heads (the model's line says both).",
          explain="{answer} query heads read each K/V head: SmolLM2 computes and caches 3 keys and values per token "
                  "and layer instead of 9.")
def heads_per_kv(smollm2):
    """How many of SmolLM2's query heads share one K/V head?"""
    return smollm2.config.n_head // smollm2.config.n_kv_head
