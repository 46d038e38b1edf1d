"""The base of every browser view: an anywidget with kvlib's shared JS and style, linked by run.

A view is a small ES module (a .js file beside this one) and a thin Python class whose traits
carry plain data from a live run (token strings, rounded numbers, shapes, byte counts), sent
once; the browser does hover, animation, stepping and switching without calling the kernel.
anywidget (manzt/anywidget) ships its front-end in its wheel, so nothing is fetched.

Views of one run share a `link` name (by default, one made from the prompt's tokens, so a
generation's views link through its prompt): hovering a token in one lights it up in all of
them. Where a front-end cannot show widgets (nbconvert's HTML, a repository viewer), a view
shows its `summary()` as text instead of a blank.
"""

import hashlib
import html
import json
import reprlib
from pathlib import Path

import anywidget
import torch
import traitlets as T

from ...errors import is_count
from ...i18n import words
from ...lessons import tokenization
from ...model.models import KVLibError, Model

HERE = Path(__file__).parent
MAX_STATE_BYTES = 1_000_000  # a view's data, as sent to the browser


def module(name):  # a view's ES module: the shared helpers (KV.*), then the view itself
    return (HERE / "common.js").read_text() + "\n" + (HERE / name).read_text()


def link_for(tokens):  # one name per prompt: views of a run from the same prompt tokens link up unasked
    return "run-" + hashlib.blake2b("\x00".join(tokens).encode(), digest_size=6).hexdigest()


def rounded(x, digits):  # a tensor or nested list -> nested lists of floats, rounded for display
    if hasattr(x, "tolist"):  # double: any float dtype becomes Python floats, float64 without losing a digit
        x = x.detach().cpu().double().tolist() if hasattr(x, "detach") else x.tolist()
    if isinstance(x, list):
        return [rounded(v, digits) for v in x]
    return round(float(x), digits)


def pieces(model, ids):
    """Each token's label: its text alone, or where that is part of a character (decoded alone it is "�"), its
    bytes named as notebook 2's chips name them (<0xE8>), so a grid of Chinese text says which bytes each row holds."""
    tok = tokenization.for_model(model)
    return [text if "\ufffd" not in (text := model.decode([i])) else tokenization.Chunk(i, tok.token_bytes(i)).text
            for i in ids]


def run_text(model, ids):
    """A run of tokens' text (a cache block's): its whole characters, and each byte of a character the run cuts at
    its start or end named as pieces names it (<0xE8>), where decoding the run alone would print "�"."""
    tok = tokenization.for_model(model)
    return b"".join(map(tok.token_bytes, ids)).decode("utf-8", errors="kvlib.byte_names")


def check_model(model, who):  # -> model, once it is a loaded kvlib Model (not its name, a trace or a tokenizer)
    if not isinstance(model, Model):
        raise KVLibError(f"{who} takes a loaded model, as kvlib.load_model('tiny') returns; got {reprlib.repr(model)}")
    return model


def prompt_ids(model, prompt, who):  # -> the prompt's ids as a list, checked against the model's vocabulary and context
    ids = prompt.tolist() if hasattr(prompt, "tolist") else prompt
    if not (isinstance(ids, str) or isinstance(ids, (list, tuple)) and all(map(is_count, ids))):
        raise KVLibError(f"{who} takes the prompt as text or a flat list of token ids (whole numbers); "
                         f"got {reprlib.repr(prompt)}")
    return model.check_ids(ids).tolist()


def layer_head(model, layer, head, mean=False):  # -> (layer, head) as Python ints (head may be "mean" if mean)
    c, or_mean = model.config, " (or head='mean')" if mean else ""
    is_mean = mean and isinstance(head, str) and head == "mean"
    if not (is_count(layer) and 0 <= layer < c.n_layer and (is_mean or is_count(head) and 0 <= head < c.n_head)):
        raise KVLibError(f"{model.name} has layers 0-{c.n_layer - 1} and heads 0-{c.n_head - 1}{or_mean}: pass "
                         f"whole numbers in those ranges; got layer {layer!r}, head {head!r}")
    return int(layer), head if is_mean else int(head)  # numpy's ints too: a trait takes Python's only


def numbers(x, what):  # -> x as a float64 tensor of finite numbers, or a KVLibError saying what to pass
    try:
        t = torch.as_tensor(x, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):  # a string, a model, rows of unequal lengths
        raise KVLibError(f"{what} must be numbers: a tensor, or nested lists of equal lengths; "
                         f"got {reprlib.repr(x)}") from None
    if not t.isfinite().all():  # JSON, how a view reaches the browser, has no NaN or infinity
        raise KVLibError(f"{what} holds NaN or infinity, which a view cannot send to the browser: pass finite "
                         "numbers (torch.nan_to_num replaces them)")
    return t


class View(anywidget.AnyWidget):
    _css = (HERE / "style.css").read_text()
    link = T.Unicode("").tag(sync=True)   # views with the same link light up together
    words = T.Dict().tag(sync=True)       # the labels its JS writes, in kvlib's language (i18n.words(WORDS))
    WORDS = None                          # the prefix of those labels in i18n.TEXT (or a tuple of prefixes)

    def __init__(self, **traits):
        if self.WORDS:
            prefixes = (self.WORDS,) if isinstance(self.WORDS, str) else self.WORDS
            traits.setdefault("words", {k: v for prefix in prefixes for k, v in words(prefix).items()})
        try:
            super().__init__(**traits)
        except T.TraitError as err:  # a title that is no string, say; traitlets' words already name what it takes
            raise KVLibError(str(err)) from None

    def summary(self):  # -> text a reader gets where widgets cannot be shown
        raise NotImplementedError

    def state_bytes(self):  # the size of the data this view sends (its module and style not counted)
        skip = {"_esm", "_css", "_anywidget_id"}
        return len(json.dumps({k: v for k, v in self.get_state().items() if k not in skip}, default=str))

    def check_size(self, more=0):  # more: bytes about to be added (refused before they are sent)
        n = self.state_bytes() + more
        if n > MAX_STATE_BYTES:
            raise KVLibError(f"this view would send {n:,} bytes to the browser (more than {MAX_STATE_BYTES:,}): "
                             "use a shorter prompt or fewer steps")
        return self

    def _repr_mimebundle_(self, **kwargs):
        data, metadata = super()._repr_mimebundle_(**kwargs)
        return with_fallback(data, self.summary()), metadata


def with_fallback(data, text):  # a display bundle that reads as `text` where the widget cannot be drawn
    data["text/plain"] = text
    data["text/html"] = f"<pre>{html.escape(text)}</pre>"
    return data
