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
from pathlib import Path

import anywidget
import traitlets as T

from ..models import KVLibError

HERE = Path(__file__).parent
MAX_STATE_BYTES = 1_000_000  # a view's data, as sent to the browser


def module(name):  # a view's ES module: the shared helpers (KV.*), then the view itself
    return (HERE / "common.js").read_text() + "\n" + (HERE / name).read_text()


def link_for(tokens):  # one name per prompt: views of a run from the same prompt tokens link up unasked
    return "run-" + hashlib.blake2b("\x00".join(tokens).encode(), digest_size=6).hexdigest()


def rounded(x, digits):  # a tensor or nested list -> nested lists of floats, rounded for display
    if hasattr(x, "tolist"):
        x = x.detach().cpu().float().tolist() if hasattr(x, "detach") else x.tolist()
    if isinstance(x, list):
        return [rounded(v, digits) for v in x]
    return round(float(x), digits)


class View(anywidget.AnyWidget):
    _css = (HERE / "style.css").read_text()
    link = T.Unicode("").tag(sync=True)   # views with the same link light up together

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
