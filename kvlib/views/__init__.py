"""Views drawn in the browser (anywidget): plain data from a live run in, hover and animation out.

The rule: interaction in the browser (these views), curves and static figures in matplotlib
(kvlib.plots). Each view is a .js module here and a class whose `of(...)` builds it from a run."""

from .base import View, link_for
from .matrix import Matrix
from .tokens import Tokens

__all__ = ["Matrix", "Tokens", "View", "link_for"]
