"""View 4, the KV cache per layer growing during decode (the design card's picture).

Every layer's K and V as stacks of rows labelled by their tokens; each step adds one row to
every layer; bytes per layer and in all count up beside the formula
2 × layers × KV heads × head size × bytes per number × tokens. The bytes shown are the live
cache's `nbytes`, read at every step of a real generation; the numbers in a row are the first
few of its K (or V) in KV head 0, read from the cache after the run (rows never change once
appended, never rewritten)."""

import traitlets as T

from ...i18n import t
from ...lessons.memory import kv_bytes_per_token
from ...server.generate import generate
from .base import View, check_model, link_for, module, pieces, prompt_ids, rounded

PREVIEW = 8  # numbers of each row drawn (KV head 0, dims 0-7); every layer holds n_kv_head × head_dim


class CacheGrowth(View):
    _esm = module("cache.js")
    WORDS = ("cache", "stepper")
    model_name = T.Unicode().tag(sync=True)
    shape = T.Dict().tag(sync=True)         # n_layer, n_kv_head, head_dim, bytes_per_number (the cache's dtype:
                                            # the view's formula takes it from here), preview (numbers drawn per row)
    tokens = T.List().tag(sync=True)        # every token the cache holds by the last step
    fed = T.List().tag(sync=True)           # per step: how many tokens that step fed (the prompt, then 1)
    nbytes = T.List().tag(sync=True)        # per step: cache.nbytes, measured
    layer_nbytes = T.List().tag(sync=True)  # per step, per layer: layer.nbytes, measured
    k_rows = T.List().tag(sync=True)        # [layer][token][PREVIEW] rounded (`keys` is a Widget trait)
    v_rows = T.List().tag(sync=True)
    step = T.Int(0).tag(sync=True)          # the step shown first

    @classmethod
    def of(cls, model, prompt="Mary had a little", new_tokens=8, link=None):
        """Generate greedily with a cache, reading the cache's bytes after every step."""
        ids = prompt_ids(check_model(model, "CacheGrowth.of"), prompt, "CacheGrowth.of")
        cache, nbytes, layer_nbytes, seen = model.new_cache(), [], [], [0]

        def record(token, piece):  # after each step: what the cache counts it was fed, and holds
            seen.append(cache.seen)
            nbytes.append(cache.nbytes)
            layer_nbytes.append([layer.nbytes for layer in cache.layers])

        gen = generate(model, ids, new_tokens, cache=cache, on_token=record, stop_at_eos=False)
        held = gen.prompt_ids + gen.ids[:-1]  # the last token picked is never fed, so never cached
        tokens = pieces(model, held)
        fed = [b - a for a, b in zip(seen, seen[1:])]  # per step, as the cache counted it: measured, not assumed
        c = model.config
        shape = dict(n_layer=c.n_layer, n_kv_head=c.n_kv_head, head_dim=c.head_dim,
                     bytes_per_number=cache.layers[0].keys.element_size(), preview=min(PREVIEW, c.head_dim))
        first = lambda t: rounded(t[0, :, :PREVIEW], 2)  # [nkv, T, hs] -> [T][PREVIEW] of KV head 0
        return cls(model_name=model.name, shape=shape, tokens=tokens, fed=fed, nbytes=nbytes,
                   layer_nbytes=layer_nbytes, k_rows=[first(l.keys) for l in cache.layers],
                   v_rows=[first(l.values) for l in cache.layers],
                   link=link or link_for(tokens[:fed[0]])).check_size()

    def held(self, step):  # tokens in the cache after `step`
        return sum(self.fed[:step + 1])

    def summary(self):
        s = self.shape
        per_token = kv_bytes_per_token(s["n_layer"], s["n_kv_head"], s["head_dim"], s["bytes_per_number"])
        lines = [t("cache.summary_title", model=self.model_name, layers=s["n_layer"], bytes=f"{per_token:,}")]
        for step, n in enumerate(self.nbytes):
            held = self.held(step)
            lines.append(t("cache.summary_step", step=step, fed=self.fed[step], held=held,
                           last=repr(self.tokens[held - 1]), nbytes=f"{n:,}"))
        return "\n".join(lines)
