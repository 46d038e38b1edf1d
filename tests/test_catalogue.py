"""The catalogue of real architectures: each entry sourced, its bytes by the formula, the formula
equal to real tensors wherever kvlib runs the model, and the classic mistakes measured."""

import pytest

from kvlib import KVLibError, memory

KB = {  # bytes per token in bf16, worked out by hand from each source: 2 (K, V) x layers x KV heads x head_dim x 2
    "GPT-2 small": 2 * 12 * 12 * 64 * 2, "GPT-2 XL": 2 * 48 * 25 * 64 * 2, "Llama-2-7B": 2 * 32 * 32 * 128 * 2,
    "Llama-3-8B": 2 * 32 * 8 * 128 * 2, "Llama-3.1-405B": 2 * 126 * 8 * 128 * 2, "Falcon-7B": 2 * 32 * 1 * 64 * 2,
    "DeepSeek-67B": 2 * 95 * 8 * 128 * 2, "DeepSeek-V2": (512 + 64) * 60 * 2, "SmolLM2-135M": 2 * 30 * 3 * 64 * 2,
}


def test_every_entry_names_its_source_and_date():
    for arch in memory.CATALOGUE.values():
        assert len(arch.source) > 20 and arch.date[:2] in ("19", "20"), arch.name


@pytest.mark.parametrize("name", list(KB))
def test_bytes_per_token_by_hand(name):
    assert memory.kv_bytes(memory.CATALOGUE[name], 1) == KB[name]
    assert memory.kv_bytes(memory.CATALOGUE[name], 1000, batch=3) == 3000 * KB[name]
    for context, batch in ((-5, 1), (1.5, 1), (10, 0), (10, -2)):
        with pytest.raises(KVLibError, match="a (context|batch) .* must be a whole number"):
            memory.kv_bytes(memory.CATALOGUE[name], context, batch)


def test_sliding_windows_bound_only_their_layers():
    gemma = memory.CATALOGUE["Gemma-2-9B"]  # 21 local layers (window 4,096) alternating with 21 global ones
    per_layer_token = 2 * 8 * 256 * 2
    assert memory.kv_bytes(gemma, 8192) == 21 * 4096 * per_layer_token + 21 * 8192 * per_layer_token
    mistral = memory.CATALOGUE["Mistral-7B-v0.1"]  # every layer windowed: the cache stops growing
    window = 2 * 32 * 8 * 128 * 2 * 4096  # 536,870,912 bytes: 32 layers of 8 K/V heads x 128, 4,096 tokens
    assert memory.kv_bytes(mistral, 4096) == memory.kv_bytes(mistral, 10**6) == window
    assert memory.crossover_context(mistral) is None


@pytest.mark.parametrize("fixture, name", [("random_gpt2", "GPT-2 small"), ("smollm2", "SmolLM2-135M"), ("tiny", None)])
def test_formula_equals_real_tensors(request, fixture, name):
    model = request.getfixturevalue(fixture)
    arch = memory.of_model(model)
    cache = model.new_cache()
    model.forward(list(range(37)), cache=cache)
    assert cache.nbytes == memory.kv_bytes(arch, 37, bytes_per_number=4)
    assert sum(layer.nbytes for layer in cache.layers[:1]) == memory.kv_bytes_per_layer(arch, 37, 4)[0]
    if name:
        assert memory.kv_bytes(memory.CATALOGUE[name], 37) == memory.kv_bytes(arch, 37)


def test_crossover_is_where_the_cache_outweighs_the_weights():
    arch = memory.CATALOGUE["Llama-3-8B"]
    # 16 GB of bf16 weights / 131,072 bytes per token = 122,070.3 tokens; 8 sequences: 15,258.8 tokens each
    assert memory.crossover_context(arch) == 122_071 and memory.crossover_context(arch, batch=8) == 15_259


def test_classic_mistakes():
    wrong = memory.mistakes(memory.CATALOGUE["Llama-3-8B"], 8192)
    (bad, right), = wrong.values()
    assert right == 131072 * 8192 and bad == 4 * right  # GQA ignored (32 K/V heads, not 8): a 4x overestimate
    gemma = memory.mistakes(memory.CATALOGUE["Gemma-2-9B"], 8192)
    bad, right = gemma["head_dim taken as hidden / heads"]
    assert bad / right == pytest.approx((3584 // 16) / 256)
    bad, right = gemma["sliding window applied to every layer"]
    assert bad < right  # an underestimate: the global layers keep everything


def test_what_deepseeks_93_percent_compares():
    v2, base = memory.CATALOGUE["DeepSeek-V2"], memory.CATALOGUE["DeepSeek-67B"]
    bf16 = 1 - memory.kv_bytes(v2, 1) / memory.kv_bytes(base, 1)
    six_bits = 1 - memory.kv_bytes(v2, 1, bytes_per_number=6 / 8) / memory.kv_bytes(base, 1)
    assert round(bf16, 3) == 0.822 and round(six_bits, 3) == memory.FACTS["deepseek_v2_kv_reduction"][0]


def test_deepseek_v3_weights_are_counted_as_shipped_in_fp8():
    v3 = memory.CATALOGUE["DeepSeek-V3"]
    per_param, source = memory.FACTS["deepseek_v3_weight_bytes"]
    assert per_param == 1 and memory.all_weight_bytes(v3, per_param) == 671e9  # 671 GB, half the bf16 count
    assert "FP8" in source and "2024-12-26" in source and "FP8" in v3.note


def test_only_entries_that_give_a_vocabulary_and_feed_forward_become_configs():
    c = memory.as_config(memory.CATALOGUE["GPT-2 XL"])
    assert (c.n_layer, c.n_head, c.n_embd, c.n_inner, c.vocab_size, c.arch) == (48, 25, 1600, 6400, 50257, "gpt2")
    with pytest.raises(KVLibError, match="pick one of GPT-2 small"):
        memory.as_config(memory.CATALOGUE["Llama-3-8B"])
