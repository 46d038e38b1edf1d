"""The provider-style prompt cache: exact logits, exact receipts, TTL, LRU, budget, tenants, threads."""

import random
import threading

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvlib


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def ids(n, seed):
    return torch.randint(0, 4096, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.integers(1, 70), first=st.integers(0, 30), second=st.integers(1, 30), seed=st.integers(0, 10**6))
def test_a_hit_gives_the_logits_of_an_uncached_pass(tiny, prefix, first, second, seed):
    pc = kvlib.PromptCache(tiny, block_size=8)
    shared = ids(prefix, seed)
    pc.prefill(shared + ids(first, seed + 1) or shared)
    prompt = shared + ids(second, seed + 2)
    res = pc.prefill(prompt)
    assert (res.logits - tiny.forward(prompt)[-1]).abs().max() < 1e-4
    assert len(res.cache) == len(prompt)
    # the returned cache decodes on exactly like a fresh one
    nxt = int(res.logits.argmax())
    assert (tiny.forward([nxt], cache=res.cache)[-1] - tiny.forward(prompt + [nxt])[-1]).abs().max() < 1e-4


def test_receipts_count_exactly(tiny):
    pc = kvlib.PromptCache(tiny, block_size=16)
    system = ids(100, 1)
    r1 = pc.prefill(system + ids(20, 2)).receipt
    assert (r1.input_tokens, r1.cached_tokens, r1.written_tokens) == (120, 0, 112)  # 7 full blocks of the first 119
    r2 = pc.prefill(system + ids(30, 3)).receipt
    assert (r2.input_tokens, r2.cached_tokens) == (130, 96)  # 6 blocks shared, the 7th differs
    assert r2.written_tokens == 16 * (129 // 16) - 96
    assert r2.blocks[:6] == ["hit"] * 6 and set(r2.blocks[6:]) == {"written"}
    r3 = pc.prefill(system + ids(30, 3)).receipt  # the same prompt again: all but the last token
    assert (r3.cached_tokens, r3.written_tokens) == (128, 0)
    r4 = pc.prefill(ids(1, 9) + system).receipt  # one token in front breaks every block
    assert r4.cached_tokens == 0


def test_ttl_expires_entries_after_their_last_use(tiny):
    clock = Clock()
    pc = kvlib.PromptCache(tiny, block_size=8, ttl_seconds=300, clock=clock)
    prompt = ids(40, 5)
    pc.prefill(prompt)
    clock.now = 299
    assert pc.prefill(prompt).receipt.cached_tokens == 32  # a hit refreshes the entries
    clock.now = 299 + 300
    assert pc.prefill(prompt).receipt.cached_tokens == 32
    clock.now = 599 + 301
    assert pc.nbytes == 0
    assert pc.prefill(prompt).receipt.cached_tokens == 0
    assert any(kind == "expire" for _, _, kind, _ in pc.events)


def test_lru_evicts_the_least_recently_used_under_the_budget(tiny):
    clock = Clock()
    from kvlib import memory
    per_block = 8 * memory.model_kv_bytes_per_token(tiny.config)
    pc = kvlib.PromptCache(tiny, block_size=8, max_bytes=4 * per_block, clock=clock)
    a, b, c = ids(17, 1), ids(17, 2), ids(17, 3)  # two blocks each
    pc.prefill(a)
    clock.now = 1
    pc.prefill(b)
    clock.now = 2
    assert pc.prefill(a).receipt.cached_tokens == 16  # a is now more recent than b
    clock.now = 3
    pc.prefill(c)  # needs room for two blocks: b goes
    assert pc.nbytes == 4 * per_block
    clock.now = 4
    assert pc.prefill(a).receipt.cached_tokens == 16
    assert pc.prefill(c).receipt.cached_tokens == 16
    assert pc.prefill(b).receipt.cached_tokens == 0


def test_the_byte_budget_holds_over_thousands_of_requests(tiny):
    from kvlib import memory
    clock, rng = Clock(), random.Random(0)
    budget = 37 * 4 * memory.model_kv_bytes_per_token(tiny.config) + 123  # not a multiple of a block
    pc = kvlib.PromptCache(tiny, block_size=4, max_bytes=budget, ttl_seconds=50, clock=clock)
    prefixes = [ids(rng.randint(1, 40), s) for s in range(30)]
    for n in range(2000):
        clock.now += rng.random()
        prompt = rng.choice(prefixes)[: rng.randint(1, 40)] + [rng.randrange(4096) for _ in range(rng.randint(0, 3))]
        r = pc.prefill(prompt or [1], tenant=rng.choice("ab")).receipt
        assert r.cached_tokens % 4 == 0 and r.cached_tokens < r.input_tokens
        assert pc.nbytes <= budget
    assert any(kind == "evict" for _, _, kind, _ in pc.events)


def test_tenants_never_hit_each_others_prefixes(tiny):
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(50, 7)
    assert pc.prefill(prompt, tenant="alice").receipt.cached_tokens == 0
    assert pc.prefill(prompt, tenant="mallory").receipt.cached_tokens == 0
    assert pc.prefill(prompt, tenant="alice").receipt.cached_tokens == 48
    shared = kvlib.PromptCache(tiny, block_size=8, share_across_tenants=True)
    shared.prefill(prompt, tenant="alice")
    assert shared.prefill(prompt, tenant="mallory").receipt.cached_tokens == 48  # the leak it demonstrates


def test_concurrent_requests_all_get_correct_results(tiny):
    pc = kvlib.PromptCache(tiny, block_size=8, max_bytes=40 * 8 * 8192)
    system = ids(64, 11)
    prompts = [system + ids(5 + i % 7, 100 + i) for i in range(24)]
    expected = [tiny.forward(p)[-1] for p in prompts]
    errors = []

    def worker(k):
        for i in range(k, len(prompts), 4):
            res = pc.prefill(prompts[i], tenant=f"t{i % 2}")
            if (res.logits - expected[i]).abs().max() >= 1e-4:
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and pc.nbytes <= 40 * 8 * 8192


def test_a_request_never_changes_what_another_sees(tiny):
    pc = kvlib.PromptCache(tiny, block_size=8)
    prompt = ids(33, 3)
    first = pc.prefill(prompt)
    tiny.forward([5, 6, 7], cache=first.cache)  # decoding on from one result must not touch the stored blocks
    second = pc.prefill(prompt)
    assert second.receipt.cached_tokens == 32
    assert (second.logits - tiny.forward(prompt)[-1]).abs().max() < 1e-4


def test_bad_input(tiny):
    import pytest
    pc = kvlib.PromptCache(tiny)
    with pytest.raises(ValueError, match="empty"):
        pc.prefill("")
    with pytest.raises(ValueError, match="block_size"):
        kvlib.PromptCache(tiny, block_size=0)


def test_pricing_follows_the_receipt():
    from kvlib import pricing
    from kvlib.prompt_cache import Receipt
    anthropic, openai = pricing.PRICING["anthropic-5m"], pricing.PRICING["openai-gpt-5"]
    r = Receipt(input_tokens=2000, cached_tokens=1500, written_tokens=400)
    assert pricing.cost(r, anthropic) == 1500 * 0.1 + 400 * 1.25 + 100
    assert pricing.billed(r, openai) == (1408, 0, 592)  # hits in 128-token steps; writes billed as input
    short = Receipt(input_tokens=500, cached_tokens=480, written_tokens=0)
    assert pricing.cost(short, anthropic) == 500  # under the minimum: no caching at all
    assert pricing.cost(short, anthropic, apply_minimum=False) == 480 * 0.1 + 20


def test_stream_app_shows_each_requests_blocks(tiny):
    import matplotlib
    matplotlib.use("Agg")
    from kvlib import widgets
    clock = Clock()
    pc = kvlib.PromptCache(tiny, block_size=8, ttl_seconds=300, clock=clock)
    system = "You are Puck, a helpful sprite. Answer in verse. " * 2
    app = widgets.PromptCacheStream(pc, [("q1", "a", system + "Who?"), ("q2", "a", system + "Why?"),
                                         ("other", "b", system + "Who?")])
    app.next.click()
    app.next.click()
    app.next.click()
    (_, _, r1, _), (_, _, r2, _), (_, _, r3, _) = app.results
    assert r1.receipt.cached_tokens == 0 and r2.receipt.cached_tokens > 0 and r3.receipt.cached_tokens == 0
    assert app.view.value.count("margin-right:1px;background:#93c47d") == r2.receipt.cached_tokens // 8  # a green box per hit
    app.next.click()
    assert "All requests sent" in app.status.value
    app.forward.click()
    assert "blocks expired" in app.status.value and pc.nbytes == 0
