"""View 5, an embedding map: families of tokens as points in 1, 2 or 3 dimensions (PCA).

Each family has its own colour and marker shape, with a legend; a word shows on hover instead of
being printed over its neighbours. The 1D / 2D / 3D switch, turning the 3D picture (drag it, or the
arrow keys) and the hover all happen in the browser: PCA's components are nested (the first d columns
of the 3-D projection are the d-D projection), so one set of coordinates serves all three pictures."""

import reprlib

import traitlets as T

from ...errors import check_count, is_count
from ...i18n import named, t
from ...lessons import embeddings
from ...model.models import KVLibError
from .base import View, check_model, link_for, module, rounded


def is_pair(p, model):  # (word, token id) of `model`'s vocabulary
    return isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) and is_count(p[1]) \
        and 0 <= p[1] < model.config.vocab_size


class EmbeddingMap(View):
    _esm = module("embedding.js")
    WORDS = "map"
    title = T.Unicode("").tag(sync=True)
    tokens = T.List().tag(sync=True)  # each point's token, as the model spells it (' king')
    ids = T.List().tag(sync=True)     # its token id
    labels = T.List().tag(sync=True)  # its family, named in the notebook's language
    coords = T.List().tag(sync=True)  # [points][3]: the first three principal components, rounded
    scores = T.List().tag(sync=True)  # separation (embeddings.separation) in 1D, 2D and 3D
    dims = T.Int(2).tag(sync=True)    # the picture shown first; the browser switches without the kernel

    @classmethod
    def of(cls, model, families=None, dims=2, digits=4):
        """families: {family: [(word, id)]} (by default embeddings.word_families(model))."""
        check_model(model, "EmbeddingMap.of"), check_count(digits, "digits", least=0)
        if not (is_count(dims) and dims in (1, 2, 3)):
            raise KVLibError(f"the map shows 1, 2 or 3 dimensions, not {dims!r}")
        fams = embeddings.word_families(model) if families is None else families
        if not (isinstance(fams, dict) and all(isinstance(f, (list, tuple)) and len(f) >= 2 for f in fams.values())
                and sum(map(len, fams.values())) >= 3 and all(is_pair(p, model) for f in fams.values() for p in f)):
            raise KVLibError(f"families maps each family's name to 2 or more (word, token id) pairs, 3 words in all, "
                             f"as embeddings.word_families(model) returns; got {reprlib.repr(fams)}")
        coords, _, labels = embeddings.project(model, fams, 3)
        ids = [int(i) for f in fams.values() for _, i in f]
        tokens = [model.decode([i]) for i in ids]
        return cls(title=t("map.title", count=len(ids), model=model.name, dims=model.config.n_embd),
                   tokens=tokens, ids=ids, labels=[named("family", f) for f in labels], coords=rounded(coords, digits),
                   dims=int(dims), scores=[embeddings.separation(coords[:, :d], labels) for d in (1, 2, 3)],
                   link=link_for(tokens)).check_size()

    def summary(self):
        lines = [self.title, t("map.summary") + ", ".join(f"{d}D {s:.0%}" for d, s in enumerate(self.scores, 1))]
        for family in dict.fromkeys(self.labels):
            lines.append(f"{family}: " + " ".join(repr(w) for w, f in zip(self.tokens, self.labels) if f == family))
        return "\n".join(lines)
