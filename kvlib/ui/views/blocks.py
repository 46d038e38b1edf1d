"""View 6, prompt-cache blocks: each request's blocks as chips, hit, written or computed (a colour and a glyph).

Hover a chip for its tokens and the first 8 bytes of its prefix's hash; the same block lights up in
every request that used it. On the cache's simulated clock, a bar under each stored block shows how
much of its time to live is left. Each row tells what became of the blocks that request left in the
cache: used again by a later request (named on hover), or dropped first (expired or evicted: faded and
struck through, with the reason on hover), read from the cache's own events (each names its block's key).
So a block evicted and later written again shows struck in the row that lost it, whole in the row that
wrote it again. The text summary (where widgets cannot be drawn) says the same in words: the chips as glyphs,
the tokens after the last block, what the cost counts, and what became of each row's blocks.
In explicit mode a chip is a marked prefix, held in the pool by its full blocks and the part up to the mark:
it follows the events of that last block, which the pool evicts or expires before any block before it."""

import json
import math
import reprlib

import traitlets as T

from ...errors import KVLibError, is_count, is_number
from ...i18n import t
from ...server.prompt_cache import Prefill, PromptCache
from ...texttable import text_table
from .base import View, module, prompt_ids, run_text

GONE = {"expire": "expired", "evict": "evicted"}  # an event's kind -> the word a row and its tooltip say (blocks.<word>)
STORED_ENTRY = len(json.dumps({"0" * 16: {"expires": -1e9 / 7}})) + 2  # one block in `stored` as JSON, with its ", "


class PromptBlocks(View):
    _esm = module("blocks.js")
    WORDS = "blocks"
    title = T.Unicode("").tag(sync=True)     # the cache's mode, TTL, block size and what it holds
    note = T.Unicode("").tag(sync=True)      # what the cost column counts
    clock = T.Float(0).tag(sync=True)        # the cache's clock, seconds
    ttl = T.Float(0).tag(sync=True)
    requests = T.List().tag(sync=True)       # per request: {label, tenant, prompt (its text: a live page starts from
                                             #   it), at, input, cached, written, cost,
                                             #   gone, tail, blocks: [{state, start, end, text, hash, then}]}
                                             #   then: what became of the copy it left: {"by", "at"} used again
                                             #   by a later request, {"gone", "at"} dropped first (an eviction
                                             #   also names the request it made room "for"), None not yet
    stored = T.Dict().tag(sync=True)         # block hash -> {"expires": t} while stored, {"gone", "at"} after

    def __init__(self, pc, note="", **kwargs):
        if not isinstance(pc, PromptCache):
            raise KVLibError(f"PromptBlocks shows a PromptCache (kvlib.PromptCache(model)); got {reprlib.repr(pc)}")
        super().__init__(note=note, ttl=pc.ttl, **kwargs)
        self.pc, self.known, self.seen = pc, {}, len(pc.events)  # known: hash shown -> the block's key
        self.holder = {}  # a stored block's key -> [(request, chip)]: the chips of the last request that used it
        self.refresh()

    def add(self, label, tenant, prompt, result, cost, cache_control=None, gone=0):
        """One request just sent through the cache (the Prefill PromptCache.prefill returned), and what it cost."""
        if not (isinstance(label, str) and isinstance(result, Prefill) and is_number(cost) and math.isfinite(cost)
                and is_count(gone) and gone >= 0):
            raise KVLibError(f"add takes a label (a str), what pc.prefill returned, its cost (a finite number) and "
                             f"how many blocks went (a whole number); got {reprlib.repr(label)}, "
                             f"{type(result).__name__}, {cost!r}, {gone!r}")
        pc, r = self.pc, result.receipt
        ids = prompt_ids(pc.model, prompt, "PromptBlocks.add")
        spans = pc.spans(len(ids), cache_control)
        keys = pc.block_keys(ids, tenant, spans)
        hits = r.blocks.count("hit")
        # the blocks this request wrote, and the deepest it hit, are in the cache's record under these keys
        mine = [key for key, state in zip(keys, r.blocks) if state == "written"] + keys[hits - 1:hits]
        if r.input_tokens != len(ids) or len(r.blocks) != len(spans) or \
                not set(mine) <= {e.key for e in pc.events if e.kind in ("hit", "write")}:
            raise KVLibError("this Prefill is not of this prompt on this cache: pass the prompt, tenant and "
                             "cache_control that this view's cache was given by pc.prefill")
        blocks = [{"state": state, "start": a, "end": e, "text": run_text(pc.model, ids[a:e]), "hash": key[:8].hex(),
                   "then": None} for state, (a, e), key in zip(r.blocks, spans, keys, strict=True)]
        request = {"label": label, "tenant": tenant, "prompt": pc.model.decode(ids), "at": pc.clock(), "input": r.input_tokens,
                   "cached": r.cached_tokens, "written": r.written_tokens,
                   "cost": float(cost), "gone": int(gone), "tail": len(ids) - (spans[-1][1] if spans else 0), "blocks": blocks}
        # before the page is sent a view too big: the request, and the entry each of its blocks adds to `stored`
        self.check_size(more=len(json.dumps(request, default=str)) + STORED_ENTRY * len(blocks))
        # a hit chip shows the stored block it read: its own key, or (explicit marks cut the prefix otherwise
        # than the request that wrote it) the deepest key that hit, whose blocks hold all of the hit
        reads = [key if d >= hits or key in pc.index else keys[hits - 1] for d, key in enumerate(keys)]
        self.known.update({key[:8].hex(): read for key, read in zip(keys, reads)})
        self.requests = self.requests + [request]
        self.refresh([reads[d] if state != "computed" else None for d, state in enumerate(r.blocks)])
        return self

    def refresh(self, reads=None):
        """Read the cache now: which blocks shown are stored (until when) and which have gone (why, when).
        reads: for the request just added, the stored key each of its chips read or wrote (None: computed)."""
        pc, stored, index = self.pc, dict(self.stored), self.pc.index
        events = pc.events[self.seen:]
        went = {e.key: e for e in events if e.kind in GONE}
        self.seen = len(pc.events)
        self._follow(events, reads)
        for h, key in self.known.items():
            if key in index:  # a chip's prefix is filed while its last block is (the index has no holes)
                stored[h] = {"expires": index[key].last_used + pc.ttl}
            elif key in went:  # gone since the last look (even if written and evicted in between)
                stored[h] = {"gone": GONE[went[key].kind], "at": went[key].time}
        held = pc.nbytes  # what it holds (reading it expires nothing)
        budget = t("blocks.budget", n=pc.max_bytes) if pc.max_bytes is not None else ""
        size = t("blocks.size", n=pc.block_size) + (t("blocks.size_marked") if pc.mode == "explicit" else "")
        with self.hold_sync():  # one message to the browser
            self.stored, self.clock = stored, pc.clock()
            self.title = t("blocks.title", mode=t(f"mode.{pc.mode}"), ttl=pc.ttl, size=size, n=len(index),
                           held=held, budget=budget)

    def _follow(self, events, reads):
        """Each row's chips, told what became of the copy that request left: in the events' order, a drop
        strikes the chips of the last request that used the block; a later request's use names itself there."""
        rows, changed, new = self.requests, False, len(self.requests) - 1
        for e in events:
            if e.kind in GONE:
                then = {"gone": GONE[e.kind], "at": e.time}
                if e.kind == "evict" and reads is not None:  # evicted to make room for the request just added
                    then["for"] = rows[new]["label"]
            elif reads is not None and e.key in reads:
                then = {"by": rows[new]["label"], "at": e.time}
            else:
                continue
            for k, j in self.holder.pop(e.key, []):
                if not (k == new and "by" in then):
                    rows = rows if changed else [dict(q, blocks=list(q["blocks"])) for q in rows]  # copied: synced anew
                    rows[k]["blocks"][j], changed = dict(rows[k]["blocks"][j], then=then), True
            if "by" in then:
                self.holder[e.key] = [(new, j) for j, key in enumerate(reads) if key == e.key]
        if changed:
            self.requests = rows

    def dropped(self):
        """{request's label: [(why, when)]}: the rows drawn struck through, whose blocks were expired or evicted
        before any later request used them, with each drop's reason and time (seconds on the cache's clock)."""
        out = {}
        for q in self.requests:
            gone = sorted({(b["then"]["gone"], b["then"]["at"]) for b in q["blocks"] if "gone" in (b["then"] or {})},
                          key=lambda g: g[1])
            if gone:
                out[q["label"]] = gone
        return out

    def fate(self, q):
        """What became of the blocks a request (one of self.requests) left in the cache, in words: what the
        browser shows by striking chips through, by TTL bars and on hover. "" when it left none."""
        said = {}
        for b in q["blocks"]:
            then, kept = b["then"] or {}, self.stored.get(b["hash"], {}) if b["state"] != "computed" else {}
            if "by" in then:
                what = t("blocks.fate_used", by=then["by"], at=then["at"])
            elif "gone" in then:
                why = t("blocks.fate_room", request=then["for"]) if "for" in then else ""
                what = t("blocks.fate_dropped", gone=t(f"blocks.{then['gone']}"), at=then["at"], why=why)
            elif "expires" in kept:
                what = (t("blocks.fate_kept") if math.isinf(kept["expires"]) else
                        t("blocks.fate_until", t=kept["expires"]))
            elif "gone" in kept:
                what = t("blocks.fate_gone", gone=t(f"blocks.{kept['gone']}"), at=kept["at"])
            else:
                continue
            said[what] = said.get(what, 0) + 1
        return t("blocks.fate_sep").join(t("blocks.fate_many" if n > 1 else "blocks.fate_one", n=n, what=what)
                                      for what, n in said.items())

    def summary(self):
        marks = {state: glyph for state, glyph in (("hit", "✓"), ("written", "+"), ("computed", "·"))}
        rows = [[q["label"], q["tenant"], "".join(marks[b["state"]] for b in q["blocks"])
                 + (t("blocks.summary_more", n=q["tail"]) if q["tail"] else ""), q["input"], q["cached"], q["written"],
                 f"{q['cost']:,.1f}"] for q in self.requests]
        fates = [t("blocks.fate_line", label=q["label"], fate=self.fate(q)) for q in self.requests if self.fate(q)]
        columns = [t(f"blocks.col.{c}") for c in ("label", "tenant", "blocks", "input", "cached", "written", "cost")]
        return "\n".join([self.title, t("blocks.summary_clock", t=self.clock), t("blocks.summary_key"),
                          text_table(columns, rows, align="<<<>>>>")]
                         + ([self.note] if self.note else [])
                         + ([t("blocks.summary_fates")] + fates if fates else []))
