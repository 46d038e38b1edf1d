"""View 1, tokens: a strip of chips, one per token, its id beneath; hover for id, position and bytes.

The strip the other views link to: hovering a chip lights that token up in every view of the run."""

import reprlib

import traitlets as T

from ...i18n import t
from ...lessons import tokenization
from ...model.models import KVLibError, Model
from .base import View, link_for, module


class TokenStrip(View):
    _esm = module("tokens.js")
    WORDS = "tokens"
    title = T.Unicode("").tag(sync=True)
    tokens = T.List().tag(sync=True)  # [{"text", "id", "bytes" (hex pairs), "pos"}]
    mark = T.Int(-1).tag(sync=True)   # where two prompts part: a bar before this token, the rest outlined

    @classmethod
    def of(cls, tokenizer, text, title=None, link=None):
        """Cut `text` with a tokenization.Tokenizer (or a Model: its own tokenizer) and show the chips."""
        return cls(**cls.data(tokenizer, text, title, link))

    @staticmethod
    def data(tokenizer, text, title=None, link=None):  # -> the traits of a strip, to build or update one
        if isinstance(tokenizer, Model):
            tokenizer = tokenization.for_model(tokenizer)
        if not (isinstance(tokenizer, tokenization.Tokenizer) and isinstance(text, str)):
            raise KVLibError(f"TokenStrip.of takes a tokenizer (tokenization.gpt2(), or a loaded model for its own) and "
                             f"the text to cut, a str; got {reprlib.repr(tokenizer)} and {reprlib.repr(text)}")
        chunks = tokenization.chunks(tokenizer, text)
        texts = [c.text for c in chunks]
        title = title if title is not None else t("strip.title", name=tokenizer.name, tokens=len(chunks),
                                                  chars=len(text), bytes=len(text.encode()))
        return dict(title=title, link=link or link_for(texts), tokens=[
            {"text": c.text, "id": c.id, "bytes": c.bytes.hex(" "), "pos": k} for k, c in enumerate(chunks)])

    def summary(self):
        chips = [f"{t['text']!r} {t['id']}" for t in self.tokens]
        if 0 <= self.mark < len(chips):
            chips.insert(self.mark, t("strip.differs"))
        return self.title + "\n" + " | ".join(chips)
