"""Notebook 3's exercises: answers computed live from the model the notebook passes."""
from . import exercise
from .. import embeddings


@exercise("03.table_numbers", tolerance=0.01,
          hint="The model's line above gives its vocabulary (rows) and its dims (numbers per row): multiply them.",
          explain="The table has one row per token in the vocabulary and n_embd numbers per row: {answer:,} "
                  "numbers, all learned in training.")
def table_numbers(model):
    """How many numbers does the model's embedding table hold?"""
    return model.config.vocab_size * model.config.n_embd


@exercise("03.king_queen_or_table", uses=("smollm2",),
          hint="Words used in the same kind of sentence get rows that point the same way (a cosine near 1).",
          explain="{answer!r} it is: in SmolLM2's table ' king' points much more nearly the same way as ' queen' "
                  "than as ' table'. Nobody wrote that in; training put words used alike near each other.")
def king_queen_or_table(smollm2):
    """Which row points more nearly the same way as ' king' in SmolLM2: (a) ' queen' or (b) ' table'?"""
    return "a" if embeddings.similarity(smollm2, "king", "queen") > embeddings.similarity(smollm2, "king", "table") \
        else "b"


@exercise("03.dims_to_85", uses=("smollm2",),
          hint="One dimension keeps only the widest difference; each one added gives the families more room. "
               "Then run the next cell and read its curve: SmolLM2's first dot at or above 85 %.",
          explain="SmolLM2's families first reach 85 % separation with {answer} dimensions kept: fewer are too "
                  "few to hold what sets the families apart, out of the 576 its table has.")
def dims_to_85(smollm2):
    """In how many PCA dimensions does the family separation of SmolLM2's embeddings first reach 85 %?"""
    return embeddings.dims_to_reach(embeddings.separation_by_dims(smollm2), 0.85)
