"""Notebook 2's exercises: answers computed live from the tokenizers."""

from . import exercise
from .. import tokenization

CHOICES = {"a": tokenization.gpt2, "b": lambda: tokenization.openai("cl100k_base"),
           "c": lambda: tokenization.openai("o200k_base")}


@exercise("02.will_tokens", hint="Count the coloured boxes in the GPT-2 row of the app below: its text starts "
                                  "with Will will.",
          explain="GPT-2 cuts 'Will will' into {answer} tokens: 'Will' and ' will' (the space belongs to the "
                  "second word), two different ids.")
def will_tokens(model):
    """How many tokens does GPT-2's tokenizer use for "Will will"?"""
    return len(tokenization.gpt2().encode("Will will"))


@exercise("02.space_same_id", hint="Type 'will', then ' will' (a space first), into the app below, and compare "
                                    "the ids in the GPT-2 row.",
          explain="{answer}: the space is part of the chunk, so ' will' and 'will' are different entries in "
                  "the vocabulary, with different ids.")
def space_same_id(model):
    """Does " will" (with a space before it) get the same GPT-2 id as "will"? (True or False)"""
    gpt2 = tokenization.gpt2()
    return gpt2.encode(" will") == gpt2.encode("will")


@exercise("02.fewest_chinese",
          hint="Bigger vocabularies have room for more whole Chinese words. Which of the three is the newest?",
          explain="({answer}) The newest vocabulary, o200k_base (about 200,000 tokens), holds many Chinese "
                  "words whole; GPT-2's 50,257 mostly cut Chinese characters into bytes.")
def fewest_chinese(model):
    """Which tokenizer uses the fewest tokens for the Chinese sentence? (a) GPT-2 (b) cl100k_base (GPT-4)
    (c) o200k_base (GPT-4o / GPT-5)"""
    text = tokenization.SAME_SENTENCE["Chinese"]
    return min(CHOICES, key=lambda k: len(CHOICES[k]().encode(text)))
