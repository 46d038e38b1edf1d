"""Views drawn in the browser (anywidget): plain data from a live run in, hover and animation out.

The rule: interaction in the browser (these views), curves and static figures in matplotlib
(kvlib.ui.plots). Each view is a .js module here and a class built from a run (`of(...)`, or by the
app that feeds it, as PromptCacheStream feeds PromptBlocks)."""

from .attention import AttentionGrid
from .base import View, link_for
from .blocks import PromptBlocks
from .cache import CacheGrowth
from .embedding import EmbeddingMap
from .matrix import Matrix
from .step import DecodeStep
from .timeline import ServingTimeline
from .tokens import TokenStrip

__all__ = ["AttentionGrid", "CacheGrowth", "DecodeStep", "EmbeddingMap", "Matrix", "PromptBlocks", "ServingTimeline",
           "TokenStrip", "View", "link_for"]
