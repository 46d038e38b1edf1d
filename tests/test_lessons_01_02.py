"""What notebooks 1 and 2 add to kvlib: the loop's broken variants, temperature, and what languages cost."""

import matplotlib

matplotlib.use("Agg")

from types import SimpleNamespace

import pytest
import torch

import kvlib
from conftest import hf_greedy
from kvlib.lessons import tokenization
from kvlib.lessons.loop import FEEDS, feed_loop, softmax_at, stream_pieces, temperature_probs
from kvlib.ui import plots
from test_widgets import texts_by_row


def test_the_whole_feed_is_the_real_loop(tiny, hf_tiny):
    run = feed_loop(tiny, "ROMEO.\n", 6, "whole")
    assert run.ids == kvlib.generate(tiny, "ROMEO.\n", 6, use_cache=False, stop_at_eos=False).ids
    assert run.ids == hf_greedy(hf_tiny[0], hf_tiny[1].encode("ROMEO.\n"), 6, stop_at_eos=False)  # transformers' loop
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


def test_smollm2_forgets_the_line_without_the_prompt(smollm2):
    runs = {feed: feed_loop(smollm2, "The king is dead, long live the", 6, feed) for feed in FEEDS}  # notebook 1's
    assert runs["whole"].tokens[0] == " king"
    assert set(runs["prompt only"].tokens) == {" king"}
    assert runs["answer only"].ids[0] == runs["whole"].ids[0] and runs["answer only"].ids != runs["whole"].ids


@pytest.mark.parametrize("feed, steps", [("everything", 3), ("whole", 0)])
def test_feed_loop_rejects_bad_input(tiny, feed, steps):
    with pytest.raises(kvlib.KVLibError, match="feed must be|max_new_tokens"):
        feed_loop(tiny, "ROMEO.", steps, feed)


def test_the_stream_holds_a_cut_character_back_and_joins_to_the_text(tiny):
    ids = tiny.encode(" long live the king 👑")  # notebook 1's: tiny spells the crown's 4 bytes as 4 tokens
    alone = [tiny.decode([i]) for i in ids]
    pieces = stream_pieces(tiny, ids)
    assert alone[-4:] == ["\ufffd"] * 4 and pieces[-4:] == ["", "", "", "👑"]
    assert "".join(pieces) == tiny.decode(ids) and len(pieces) == len(ids)


def test_generate_hands_on_token_the_pieces_stream_pieces_gives(tiny):
    pieces = []
    gen = kvlib.generate(tiny, "The king is dead, long live the", 12, on_token=lambda token, piece: pieces.append(piece))
    assert pieces == stream_pieces(tiny, gen.ids) and "".join(pieces) == gen.text


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


def test_feed_variants_draw_what_each_loop_fed_and_picked():
    runs = [SimpleNamespace(feed="whole", fed_tokens=[["RO", "MEO"], ["RO", "MEO", "."]], from_prompt=[2, 2],
                            tokens=[".", "\n"]),
            SimpleNamespace(feed="prompt only", fed_tokens=[["RO", "MEO"], ["RO", "MEO"]], from_prompt=[2, 2],
                            tokens=[".", "."]),
            SimpleNamespace(feed="answer only", fed_tokens=[["RO", "MEO"], ["."]], from_prompt=[2, 0], tokens=[".", "!"])]
    fig = plots.feed_variants(runs, steps=4)  # only 2 steps were run: 2 drawn
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["feed: whole", "feed: prompt only", "feed: answer only"]
    n, b = "normal", "bold"  # what a step fed, then (bold) what it picked; a newline shown as \n
    assert [texts_by_row(ax) for ax in fig.axes] == [
        {0: [("RO", n), ("MEO", n), (".", b)], -1: [("RO", n), ("MEO", n), (".", n), ("\\n", b)]},
        {0: [("RO", n), ("MEO", n), (".", b)], -1: [("RO", n), ("MEO", n), (".", b)]},
        {0: [("RO", n), ("MEO", n), (".", b)], -1: [(".", n), ("!", b)]}]
    assert [[t.get_text() for t in ax.get_yticklabels()] for ax in fig.axes] == [
        ["step 1: 2 in", "step 2: 3 in"], ["step 1: 2 in", "step 2: 2 in"], ["step 1: 2 in", "step 2: 1 in"]]
    colour = lambda ax, k: ax.patches[k].get_facecolor()  # boxes in drawing order, row by row
    whole, _, answer = fig.axes
    assert colour(answer, 3) == colour(whole, 5) != colour(whole, 0)  # the answer's "." fed back: not the prompt's colour
    with pytest.raises(ValueError, match="at least one run"):
        plots.feed_variants([])


def test_temperature_bars_draw_each_temperatures_probabilities():
    ax = plots.temperature_bars(["a", "b"], (0.5, 1), [[0.9, 0.1], [0.6, 0.3]]).axes[0]
    assert [[bar.get_height() for bar in bars] for bars in ax.containers] == [[0.9, 0.1], [0.6, 0.3]]
    assert [bars.get_label() for bars in ax.containers] == ["T = 0.5", "T = 1"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["'a'", "'b'"]
    assert sorted(t.get_text() for t in ax.texts) == ["0.10", "0.30", "0.60", "0.90"]  # each bar's value
    left, right = ax.containers  # in each token's group, the lower temperature's bar first
    assert all(p.get_x() < q.get_x() for p, q in zip(left, right))
    assert "2 temperatures" in ax.get_title() and ax.get_ylabel() == "probability"
    with pytest.raises(ValueError, match="one row per temperature"):
        plots.temperature_bars(["a", "b"], (0.5, 1), [[0.9, 0.1]])


def test_token_ratios_draw_a_bar_per_tokenizer_and_text():
    ax = plots.token_ratios(["English", "Hindi"], ["GPT-2", "o200k"], [[1.0, 4.8], [1.0, 1.4]]).axes[0]
    assert [[bar.get_height() for bar in bars] for bars in ax.containers] == [[1.0, 4.8], [1.0, 1.4]]
    assert [bars.get_label() for bars in ax.containers] == ["GPT-2", "o200k"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["English", "Hindi"]
    assert list(ax.get_lines()[0].get_ydata()) == [1, 1] and ax.get_ylabel() == "tokens, × English"
    with pytest.raises(ValueError, match="one row per tokenizer"):
        plots.token_ratios(["English"], ["GPT-2", "GPT-4"], [[1.0]])


def test_costs_are_counted_in_a_baseline_that_has_tokens(tiny):
    with pytest.raises(kvlib.KVLibError, match="has no tokens under"):
        tokenization.costs(tokenization.available(tiny), {"English": "", "French": "Bonjour"})


@pytest.mark.slow  # two new Python processes
def test_a_new_process_loads_the_tokenizer_anew_and_gets_the_same_ids(tiny):
    texts = ["The king is dead, long live the", "The king is dead, long live th", tokenization.SAME_SENTENCE["Chinese"]]
    assert tokenization.encode_in_new_process(tiny, texts) == [tiny.encode(t) for t in texts]
    with pytest.raises(kvlib.KVLibError, match="unknown model 'no-such-model'"):
        tokenization.encode_in_new_process(SimpleNamespace(name="no-such-model"), texts)
