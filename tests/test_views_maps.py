"""The embedding map and the prompt-cache blocks, built headless from live runs on tiny and SmolLM2, checked
against numbers worked out here without the views' code: the map's PCA and family separation with numpy from the
checkpoint's own table; each request's blocks (hit, written or computed, their token counts, cost, keys, time to
live and expiry) by hand from the block size, the prompts' lengths, the providers' ratios and the documented key."""

import hashlib

import numpy as np
import pytest

import kvlib
from kvlib.lessons import embeddings
from kvlib.server.prompt_cache import ManualClock
from kvlib.ui import widgets
from kvlib.ui.views import EmbeddingMap, PromptBlocks
from kvlib.ui.views.base import MAX_STATE_BYTES


@pytest.fixture(params=["tiny", "smollm2"])
def model(request):
    return request.getfixturevalue(request.param)


def pca_by_hand(rows, dims):  # [N, C] -> [N, dims] in float64 with numpy's SVD: no kvlib code
    centred = np.asarray(rows, dtype=np.float64) - np.asarray(rows, dtype=np.float64).mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:dims].T


def same_up_to_sign(coords, ref):  # -> largest difference once each column of ref is turned as coords's
    coords, ref = np.asarray(coords, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    signs = np.where((coords * ref).sum(0) < 0, -1.0, 1.0)  # an SVD may return a component or its opposite
    return np.abs(coords - ref * signs).max()


def separation_by_hand(coords, labels):  # share of points nearest the centre of their own family, left out of it
    coords, labels = np.asarray(coords, dtype=np.float64), np.asarray(labels)
    right = 0
    for i in range(len(labels)):
        others = np.arange(len(labels)) != i
        dist = {f: np.linalg.norm(coords[i] - coords[others & (labels == f)].mean(0)) for f in dict.fromkeys(labels)}
        right += min(dist, key=dist.get) == labels[i]
    return right / len(labels)


def test_embedding_map_sends_the_tokens_their_projection_and_scores(model):
    view = EmbeddingMap.of(model, dims=3)
    fams = embeddings.word_families(model)  # the default families: {family: [(word, id)]}
    ids = [i for members in fams.values() for _, i in members]
    labels = [f for f, members in fams.items() for _ in members]
    assert view.ids == ids and view.labels == labels and len(set(labels)) == len(fams) >= 4
    assert view.tokens == [model.decode([i]) for i in ids]  # the model's own tokens
    assert all(model.encode(" " + w) == [i] for members in fams.values() for w, i in members)
    coords = pca_by_hand(embeddings.table(model)[ids].float().numpy(), 3)  # the checkpoint's own rows
    assert same_up_to_sign(view.coords, coords) < 1e-4  # rounded to 4 decimals, from float32
    assert view.scores == [separation_by_hand(coords[:, :d], labels) for d in (1, 2, 3)]
    assert view.dims == 3 and view.check_size() is view and view.state_bytes() < MAX_STATE_BYTES
    assert "' king'" in view.summary() and f"1D {view.scores[0]:.0%}" in view.summary()


def test_embedding_map_refuses_a_fourth_dimension(tiny):
    with pytest.raises(kvlib.KVLibError, match="1, 2 or 3"):
        EmbeddingMap.of(tiny, dims=4)


SYSTEM = "You are Puck, a helpful sprite. Answer in verse, briefly, as Shakespeare would. " * 3


def key_by_hand(tenant, ids):  # the first 8 bytes of a block's key, as hex: a prefix's ids hashed after its tenant's
    """As PromptCache documents its keys, worked here with hashlib alone: blake2b (16 bytes) of the 16-byte blake2b
    of "tenant:<name>", then of the prefix's ids as 8-byte little-endian integers."""
    key = hashlib.blake2b(hashlib.blake2b(f"tenant:{tenant}".encode(), digest_size=16).digest(), digest_size=16)
    key.update(b"".join(i.to_bytes(8, "little") for i in ids))
    return key.digest()[:8].hex()


def rows(view):  # each request as the view sends it: (label, block states, input, cached, written, gone, tail)
    return [(q["label"], [b["state"] for b in q["blocks"]], q["input"], q["cached"], q["written"], q["gone"],
             q["tail"]) for q in view.requests]


def chips(view, k):  # request k's chips: (start, end, text, hash)
    return [(b["start"], b["end"], b["text"], b["hash"]) for b in view.requests[k]["blocks"]]


def test_prompt_blocks_follow_the_receipts_evictions_and_expiry(model):
    """Puck, Ariel, Puck again, then Oberon, 10 s apart, in blocks of 4 tokens under a budget of four blocks. Each
    prompt is a persona of 8 tokens and 3 of its own: blocks 0-4 and 4-8, the 3 last tokens computed. Puck's two
    blocks and Ariel's two fill the budget; Puck again hits both (and is now the more recent); Oberon's two blocks
    evict the least recently used leaves, Ariel's 4-8 and then Ariel's 0-4. Then the 300-s TTL runs out."""
    per_block = 4 * 2 * model.config.n_layer * model.config.n_kv_head * model.config.head_dim * 4  # float32
    pc = kvlib.PromptCache(model, block_size=4, max_bytes=4 * per_block, clock=ManualClock())
    persona = {"Puck": list(range(10, 18)), "Ariel": list(range(20, 28)), "Oberon": list(range(30, 38))}
    order = ["Puck", "Ariel", "Puck", "Oberon"]
    prompts = [persona[n] + [100 + 3 * k, 101 + 3 * k, 102 + 3 * k] for k, n in enumerate(order)]
    app = widgets.PromptCacheStream(pc, [(f"{n} {k}", "acme", p) for k, (n, p) in enumerate(zip(order, prompts))])
    assert app.view.requests == [] and app.view.summary()
    for _ in order:
        app.send()
    W, H = "written", "hit"
    assert rows(app.view) == [("Puck 0", [W, W], 11, 0, 8, 0, 3), ("Ariel 1", [W, W], 11, 0, 8, 0, 3),
                              ("Puck 2", [H, H], 11, 8, 0, 0, 3), ("Oberon 3", [W, W], 11, 0, 8, 2, 3)]
    # OpenAI's ratios (the default for automatic caching): cached tokens at 0.1, the rest (writes too) at 1
    assert [q["cost"] for q in app.view.requests] == pytest.approx([11, 11, 8 * 0.1 + 3, 11])
    key = {n: [key_by_hand("acme", p[:4]), key_by_hand("acme", p[:8])] for n, p in persona.items()}
    for k, (n, prompt) in enumerate(zip(order, prompts)):
        assert chips(app.view, k) == [(0, 4, model.decode(prompt[:4]), key[n][0]), (4, 8, model.decode(prompt[4:8]),
                                                                                      key[n][1])]
    ttl = 300  # PromptCache's default
    assert app.view.stored == {key["Puck"][0]: {"expires": 20 + ttl}, key["Puck"][1]: {"expires": 20 + ttl},
                               key["Ariel"][0]: {"gone": "evicted", "at": 30}, key["Ariel"][1]: {"gone": "evicted", "at": 30},
                               key["Oberon"][0]: {"expires": 30 + ttl}, key["Oberon"][1]: {"expires": 30 + ttl}}
    assert app.view.clock == 30 and "cache holds 4 blocks" in app.view.title
    app.fast_forward()  # a minute past the TTL: 30 + 300 + 60
    assert {h: s for h, s in app.view.stored.items() if "expires" not in s} == {
        **{h: {"gone": "evicted", "at": 30} for h in key["Ariel"]},
        **{h: {"gone": "expired", "at": 390} for h in key["Puck"] + key["Oberon"]}}
    assert "holds 0 blocks" in app.view.title and "Puck 0" in app.view.summary()
    assert app.view.state_bytes() < MAX_STATE_BYTES


def test_prompt_blocks_in_explicit_mode_show_one_block_per_marked_prefix(tiny):
    pc = kvlib.PromptCache(tiny, mode="explicit", clock=ManualClock())
    system = tiny.encode(SYSTEM)
    mark = len(system) - 1  # its last token, a space, joins the question's first word
    app = widgets.PromptCacheStream(pc, [("first", "a", SYSTEM + "Who?", mark), ("second", "a", SYSTEM + "Why?", mark),
                                         ("two marks", "a", SYSTEM + "Why? And how?", [mark, mark + 3])])
    for _ in app.requests:
        app.send()
    n = [len(tiny.encode(prompt)) for _, _, prompt, _ in app.requests]
    # the marked prefix is written, then read; the second mark adds a block of the 3 tokens after the first
    assert rows(app.view) == [("first", ["written"], n[0], 0, mark, 0, n[0] - mark),
                              ("second", ["hit"], n[1], mark, 0, 0, n[1] - mark),
                              ("two marks", ["hit", "written"], n[2], mark, 3, 0, n[2] - mark - 3)]
    # Anthropic's 5-minute ratios (the default for explicit caching): read 0.1, written 1.25, the rest 1
    assert [q["cost"] for q in app.view.requests] == pytest.approx([
        1.25 * mark + n[0] - mark, 0.1 * mark + n[1] - mark, 0.1 * mark + 1.25 * 3 + n[2] - mark - 3])
    ids = tiny.encode(SYSTEM + "Why? And how?")
    assert chips(app.view, 2) == [(0, mark, SYSTEM[:-1], key_by_hand("a", ids[:mark])),
                                  (mark, mark + 3, tiny.decode(ids[mark:mark + 3]), key_by_hand("a", ids[:mark + 3]))]
    assert chips(app.view, 0)[0][3] == chips(app.view, 1)[0][3] == key_by_hand("a", system[:mark])


def test_prompt_blocks_stand_alone_on_a_cache(tiny):
    pc = kvlib.PromptCache(tiny, block_size=16, clock=ManualClock())
    view = PromptBlocks(pc, note="no prices")
    res = pc.prefill(SYSTEM + "Who?", tenant="t")
    view.add("one", "t", SYSTEM + "Who?", res, cost=1.0)
    ids = tiny.encode(SYSTEM + "Who?")
    ends = range(16, len(ids), 16)  # blocks of 16, none reaching the last token
    assert [(b["start"], b["end"], b["hash"]) for b in view.requests[0]["blocks"]] == \
           [(e - 16, e, key_by_hand("t", ids[:e])) for e in ends]
    assert view.stored == {key_by_hand("t", ids[:e]): {"expires": 300} for e in ends}
    pc.clock.advance(301)
    pc.expire()
    view.refresh()
    assert view.stored == {key_by_hand("t", ids[:e]): {"gone": "expired", "at": 301} for e in ends}


def test_a_hit_chip_shows_the_stored_block_it_read(tiny):
    """Marked at 10 and 77 after a request that marked 77 alone, the chip of tokens 0-10 read the other request's
    block of 0-77 (its own key was never stored): it shows that block's time to live, then its expiry."""
    pc = kvlib.PromptCache(tiny, mode="explicit", clock=ManualClock())
    view, prefix = PromptBlocks(pc), tiny.encode(SYSTEM)[:77]
    for label, mark, tail in (("A", 77, " Who?"), ("B", [10, 77], " Why?")):
        prompt = prefix + tiny.encode(tail)
        view.add(label, "t", prompt, pc.prefill(prompt, tenant="t", cache_control=mark), 1.0, mark)
    a, b = ([chip["hash"] for chip in row["blocks"]] for row in view.requests)
    assert [chip["state"] for chip in view.requests[1]["blocks"]] == ["hit", "hit"] and len(pc.index) == 5
    # 0-77 is A's prefix (4 blocks of 16, then 64-77); 0-10 was never stored
    assert b[1] == a[0] and b[0] not in {k[:8].hex() for k in pc.index}
    assert view.stored[b[0]] == view.stored[a[0]] == {"expires": 300.0}
    pc.clock.advance(301)
    pc.expire()
    view.refresh()
    assert view.stored[b[0]] == view.stored[a[0]] == {"gone": "expired", "at": 301.0}
