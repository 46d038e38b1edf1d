"""Shrinking the KV cache: bytes from the layout, exact; quality measured on held-out text."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import kvlib
from kvlib.lessons import compression
from kvlib.lessons.compression import GROUP
from kvlib.model import models

from bounds import assert_logits_close, loss_bound

TINY_BYTES = 2 * 4 * 4 * 64 * 4  # K and V x 4 layers x 4 heads x 64 numbers x 4 bytes (fp32)


@pytest.fixture(scope="module")
def ids(tiny):
    return compression.heldout_ids(tiny, 128)


@pytest.fixture(scope="module")
def hf_tiny(hf_tiny):  # transformers' tiny, the independent path every loss here is anchored to
    return hf_tiny[0]


@torch.no_grad()
def hf_loss(hf, ids):  # transformers' own mean next-token loss (it shifts the labels itself), and its logits [T, V]
    out = hf(torch.tensor([ids]), labels=torch.tensor([ids]))
    return out.loss.item(), out.logits[0]


def test_the_loss_is_transformers_loss_on_the_same_text(tiny, ids, hf_tiny):
    r = compression.quantized_kv(tiny, ids, 4)
    loss, logits = hf_loss(hf_tiny, ids)
    assert r.baseline_loss == pytest.approx(loss, abs=loss_bound(tiny, logits))
    each = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")  # the loss of each next token
    assert r.baseline_per_position == pytest.approx(each.tolist(), abs=loss_bound(tiny, logits))


def test_grouped_heads_loss_is_transformers_loss_with_the_heads_averaged(tiny, ids, hf_tiny):
    """MQA made by hand in transformers' own weights (every K head, and every V head, replaced by their
    mean) scores the text as compression.grouped_kv says."""
    C, nh = tiny.config.n_embd, tiny.config.n_head
    averaged = copy.deepcopy(hf_tiny)
    with torch.no_grad():
        for block in averaged.transformer.h:
            for part in (block.attn.c_attn.weight, block.attn.c_attn.bias):  # [C, 3C] and [3C]: q | k | v
                for start in (C, 2 * C):
                    heads = part[..., start:start + C].unflatten(-1, (nh, C // nh))  # [..., nh, hs]
                    part[..., start:start + C] = heads.mean(-2, keepdim=True).expand_as(heads).flatten(-2)
    mqa = compression.grouped_kv(tiny, ids, 1)
    (loss, logits), (baseline, baseline_logits) = hf_loss(averaged, ids), hf_loss(hf_tiny, ids)
    assert mqa.loss == pytest.approx(loss, abs=loss_bound(tiny, logits))
    assert mqa.baseline_loss == pytest.approx(baseline, abs=loss_bound(tiny, baseline_logits))


def test_kl_is_of_the_compressed_from_the_uncompressed_on_a_hand_made_pair(tiny, monkeypatch):
    """Two tokens, a vocabulary of two: the baseline gives the next token (id 0) 0.9, the compressed
    model a coin toss. KL(base || compressed) = 0.9 ln(0.9/0.5) + 0.1 ln(0.1/0.5) = 0.3681 nats;
    the other direction would be 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.5108."""
    base = torch.tensor([[0.9, 0.1], [0.5, 0.5]]).log()  # [T, V]; the last row predicts past the text
    compressed = torch.tensor([[0.5, 0.5], [0.9, 0.1]]).log()
    monkeypatch.setattr(compression, "_baseline_logits", lambda model, ids: base)
    r = compression._measure("hand-made", tiny, torch.tensor([1, 0]), compressed, 1.0)
    assert r.kl == pytest.approx(0.9 * math.log(1.8) + 0.1 * math.log(0.2), abs=1e-6)  # 0.3681, not 0.5108
    assert r.loss == pytest.approx(math.log(2), abs=1e-6) and r.baseline_loss == pytest.approx(-math.log(0.9), abs=1e-6)
    assert r.loss_increase == pytest.approx(math.log(2) + math.log(0.9), abs=1e-6)


def test_saving_is_the_share_of_bytes_not_held():
    r = compression.Result("hand-made", 256, 1024, 2.0, 1.5, 0.1)
    assert r.saving == 0.75 and r.loss_increase == 0.5


def test_loss_noise_is_twice_the_standard_error_of_the_per_position_differences():
    # differences 0.1, -0.1, 0.3, -0.3: mean 0, sample std sqrt(0.2 / 3), over 4 positions
    r = compression.Result("hand-made", 1, 1, 0.0, 0.0, 0.0, [1.1, 0.9, 1.3, 0.7], [1.0, 1.0, 1.0, 1.0])
    assert r.loss_noise == pytest.approx(2 * math.sqrt(0.2 / 3) / 2, abs=1e-6)
    steady = compression.Result("hand-made", 1, 1, 0.0, 0.0, 0.0, [1.1] * 4, [1.0] * 4)  # the same change everywhere
    assert steady.loss_noise == pytest.approx(0, abs=1e-6)


def test_heldout_text_starts_at_the_first_act_and_is_not_in_tiny_training(tiny):
    assert tiny.decode(compression.heldout_ids(tiny, 5)).startswith("ACT I.")
    assert "Measure for Measure" in (models.ASSETS / "README.md").read_text()  # its provenance is told
    with pytest.raises(kvlib.KVLibError, match="tokens of the held-out text"):
        compression.heldout_ids(tiny, 10 ** 6)


def test_grouped_kv_bytes_and_the_loss_jump(tiny, ids):
    before = {k: v.clone() for k, v in tiny.params["h"][0].items()}
    same, gqa, mqa = (compression.grouped_kv(tiny, ids, n) for n in (4, 2, 1))
    assert [r.bytes_per_token for r in (same, gqa, mqa)] == [TINY_BYTES, TINY_BYTES / 2, TINY_BYTES / 4]
    assert same.baseline_bytes_per_token == TINY_BYTES
    assert same.loss == same.baseline_loss and same.kl < 1e-9  # a group of one head is the model itself
    # averaged heads were never trained to share: the loss jumps, more as fewer heads are kept
    assert gqa.loss > gqa.baseline_loss + 0.1 and mqa.loss > gqa.loss + 0.1 and mqa.kl > gqa.kl > 0.05
    assert all(torch.equal(v, tiny.params["h"][0][k]) for k, v in before.items())  # the caller's model untouched


def test_grouped_params_share_one_key_per_group(tiny):
    p = compression.grouped_params(tiny, 2)["h"][0]["attn.c_attn.weight"]  # [C, 3C]: q | k | v
    k = p[:, 256:512].unflatten(1, (4, 64))  # [C, heads, hs]
    original = tiny.params["h"][0]["attn.c_attn.weight"][:, 256:512].unflatten(1, (4, 64))
    assert torch.equal(k[:, 0], k[:, 1]) and torch.equal(k[:, 2], k[:, 3]) and not torch.equal(k[:, 1], k[:, 2])
    assert torch.allclose(k[:, 0], original[:, :2].mean(1))
    with pytest.raises(kvlib.KVLibError, match="must divide"):
        compression.grouped_params(tiny, 3)


def test_grouped_kv_refuses_an_already_grouped_model(small_llama):
    with pytest.raises(kvlib.KVLibError, match="GPT-2-family"):
        compression.grouped_kv(small_llama, [1, 2, 3], 1)


@pytest.fixture(scope="module")
def mha_llama(tiny):  # a small random Llama-family model with one K/V head per query head, as GPT-2 has
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=tiny.config.vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
    return models.from_hf("mha-llama", LlamaForCausalLM(config).eval(), tiny.tokenizer, "cpu")


def test_grouped_params_average_a_llama_family_models_own_k_and_v_matrices(mha_llama, ids):
    """The family's map_kv hands the averaging K's and V's own matrices [C, nh * hd]; Q and the rest stay."""
    before, p = mha_llama.params["h"][1], compression.grouped_params(mha_llama, 2)["h"][1]
    head = lambda w, h: w[:, h * 16:(h + 1) * 16]  # noqa: E731 -- [C, hd], head h's columns
    for name in ("self_attn.k_proj.weight", "self_attn.v_proj.weight"):
        assert torch.equal(head(p[name], 2), head(p[name], 3)) and not torch.equal(head(p[name], 1), head(p[name], 2))
        assert torch.allclose(head(p[name], 0), (head(before[name], 0) + head(before[name], 1)) / 2)
    assert all(p[k] is w for k, w in before.items() if k not in ("self_attn.k_proj.weight", "self_attn.v_proj.weight"))
    same, gqa = (compression.grouped_kv(mha_llama, ids[:32], n) for n in (4, 2))
    assert same.kl < 1e-9 < gqa.kl  # a group of one head is the model itself


def test_quantize_rounds_each_group_to_its_levels():
    torch.manual_seed(0)
    x = torch.randn(2, 2 * GROUP, 2 * GROUP)  # [nkv, N, hs]
    by_channel = x.unflatten(1, (2, GROUP)).transpose(2, 3)  # [nkv, groups, hs, GROUP]
    for along, groups in (("token", x.unflatten(2, (2, GROUP))), ("channel", by_channel)):
        q = compression.quantize(x, 4, along)
        q_groups = q.unflatten(2, (2, GROUP)) if along == "token" else q.unflatten(1, (2, GROUP)).transpose(2, 3)
        step = (groups.amax(-1) - groups.amin(-1)) / 15  # [.., groups]
        assert all(len(g.unique()) <= 16 for g in q_groups.reshape(-1, GROUP))  # 4 bits: at most 16 levels
        assert ((q_groups - groups).abs().amax(-1) <= step / 2 * 1.01 + 1e-3).all()  # off by at most half a step


def test_quantized_kv_bytes_from_the_layout(tiny):
    ids = compression.heldout_ids(tiny, 2 * GROUP)
    numbers = TINY_BYTES // 4  # per token
    int4, int8 = (compression.quantized_kv(tiny, ids, b) for b in (4, 8))
    assert int4.bytes_per_token == numbers * (0.5 + 4 / GROUP) == 1280  # half a byte + fp16 scale and zero per group
    assert int8.bytes_per_token == numbers * (1 + 4 / GROUP) == 2304
    # the newest GROUP tokens kept in fp32, the older GROUP quantized
    recent = compression.quantized_kv(tiny, ids, 4, recent=GROUP)
    assert recent.bytes_per_token == numbers * (GROUP * (0.5 + 4 / GROUP) + GROUP * 4) / (2 * GROUP)
    for bad in (-GROUP, 2.5):  # -GROUP counted more tokens quantized than held: negative bytes
        with pytest.raises(kvlib.KVLibError, match=r"recent \(newest tokens .* at least 0"):
            compression.quantized_kv(tiny, ids, 4, recent=bad)


def test_an_unquantized_cache_is_the_baseline(tiny, ids, hf_tiny):
    baseline, logits = hf_loss(hf_tiny, ids)
    for r in (compression.quantized_kv(tiny, ids, None), compression.quantized_kv(tiny, ids, 4, recent=len(ids))):
        assert r.bytes_per_token == TINY_BYTES
        assert r.loss == pytest.approx(baseline, abs=loss_bound(tiny, logits))
        assert r.kl < 1e-6  # logits apart by rounding (under 1.5e-4): a KL of the order of its square


def test_a_quantized_cache_costs_quality(tiny, ids):
    int4, int2 = (compression.quantized_kv(tiny, ids, b) for b in (4, 2))
    # the KL sees the damage; the loss on 128 tokens is too noisy to (int2 even scored lower here)
    assert 0 < int4.kl < int2.kl < 0.05
    with pytest.raises(kvlib.KVLibError, match="bits must be"):
        compression.quantized_kv(tiny, ids, 16)


def test_smollm2_keys_prefer_channels(smollm2):
    """KIVI's finding, live on SmolLM2 (on tiny the two are within noise): at int4, keys quantized
    per channel lose less than keys quantized per token."""
    ids = compression.heldout_ids(smollm2, 64)
    by_channel, by_token = (compression.quantized_kv(smollm2, ids, 4, keys=k, values="token")
                            for k in ("channel", "token"))
    assert 0 < by_channel.kl < 0.8 * by_token.kl


def test_key_channel_spread_is_the_largest_channel_against_the_median(tiny, smollm2, hf_tiny):
    ids = compression.heldout_ids(tiny, 64)
    with torch.no_grad():  # the keys as transformers caches them, not kvlib's cache
        keys = hf_tiny(torch.tensor([ids]), use_cache=True).cache.layers[1].keys[0]  # [nkv, T, hs]
    peak = keys.abs().amax(1)  # [nkv, hs]: each channel's largest |key| over the text
    by_hand = sum(float(p.max() / p.median()) for p in peak) / len(peak)
    spread = compression.key_channel_spread(tiny, ids)
    assert len(spread) == tiny.config.n_layer and spread[1] == pytest.approx(by_hand)
    # SmolLM2's keys (after RoPE) have channels that stand far out; tiny's do not: KIVI's reason, live
    assert min(compression.key_channel_spread(smollm2, compression.heldout_ids(smollm2, 64))) > max(spread)


def test_the_window_mask_really_drops_tokens(tiny):
    """Masking = evicting: the masked pass equals decoding token by token over a cache that drops them."""
    ids = torch.tensor(compression.heldout_ids(tiny, 24))
    window, sinks = 6, 2
    trace = kvlib.Trace()
    masked = tiny.forward(ids, cache=tiny.new_cache(window, sinks), trace=trace)  # [T, V]
    weights = trace.layers[0].weights  # [nh, T, S]
    assert weights[:, 20, 2:15].abs().max() == 0  # token 20 sees the sinks 0-1 and the window 15-20 only
    assert (weights[:, 20, :2] > 0).all() and (weights[:, 20, 15:21] > 0).all()
    cache, evicting, held = tiny.new_cache(), [], []  # a cache without a window, evicted by hand here
    for i, token in enumerate(ids):  # held: the text positions the cache holds
        evicting.append(tiny.forward([token], cache=cache))
        assert cache.seen == i + 1  # the next token's position, however few the cache holds
        held.append(i)
        keep = [n for n, pos in enumerate(held) if pos < sinks or pos > i + 1 - window]  # what token i + 1 sees
        held = [held[n] for n in keep]
        for layer in cache.layers:
            layer._k, layer._v, layer.length = layer.keys[:, keep].clone(), layer.values[:, keep].clone(), len(keep)
    assert_logits_close(masked, torch.cat(evicting), tiny)
    plain = tiny.forward(ids)
    assert torch.equal(tiny.forward(ids, cache=tiny.new_cache(len(ids))), plain)  # a window as long as the text: plain causal


def test_sliding_window_bytes_and_per_position(tiny, ids, hf_tiny):
    r = compression.sliding_window(tiny, ids, 16, sinks=4)
    assert r.bytes_per_token == TINY_BYTES * 20 / len(ids)
    assert len(r.per_position) == len(r.baseline_per_position) == len(ids) - 1
    _, logits = hf_loss(hf_tiny, ids)
    each = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")  # transformers' loss of each token
    assert r.per_position[:16] == pytest.approx(each[:16].tolist(), abs=loss_bound(tiny, logits))  # nothing dropped yet
    assert r.kl > 0.05
    with pytest.raises(kvlib.KVLibError, match="longer than window"):
        compression.sliding_window(tiny, ids, len(ids))


def test_sinks_rescue_a_sliding_window_on_smollm2(smollm2):
    """StreamingLLM's finding, live: without its first tokens SmolLM2's loss jumps; 4 sinks win most of it back."""
    ids = compression.heldout_ids(smollm2, 128)
    bare, sinks = (compression.sliding_window(smollm2, ids, 32, sinks=s) for s in (0, 4))
    assert bare.loss > sinks.loss + 0.3 and bare.kl > 2 * sinks.kl
    assert sinks.loss > sinks.baseline_loss  # still a cost: the window forgets


def test_a_loss_gap_between_two_caches_is_read_as_a_loss_against_the_full_one(tiny):
    """Notebook 7 weighs keys per token against per channel by loss_gap: against the full cache it is loss_noise."""
    ids = compression.heldout_ids(tiny, 96)
    int4, full = compression.quantized_kv(tiny, ids, 4), compression.quantized_kv(tiny, ids, None)
    gap, noise = compression.loss_gap(int4, full)
    assert gap == pytest.approx(int4.loss_increase, abs=1e-6) and noise == pytest.approx(int4.loss_noise, rel=1e-4)
    assert noise > 0 and compression.loss_gap(full, int4)[0] == pytest.approx(-gap)
    with pytest.raises(kvlib.KVLibError, match="same text"):
        compression.loss_gap(int4, compression.quantized_kv(tiny, ids[:64], 4))


def test_a_tiny_kl_shows_its_size_not_zeros():
    """Notebook 7's int8 KL, about 1e-5 nats, printed as 0.0000 told a reader nothing."""
    assert "KL 1.2e-05 nats" in str(compression.Result("hand-made", 256, 1024, 2.0, 2.0, 1.23e-5))
    assert [compression.nats(x) for x in (0.0, 0.1637, 0.001, 9.9e-4)] == ["0.0000", "0.1637", "0.0010", "9.9e-04"]


def test_a_result_says_what_numbers_its_saving_is_set_against(tiny):
    """Notebook 7's int8 line: 2,304 bytes against 8,192 is a saving against fp32, tiny's cache, and it says so."""
    assert "vs 1,024 in bf16 (75% saved)" in str(compression.Result("hand-made", 256, 1024, 2.0, 1.5, 0.1, baseline_dtype="bf16"))
    r = compression.quantized_kv(tiny, compression.heldout_ids(tiny, 64), 8)
    assert r.baseline_dtype == "fp32" and f"vs {r.baseline_bytes_per_token:,.0f} in fp32" in str(r)
