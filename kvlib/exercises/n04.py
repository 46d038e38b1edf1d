"""Notebook 4's exercises: answers computed live from the model the notebook passes."""
from . import exercise
from .. import attention
from ..trace import Trace

MARY = "Mary had a little"


def read_mary(model):  # -> the Trace of one pass over MARY, and its tokens as text
    ids = model.encode(MARY)
    trace = Trace()
    model.forward(ids, trace=trace)
    return trace, [model.decode([i]) for i in ids]


@exercise("04.first_row", tolerance=0.01,
          hint="The mask hides every later token from the first one: what is left for it to weigh?",
          explain="{answer}: the first token may see only itself, so softmax gives all of its one unit of weight "
                  "to itself, in every head of every layer.")
def first_row(model):
    """In layer 0, head 0, how much weight does the first token of "Mary had a little" give to itself?"""
    return round(attention.explain(model, MARY).weights[0, 0].item(), 4)


@exercise("04.mary_top_word", uses=("smollm2",),
          hint="Run the next cell to see its top 5, then try again: most text that starts like this is not the "
               "nursery rhyme.",
          explain="SmolLM2 ranks {answer!r} first after 'Mary had a little', and with a small probability "
                  "(printed above): most text that starts like this is not the rhyme.")
def mary_top_word(smollm2):
    """Which word does SmolLM2 rank first after "Mary had a little"? (type the word, without a space)"""
    return attention.top_next(smollm2, MARY, k=1)[0].token.strip()


@exercise("04.layer10_head1", uses=("smollm2",),
          hint="Pick layer 10 and head 1 in the SmolLM2 explorer above and read the last row.",
          explain="In SmolLM2's layer 10, head 1, the last token ' little' puts most of its weight on {answer!r}.")
def layer10_head1(smollm2):
    """In SmolLM2's layer 10, head 1, which earlier word does the last token of "Mary had a little" weigh most?"""
    trace, tokens = read_mary(smollm2)
    return attention.most_attended(trace.layers[10].weights[1, -1], tokens).token.strip()


@exercise("04.keys_per_layer", uses=("smollm2",),
          hint="One key per token for each K/V head (not each query head): count SmolLM2's tokens for the prompt "
               "in the grid above.",
          explain="{answer} keys: one per token for each of the layer's K/V heads. Nine query heads read them, "
                  "but keys are computed (and in notebook 5 cached) per K/V head.")
def keys_per_layer(smollm2):
    """How many rows of K, counted over every K/V head, does one layer of SmolLM2 compute for
    "Mary had a little"?"""
    heads, tokens, _ = read_mary(smollm2)[0].layers[0].k.shape  # [n_kv_head, T, head_dim]
    return heads * tokens
