"""Attention by hand equals the model's trace; what a step costs with and without a cache.
(The attention grid and its apps: test_views_attention.py.)"""

import torch

import kvlib
from kvlib.lessons import attention, memory


def test_explain_equals_the_trace_and_transformers_weights(tiny, hf_tiny):
    trace = kvlib.Trace()
    ids = tiny.encode("Mary had a little lamb")
    tiny.forward(ids, trace=trace)
    with torch.no_grad():  # [layers] of [1, heads, T, T]: transformers' own attention weights
        weights = hf_tiny[0](torch.tensor([ids]), output_attentions=True).attentions
    for layer, head in [(0, 0), (2, 3), (3, 1)]:
        steps = attention.explain(tiny, "Mary had a little lamb", layer, head)
        t = trace.layers[layer]
        # not logits: one head's numbers computed again by the same sums, rounded alike; weights lie in [0, 1]
        for mine, theirs in [(steps.Q, t.q[head]), (steps.K, t.k[head]), (steps.V, t.v[head]),
                             (steps.masked, t.scores[head]), (steps.weights, t.weights[head]), (steps.out, t.out[head]),
                             (steps.weights, weights[layer][0, head])]:
            assert torch.allclose(mine, theirs, atol=1e-5)
        T = len(steps.tokens)
        assert torch.isneginf(steps.masked[torch.ones(T, T, dtype=torch.bool).triu(1)]).all()
        assert not torch.isinf(steps.scores).any()


def test_macs_of_a_cached_step_grow_linearly_and_uncached_quadratically(random_gpt2):
    c = random_gpt2.config
    # by hand for GPT-2 small: per token 12 x (4 x 768² + 2 x 768 x 3,072) = 84,934,656 weight multiply-adds,
    # 768 x 50,257 = 38,597,376 for one position's logits, 2 x 12 x 768 = 18,432 per token attended
    cached = [memory.decode_step_macs(c, n, True) for n in (100, 200, 300)]
    plain = [memory.decode_step_macs(c, n, False) for n in (100, 200, 300)]
    assert cached == [84_934_656 + 38_597_376 + 18_432 * n for n in (100, 200, 300)]  # linear: n keys attended
    assert plain == [n * 84_934_656 + 38_597_376 + 18_432 * n * (n + 1) // 2 for n in (100, 200, 300)]  # quadratic
    assert cached[2] == 129_061_632 and plain[2] == 26_351_198_976
    # a full pass over 50 tokens, logits for each: the work of 50 cached steps
    assert memory.forward_macs(c, 0, 50, logits_for=50) == 50 * (84_934_656 + 38_597_376) + 18_432 * 1275
