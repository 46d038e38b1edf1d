"""kvlib: the KV cache, visually. A glass-box GPT-2, its KV cache and generation."""

from .i18n import set_language
from .model.kv_cache import KVCache
from .model.models import Config, KVLibError, Model, load_model
from .model.trace import Trace
from .server.generate import generate, generate_batch
from .server.sampling import Generation
from .server.prompt_cache import PromptCache
from .ui import magics

magics.register()  # %%needs in notebooks

__all__ = ["Config", "Generation", "KVCache", "KVLibError", "Model", "PromptCache", "Trace", "generate", "generate_batch", "load_model", "set_language"]
