"""Cached == uncached, exact bytes, and a cache that grows without re-copying."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvlib

from bounds import assert_logits_close, logit_bound


def cached_vs_uncached(model, ids, split):
    """Prefill ids[:split] into a cache, then feed the rest one token at a time."""
    cache = model.new_cache()
    logits = [model.forward(ids[:split], cache=cache)]
    logits += [model.forward([t], cache=cache) for t in ids[split:]]
    assert len(cache) == len(ids)
    return torch.cat(logits), model.forward(ids)


def prompts(vocab, max_len):
    return st.lists(st.integers(0, vocab - 1), min_size=2, max_size=max_len).flatmap(
        lambda ids: st.tuples(st.just(ids), st.integers(1, len(ids) - 1)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=prompts(4096, 40))
def test_cached_equals_uncached_tiny(tiny, case):
    ids, split = case
    cached, plain = cached_vs_uncached(tiny, ids, split)
    assert_logits_close(cached, plain, tiny)
    assert cached.argmax(-1).tolist() == plain.argmax(-1).tolist()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=prompts(50257, 12))
def test_cached_equals_uncached_random_gpt2(random_gpt2, case):
    ids, split = case
    cached, plain = cached_vs_uncached(random_gpt2, ids, split)
    assert_logits_close(cached, plain, random_gpt2)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet="abcdefghij ,.\nROMEO", min_size=1, max_size=60), n=st.integers(1, 12))
def test_cached_decoding_gives_the_same_tokens(tiny, text, n):
    a = kvlib.generate(tiny, text, n, use_cache=True, stop_at_eos=False)
    b = kvlib.generate(tiny, text, n, use_cache=False, stop_at_eos=False)
    assert a.ids == b.ids
    assert len(a.cache) == len(a.prompt_ids) + len(a.ids) - 1  # the last token is not fed yet


def test_greedy_generation_matches_on_random_gpt2(random_gpt2):
    a = kvlib.generate(random_gpt2, list(range(100, 108)), 6, use_cache=True, stop_at_eos=False)
    b = kvlib.generate(random_gpt2, list(range(100, 108)), 6, use_cache=False, stop_at_eos=False)
    assert a.ids == b.ids


def test_nbytes_is_exact(tiny):
    cache = tiny.new_cache()
    assert len(cache) == 0 and cache.nbytes == 0
    tiny.forward(tiny.encode("Now is the winter of our discontent"), cache=cache)
    by_tensors = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert cache.nbytes == by_tensors
    c = tiny.config
    assert cache.nbytes == len(cache) * 2 * c.n_layer * c.n_embd * 4


def test_random_gpt2_holds_73728_bytes_per_token(random_gpt2):
    cache = random_gpt2.new_cache()
    random_gpt2.forward(list(range(10)), cache=cache)
    random_gpt2.forward([11], cache=cache)
    assert cache.layers[0].keys.shape == (12, 11, 64)
    assert cache.nbytes == 11 * 73_728


def test_growth_does_not_recopy_every_step(tiny):
    cache = tiny.new_cache()
    tiny.forward([1, 2, 3], cache=cache)
    buffers = set()
    for t in range(200):
        tiny.forward([t], cache=cache)
        buffers.add(cache.layers[0].keys.data_ptr())
    assert len(buffers) <= 8  # doubling: a handful of reallocations, not 200


def test_copy_is_independent(tiny):
    cache = tiny.new_cache()
    tiny.forward([5, 6, 7], cache=cache)
    twin = cache.copy()
    tiny.forward([8], cache=twin)
    assert len(cache) == 3 and len(twin) == 4 and (cache.seen, twin.seen) == (3, 4)
    assert torch.equal(twin.layers[2].keys[:, :3], cache.layers[2].keys)
    assert twin.layers[2].keys.data_ptr() != cache.layers[2].keys.data_ptr()


def test_crop_forgets_the_newest_tokens_as_if_never_fed(tiny):
    ids = [5, 17, 99, 3, 42, 7]
    cache = tiny.new_cache()
    tiny.forward(ids, cache=cache)
    cache.crop(4)
    assert len(cache) == cache.seen == 4
    assert all(layer.keys.shape[1] == 4 for layer in cache.layers)
    after = tiny.forward([11], cache=cache)[-1]
    assert_logits_close(after, tiny.forward(ids[:4] + [11])[-1], tiny)
    with pytest.raises(kvlib.KVLibError, match="crop keeps 0 to 5"):
        cache.crop(6)


WINDOWS = [("tiny", 8, 0), ("tiny", 6, 2), ("small_llama", 8, 0), ("small_llama", 5, 3)]


@pytest.mark.parametrize("name,window,sinks", WINDOWS)
def test_a_sliding_window_masks_in_one_pass_what_it_evicts_step_by_step(request, name, window, sinks):
    """One pass over the text (the cache masks what it would drop) equals feeding it token by token
    (the cache drops it), in both families; the cache then holds exactly the sinks and the window."""
    model = request.getfixturevalue(name)
    ids = torch.randint(0, model.config.vocab_size, (30,), generator=torch.Generator().manual_seed(3)).tolist()
    one_pass = model.forward(ids, cache=model.new_cache(window, sinks))
    cache = model.new_cache(window, sinks)
    stepwise = torch.cat([model.forward([t], cache=cache) for t in ids])
    assert_logits_close(one_pass, stepwise, model)
    assert len(cache) == window + sinks and cache.seen == len(ids)
    kept = list(range(sinks)) + list(range(len(ids) - window, len(ids)))
    assert cache.positions().tolist() == kept
    full = model.new_cache()
    model.forward(ids, cache=full)  # layer 0's keys depend on the token and its position only
    assert torch.allclose(cache.layers[0].keys, full.layers[0].keys[:, kept], atol=1e-5)  # one matmul, rounded
    plain = model.forward(ids)  # and the window changes what the model predicts once it drops tokens
    assert_logits_close(one_pass[:window + sinks], plain[:window + sinks], model)
    assert (one_pass[-1] - plain[-1]).abs().max() > 10 * logit_bound(model, plain[-1])


def test_generate_continues_a_window_from_the_tokens_it_has_read_not_those_it_holds(tiny):
    """A window that has dropped tokens holds fewer than it has read: generate feeds only the prompt's unread
    tail, so the answer is the one a fresh window gives the whole prompt."""
    ids = torch.randint(0, tiny.config.vocab_size, (14,), generator=torch.Generator().manual_seed(0)).tolist()
    cache = tiny.new_cache(4, 1)
    for t in ids[:10]:
        tiny.forward([t], cache=cache)
    assert (len(cache), cache.seen) == (5, 10)
    continued = kvlib.generate(tiny, ids, 10, cache=cache, stop_at_eos=False)
    fresh = kvlib.generate(tiny, ids, 10, cache=tiny.new_cache(4, 1), stop_at_eos=False)
    assert continued.ids == fresh.ids and cache.seen == len(ids) + 9
    with pytest.raises(kvlib.KVLibError, match="already read 23 tokens, the prompt is 14"):
        kvlib.generate(tiny, ids, 1, cache=cache)


def test_only_a_whole_text_with_nothing_hidden_goes_to_the_kernel_as_plain_causal(tiny):
    """The forward pass drops the mask for torch's is_causal only when that is the very same mask."""
    from kvlib.model.kv_cache import only_causal
    mask = lambda cache, t: cache.admit(t)[1]  # noqa: E731
    assert only_causal(mask(kvlib.KVCache(1), 5))
    assert not only_causal(mask(kvlib.KVCache(1), 1))  # one token: nothing to skip
    assert not only_causal(mask(kvlib.KVCache(1, window=3), 5))  # the window hides more than the future
    assert only_causal(mask(kvlib.KVCache(1, window=5), 5))  # a window as long as the text hides nothing more
    cached = tiny.new_cache()
    tiny.forward([1, 2], cache=cached)
    assert not only_causal(mask(cached, 3))  # after cached tokens the diagonal moves: [3, 5] is not square
    assert not only_causal(torch.zeros(4, 4))  # square, but nothing hidden at all


def test_crop_refuses_what_it_cannot_undo(tiny):
    empty = tiny.new_cache()
    empty.crop(0)  # nothing held, nothing to forget
    assert len(empty) == empty.seen == 0
    windowed = tiny.new_cache(4, sinks=2)
    for t in range(12):
        tiny.forward([t], cache=windowed)
    assert windowed.positions().tolist() == [0, 1, 8, 9, 10, 11]
    # back to 10 tokens read, the next token (position 10) would read 7-10 in its window: 7 is gone
    with pytest.raises(kvlib.KVLibError, match="dropped 6 tokens: crop keeps at least 5"):
        windowed.crop(4)
    windowed.crop(5)  # back to 11 read: the next token reads 8-11, all held
    assert windowed.positions().tolist() == [0, 1, 8, 9, 10] and windowed.seen == 11
    fresh = tiny.new_cache(4, sinks=2)
    tiny.forward(list(range(11)), cache=fresh)
    assert_logits_close(tiny.forward([99], cache=windowed), tiny.forward([99], cache=fresh), tiny)
    plain = tiny.new_cache()
    tiny.forward([1, 2, 3], cache=plain)
    with pytest.raises(kvlib.KVLibError, match="not 2.0"):
        plain.crop(2.0)
    assert len(plain) == plain.seen == 3


def test_a_window_refuses_bad_sizes(tiny):
    for window, sinks in ((0, 0), (2.5, 0), (8, -1), (8, True)):  # 2.5: bytes counted for 2.5, the mask keeping 3
        with pytest.raises(kvlib.KVLibError, match="(window|sinks) .* must be a whole number"):
            tiny.new_cache(window, sinks)


def test_trace_records_attention(tiny):
    ids = tiny.encode("Mary had a little lamb")
    trace = kvlib.Trace()
    tiny.forward(ids, trace=trace)
    c, T = tiny.config, len(ids)
    assert len(trace.layers) == c.n_layer
    layer = trace.layers[1]
    assert layer.q.shape == layer.k.shape == layer.v.shape == layer.out.shape == (c.n_head, T, c.head_dim)
    assert layer.scores.shape == layer.weights.shape == (c.n_head, T, T)
    upper = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert torch.isneginf(layer.scores[:, upper]).all()
    assert (layer.weights[:, upper] == 0).all()
    assert torch.allclose(layer.weights.sum(-1), torch.ones(c.n_head, T))


def test_trace_with_cache_sees_all_tokens(tiny):
    cache = tiny.new_cache()
    tiny.forward([10, 11, 12, 13], cache=cache)
    trace = kvlib.Trace()
    tiny.forward([14], cache=cache, trace=trace)
    assert trace.layers[0].scores.shape == (tiny.config.n_head, 1, 5)
    assert torch.equal(trace.layers[0].k[:, 0], cache.layers[0].keys[:, 4])


def snapshot(cache):
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def assert_unchanged(cache, before):
    assert len(cache) == before[0][0].shape[1]
    for layer, (k, v) in zip(cache.layers, before):
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v)


def test_writing_into_a_copy_never_changes_the_original(tiny):
    cache = tiny.new_cache()
    tiny.forward([1, 2, 3, 4, 5], cache=cache)  # the buffer has spare room the copy must not share
    before = snapshot(cache)
    twin = cache.copy()
    for layer in twin.layers:  # writing into the copy's tensors in place
        layer.keys.mul_(-1)
        layer.values.zero_()
    tiny.forward([6, 7, 8], cache=twin)  # and decoding on from it
    assert_unchanged(cache, before)
    twin_before = snapshot(twin)
    tiny.forward([9, 9], cache=cache)  # and the other way round
    assert_unchanged(twin, twin_before)


def flip_keys_zero_values(i, K, V):  # an edit: every layer's keys negated, its values zeroed
    K.mul_(-1)
    V.zero_()


def assert_flipped(changed, before):
    for layer, (k, v) in zip(changed.layers, before):
        assert torch.equal(layer.keys, -k) and layer.values.abs().sum() == 0


def test_edited_changes_a_copy_that_the_next_step_reads_and_never_the_cache(tiny):
    cache = tiny.new_cache()
    tiny.forward([1, 2, 3, 4, 5], cache=cache)
    before = snapshot(cache)
    changed = cache.edited(flip_keys_zero_values)
    assert_unchanged(cache, before)
    assert_flipped(changed, before)
    assert (changed.seen, len(changed)) == (5, 5)
    # values all zero: attention outputs only the new token's own value share, so the next step's logits move
    assert (tiny.forward([6], cache=changed) - tiny.forward([6], cache=cache.copy())).abs().max() > 1
    assert_unchanged(cache, before)
    with pytest.raises(kvlib.KVLibError, match="empty cache has no K or V to edit"):
        tiny.new_cache().edited(flip_keys_zero_values)

