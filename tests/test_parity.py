"""kvlib's glass-box forward pass against transformers' GPT2LMHeadModel (eager attention), the one logit
tolerance (bounds.py) against transformers' own float32 drift and the bugs it must still catch, and the greedy
answers of every decoder (generate, generate_batch, serve) against transformers' own, prompt by prompt."""

import pytest
import torch
from transformers import GPT2LMHeadModel

import kvlib
from kvlib.server import batching, serving

from bounds import assert_logits_close, hf_cached_vs_uncached, hf_logits, logit_bound
from conftest import hf_greedy, hf_model

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"
# eight prompts of eight lengths; SmolLM2 answers the chat one in fewer than NEW tokens, ending at its end-of-text
# token; the last one starts with TEXT, so serving it after TEXT reads TEXT's full blocks from the pool's index
PROMPTS = ["ROMEO.\nBut soft, what light", "The", "Once upon a time there was a king who", "Hi there",
           "<|im_start|>user\nWhat is 2+2? Answer with one number.<|im_end|>\n<|im_start|>assistant\n", TEXT, "x y z",
           TEXT + " " + TEXT]
NEW = 12


def check(model, hf, ids):
    """Both attention paths against transformers: torch's fused kernel (no trace) and the one
    written out (what a trace records)."""
    theirs = hf_logits(hf, ids)
    for ours in (model.forward(ids), model.forward(ids, trace=kvlib.Trace())):
        assert ours.shape == (len(ids), model.config.vocab_size)
        assert_logits_close(ours, theirs, model)
    return ours, theirs


def test_tiny_matches_transformers(tiny, hf_tiny):
    check(tiny, hf_tiny[0], tiny.encode(TEXT * 8)[: tiny.config.n_ctx])


def test_random_gpt2_matches_transformers(random_gpt2, hf_random_gpt2):
    assert random_gpt2.config == kvlib.Config(12, 12, 768, 1024, 50257)
    check(random_gpt2, hf_random_gpt2, torch.randint(0, 50257, (300,), generator=torch.Generator().manual_seed(0)).tolist())


def test_directory_model_matches_transformers(small_gpt2_dir):
    model = kvlib.load_model(str(small_gpt2_dir), device="cpu")
    hf = GPT2LMHeadModel.from_pretrained(small_gpt2_dir, attn_implementation="eager").eval()
    check(model, hf, model.encode(TEXT)[:64])


@pytest.mark.parametrize("text", ["ROMEO.\nBut soft, what light", "Hello, world! 12345", "a"])
def test_round_trip_text(tiny, text):
    assert tiny.decode(tiny.encode(text)) == text


@torch.no_grad()
def bug_changes(hf, ids, split):
    """How far two cache bugs move transformers' logits: the tokens after ids[:split] fed at positions one
    too far (a RoPE offset on cached calls, or GPT-2's position table read a row on), and the middle token's
    K and V left out of what the last token attends to (a dropped cache row)."""
    plain = hf_logits(hf, ids)
    prefix = hf(torch.tensor([ids[:split]]), use_cache=True)
    shifted = hf(torch.tensor([ids[split:]]), cache=prefix.cache,
                 position_ids=torch.arange(split + 1, len(ids) + 1)[None]).logits[0]
    mask = torch.ones(1, len(ids), dtype=torch.long)
    mask[0, len(ids) // 2] = 0
    dropped = hf(torch.tensor([ids]), attention_mask=mask).logits[0, -1]
    return (shifted - plain[split:]).abs().max().item(), (dropped - plain[-1]).abs().max().item()


@pytest.mark.parametrize("name", ["tiny", "small_llama", "random_gpt2", "smollm2"])
def test_the_bound_covers_transformers_own_drift_and_is_tight_enough_to_catch_a_bug(name, request):
    """On text (a prefill then steps, and a long prefill then 8 steps), and on SmolLM2 the run of special
    tokens that drifted the most of those tried (bounds.py), the bound sits at least 4x from both sides:
    transformers' own cached and uncached logits differ by at most a quarter of it, and each bug moves
    them by at least 4 bounds (the least, 7, on the small random Llama, whose logits are small and whose
    near-uniform attention barely sees positions)."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    text = model.encode(TEXT * 20)[: min(256, model.config.n_ctx - 1)]  # room for the position one too far
    cases = [(text[:24], 1), (text, len(text) - 8)] + ([(list(range(17)), 1)] if name == "smollm2" else [])
    for ids, split in cases:
        cached, plain = hf_cached_vs_uncached(hf, ids, split)
        drift, bound = (cached - plain).abs().max().item(), logit_bound(model, plain)
        shifted, dropped = bug_changes(hf, ids, split)
        numbers = f"{len(ids)} tokens: drift {drift:.2g}, bound {bound:.2g}, offset {shifted:.2g}, dropped row {dropped:.2g}"
        assert 4 * drift <= bound, numbers
        assert 4 * bound <= min(shifted, dropped), numbers


def served(model, prompts, policy):  # serve's answers to the prompts, four slots (prefix caching on, as by default)
    requests = [serving.Request(serving.label(i), p, NEW) for i, p in enumerate(prompts)]
    return serving.serve(model, requests, policy, max_batch=4)


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_greedy_answers_are_what_transformers_answers_each_prompt_alone(name, request):
    """generate (a prompt at a time), generate_batch (all eight together) and serve (static and continuous, four
    slots) answer each prompt what transformers' own greedy generate answers it alone: stopping after its
    end-of-text token as transformers does by default, or exactly NEW tokens long with that token taken like any
    other (stop_at_eos=False; serve always answers so, as vLLM's benchmark does with ignore_eos)."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    prompts = [model.encode(p) for p in PROMPTS]
    assert len({len(p) for p in prompts}) == len(PROMPTS)
    whole = [hf_greedy(hf, p, NEW, stop_at_eos=False) for p in prompts]
    # where the whole answer holds no end-of-text token, transformers' default run is that answer (greedy picks are
    # the same either way); where it does, transformers' default run is asked, not derived
    stopping = [hf_greedy(hf, p, NEW) if model.eos_token_id in w else w for p, w in zip(prompts, whole)]
    assert [kvlib.generate(model, p, NEW).ids for p in prompts] == stopping
    assert [g.ids for g in kvlib.generate_batch(model, prompts, NEW)] == stopping
    assert [g.ids for g in kvlib.generate_batch(model, prompts, NEW, stop_at_eos=False)] == whole
    for policy in serving.POLICIES:
        run = served(model, prompts, policy)
        assert [s.ids for s in run.served] == whole, policy
        assert run.served[-1].reused == 16  # TEXT's first block read, not computed
    if name == "smollm2":  # the end-of-text rule was met, and both ways of stopping were compared
        assert len(stopping[4]) < NEW and stopping[4] == whole[4][:len(stopping[4])] != whole[4]


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_every_row_serve_decodes_has_transformers_uncached_logits(name, request, monkeypatch):
    """Continuous serving of the eight prompts: the logits each scheduled row picks its token from (a prefill's
    last row, or one of up to four sequences of different lengths decoded in one call) equal transformers' logits
    of one pass over that sequence's whole text so far, without a cache, within bounds.py's tolerance. One
    uncached pass over a sequence's final text holds them all: its row j saw tokens 0..j only (causal)."""
    model, hf = request.getfixturevalue(name), hf_model(request, name)
    rows, pick = [], batching.pick

    def recording(model, gen, logits, rules):  # what postprocess hands pick: the sequence's text and its row's logits
        rows.append((tuple(gen.prompt_ids), gen.prompt_ids + gen.ids, logits))
        return pick(model, gen, logits, rules)

    monkeypatch.setattr(batching, "pick", recording)
    run = served(model, [model.encode(p) for p in PROMPTS], "continuous")
    assert len(rows) == run.tokens == len(PROMPTS) * NEW  # every token picked from a recorded row
    assert max(sum(cell is not None and cell[1] == "decode" for cell in step.cells) for step in run.steps) == 4
    final = {prompt: max((text for p, text, _ in rows if p == prompt), key=len) for prompt, _, _ in rows}
    theirs = {prompt: hf_logits(hf, text) for prompt, text in final.items()}  # [T, V] per sequence
    for prompt, text, logits in rows:
        assert text == final[prompt][:len(text)]  # the row's text so far begins its sequence's final text
        assert_logits_close(logits, theirs[prompt][len(text) - 1], model)
