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
          hint="Go row by row: the first token's row hides every token after it, the next row one fewer... "
               "Count the tokens in the cell above, then add up what each row hides.",
          explain="{answer}: each row hides the tokens after its own (for T tokens, T - 1 in the first row, then "
                  "T - 2, down to 0 in the last), and e^−∞ = 0 gives each of them no weight at all.")
def masked_weights(model):
    """In layer 0, head 0, how many weights of "The king is dead, long live the" does the mask set to 0?"""
    return int(attention.explain(model, KING).masked.isinf().sum())


@exercise("04.top_word", uses=("smollm2",),
          hint="Run the next cell to see its top guess, then try again: three words leave a model many ways to go on.",
          explain="SmolLM2 ranks {answer!r} first after 'The king is' (its probability is printed by the next "
                  "cell): with so little text, many continuations are likely.")
def top_word(smollm2):
    """Which word does SmolLM2 rank first after "The king is"? (type the word, without a space)"""
    return attention.top_next(smollm2, SHORT, k=1)[0].token.strip()


@exercise("04.layer10_head1", uses=("smollm2",),
          hint="Pick layer 10 and head 1 in the SmolLM2 explorer above and read the last row (where the explorer "
               "shows as text, run views.AttentionGrid.of(smollm2, king, layer=10, head=1) in a new cell).",
          explain="In SmolLM2's layer 10, head 1, the last token ' the' puts most of its weight on {answer!r}.")
def layer10_head1(smollm2):
    """In SmolLM2's layer 10, head 1, which earlier word does the last token of "The king is dead, long live the"
    weigh most?"""
    trace, tokens = read_king(smollm2)
    return attention.most_attended(trace.layers[10].weights[1, -1], tokens).token.strip()


@exercise("04.keys_per_layer", uses=("smollm2",),
          hint="One key per token for each K/V head (not each query head): count SmolLM2's tokens for the text "
               "in the grid above.",
          explain="{answer} keys: one per token for each of the layer's K/V heads. Nine query heads read them, "
                  "but keys are computed (and in notebook 5 kept) per K/V head.")
def keys_per_layer(smollm2):
    """How many rows of K, counted over every K/V head, does one layer of SmolLM2 compute for
    "The king is dead, long live the"?"""
    heads, tokens, _ = read_king(smollm2)[0].layers[0].k.shape  # [n_kv_head, T, head_dim]
    return heads * tokens
