"""kvlib: the KV cache, visually. A glass-box GPT-2, its KV cache and generation."""

from . import magics
from .batching import generate_batch
from .generate import Generation, generate
from .i18n import set_language
from .kv_cache import KVCache
from .models import Config, KVLibError, Model, load_model
from .prompt_cache import PromptCache
from .trace import Trace

magics.register()  # %%needs in notebooks

__all__ = ["Config", "Generation", "KVCache", "KVLibError", "Model", "PromptCache", "Trace", "generate", "generate_batch", "load_model", "set_language"]
