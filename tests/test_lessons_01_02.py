"""What notebooks 1 and 2 add to kvlib: the loop's broken variants, temperature, and what languages cost."""

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
from matplotlib.figure import Figure

import kvlib
from kvlib import plots, tokenization
from kvlib.generate import FEEDS, feed_loop, softmax_at, temperature_probs


def test_the_whole_feed_is_the_real_loop(tiny):
    run = feed_loop(tiny, "ROMEO.\n", 6, "whole")
    assert run.ids == kvlib.generate(tiny, "ROMEO.\n", 6, use_cache=False, stop_at_eos=False).ids
    prompt = tiny.encode("ROMEO.\n")
    assert run.inputs == [prompt + run.ids[:k] for k in range(6)]
    assert run.from_prompt == [len(prompt)] * 6 and run.text == tiny.decode(run.ids)


def test_feeding_only_the_prompt_repeats_the_first_token(tiny):
    whole, stuck = feed_loop(tiny, "ROMEO.\n", 5, "whole"), feed_loop(tiny, "ROMEO.\n", 5, "prompt only")
    assert stuck.ids == [whole.ids[0]] * 5
    assert all(fed == tiny.encode("ROMEO.\n") for fed in stuck.inputs)


def test_feeding_only_the_answer_drops_the_prompt_after_step_one(tiny):
    prompt = tiny.encode("JULIET.\n")
    run = feed_loop(tiny, prompt, 5, "answer only")
    assert run.inputs[0] == prompt and run.from_prompt == [len(prompt), 0, 0, 0, 0]
    assert run.inputs[1:] == [run.ids[:k] for k in range(1, 5)]
    # each later pick is what the model says after the answer alone
    assert run.ids[2] == int(tiny.forward(run.ids[:2])[-1].argmax())
    assert run.fed_tokens[1] == [tiny.decode([run.ids[0]])] and run.tokens == [tiny.decode([i]) for i in run.ids]


def test_smollm2_forgets_the_question_without_the_prompt(smollm2):
    runs = {feed: feed_loop(smollm2, "The capital of France is", 6, feed) for feed in FEEDS}
    assert runs["whole"].tokens[0] == " Paris"
    assert set(runs["prompt only"].tokens) == {" Paris"}
    assert runs["answer only"].ids[0] == runs["whole"].ids[0] and runs["answer only"].ids != runs["whole"].ids


@pytest.mark.parametrize("feed, steps", [("everything", 3), ("whole", 0)])
def test_feed_loop_rejects_bad_input(tiny, feed, steps):
    with pytest.raises(kvlib.KVLibError, match="feed must be|max_new_tokens"):
        feed_loop(tiny, "ROMEO.", steps, feed)


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    ids, probs = temperature_probs(logits, (0.0, 0.5, 1.0, 2.0), k=3)
    assert ids == [0, 1, 2]
    assert probs[0].tolist() == [1.0, 0.0, 0.0]  # temperature 0: greedy
    assert torch.allclose(probs[2], torch.softmax(logits, -1)[:3])
    assert probs[1, 0] > probs[2, 0] > probs[3, 0]  # the favourite loses probability as T rises
    assert probs[1, 2] < probs[2, 2] < probs[3, 2]  # an outsider gains it
    assert torch.allclose(softmax_at(logits, 2.0).sum(), torch.tensor(1.0))
    with pytest.raises(kvlib.KVLibError, match="temperature"):
        softmax_at(logits, -1)


def test_costs_count_tokens_and_compare_with_the_baseline():
    gpt2 = tokenization.gpt2()
    rows = tokenization.costs([gpt2], {"English": "Hello world", "Chinese": "你好世界"})
    en, zh = rows
    assert (en.tokens, en.chars, en.bytes, en.ratio) == (2, 11, 11, 1.0)
    assert (zh.tokens, zh.chars, zh.bytes, zh.ratio) == (8, 4, 12, 4.0)  # GPT-2 spends 2 tokens per character here
    assert (zh.per_char, zh.per_byte) == (2.0, 8 / 12)
    table = tokenization.cost_table(rows)
    assert "GPT-2" in table and f"{zh.ratio:.2f}" in table
    with pytest.raises(kvlib.KVLibError, match="baseline"):
        tokenization.costs([gpt2], {"German": "Hallo"})


def test_the_same_sentence_costs_gpt2_more_in_hindi_than_o200k():
    rows = {(r.label, r.tokenizer): r for r in tokenization.costs([tokenization.gpt2(), tokenization.openai("o200k_base")])}
    assert rows[("Hindi", "GPT-2")].ratio > 3 * rows[("Hindi", "GPT-4o / GPT-5 (o200k_base)")].ratio


def test_the_new_plots_return_figures_and_check_shapes(tiny):
    runs = [feed_loop(tiny, "ROMEO.\n", 3, feed) for feed in FEEDS]
    assert isinstance(plots.feed_variants(runs), Figure)
    assert isinstance(plots.temperature_bars(["a", "b"], (0.5, 1), [[0.9, 0.1], [0.6, 0.3]]), Figure)
    assert isinstance(plots.token_ratios(["English", "Hindi"], ["GPT-2"], [[1.0, 4.8]]), Figure)
    with pytest.raises(ValueError, match="one row per temperature"):
        plots.temperature_bars(["a", "b"], (0.5, 1), [[0.9, 0.1]])
    with pytest.raises(ValueError, match="one row per tokenizer"):
        plots.token_ratios(["English"], ["GPT-2", "GPT-4"], [[1.0]])


def test_costs_are_counted_in_a_baseline_that_has_tokens(tiny):
    with pytest.raises(kvlib.KVLibError, match="has no tokens under"):
        tokenization.costs(tokenization.available(tiny), {"English": "", "French": "Bonjour"})
