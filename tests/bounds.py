"""One tolerance for logits: how far two float32 runs of the same model on the same input may differ.

A forward pass that sums in another order (a cache attending over keys written in pieces, a fused kernel,
another library) rounds differently, and the rounding grows with the model's depth and the size of the
numbers it adds up. So the bound is, per model family, one constant times the number of layers times the
reference's largest |logit|. The constants come from the drift transformers itself shows between its own
cached and uncached paths (prefill, then one token at a time, against one pass; eager attention) on the
same weights, measured on a 2-core x86 CPU with torch 2.13 (relative: max |cached - uncached| / max |logit|):

    model (layers)                          inputs                                       relative drift   a layer
    tiny, GPT-2 (4)                         8-480 tokens, 24 after a 456-token prefill   4.2e-7 - 7.3e-7  1.8e-7
    random GPT-2 of small_gpt2_dir (3)      8 and 24 tokens                              2.4e-7 - 3.2e-7  1.1e-7
    random GPT-2 small (12)                 12 and 300 tokens                            1.7e-6 - 1.9e-6  1.6e-7
    small random Llama, grouped heads (3)   8-128 tokens                                 3.3e-7 - 4.2e-7  1.4e-7
    SmolLM2-135M (30)                       text and random ids, 10-690 tokens           1.5e-6 - 3.9e-6  1.3e-7
    SmolLM2 on its special tokens (ids      [0] * 4, range(16, -1, -1), range(17):       2.3e-5 - 6.9e-5  2.3e-6
    0-16), where logits reach 36            the worst of 10 such runs tried

Ordinary inputs drift by about one float32 epsilon (1.2e-7) a layer in both families; SmolLM2's special
tokens 20 times that. Each constant is about 10x its family's worst case above, so another CPU's kernels
(the paged batching test drifted 1.1e-4 on one SmolLM2 logit on a slower machine, where the bound here is
about 2e-2) pass, while the bugs a cache can have stay above it: positions one too far on cached calls
(RoPE's angles, or GPT-2's table read a row on) move tiny's logits by 0.86 to 1.6 against a bound of 1.5e-4,
but the small random Llama's (whose largest is 0.72: near-uniform attention barely sees positions) by only
3.0e-4 to 9.7e-4 against 4.3e-5; a dropped cache row moves them by 2.2e-2 and 1.2e-2 at least.
test_parity.py::test_the_bound_covers_transformers_own_drift_and_is_tight_enough_to_catch_a_bug measures it
again on every run: the bound at least 4x transformers' drift, and at most a quarter of what those bugs change.
"""

import torch

RELATIVE_PER_LAYER = {"gpt2": 2e-6, "llama": 2e-5}


def logit_bound(model, reference):
    """The largest |difference| float32 rounding explains between two runs of kvlib `model`'s weights
    whose logits are about `reference`."""
    c = model.config
    return RELATIVE_PER_LAYER[c.arch] * c.n_layer * reference.abs().max().item()


def loss_bound(model, reference):
    """The same for a cross-entropy loss (each position's, or their mean) computed from logits like
    `reference`: log-sum-exp and the target's logit each move by at most the logits' largest change."""
    return 2 * logit_bound(model, reference)


def assert_logits_close(ours, reference, model):
    assert ours.shape == reference.shape, (ours.shape, reference.shape)
    diff, bound = (ours - reference).abs().max().item(), logit_bound(model, reference)
    assert diff <= bound, f"logits differ by {diff:.3g}, more than {model.name}'s float32 drift bound {bound:.3g}"


@torch.no_grad()
def hf_logits(hf, ids):  # transformers' logits of one uncached pass over ids: [T, V]
    return hf(torch.tensor([list(ids)]), use_cache=False).logits[0]


@torch.no_grad()
def hf_cached_vs_uncached(hf, ids, split):
    """transformers' own drift: ids[:split] prefilled into its cache, the rest fed one token at a time,
    and one pass over all of ids; both [T, V]."""
    out = hf(torch.tensor([ids[:split]]), use_cache=True)
    logits = [out.logits[0]]
    for t in ids[split:]:
        out = hf(torch.tensor([[t]]), cache=out.cache, use_cache=True)
        logits.append(out.logits[0])
    return torch.cat(logits), hf_logits(hf, ids)
