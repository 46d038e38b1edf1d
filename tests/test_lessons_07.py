"""Notebook 7's kvlib parts: decode steps timed by context, the attention share of a step, the catalogue
tables, the KV calculator app, and the plots."""

import json
import statistics

import pytest
import torch
from matplotlib.figure import Figure
from transformers import GPT2Config

from kvlib import KVLibError, i18n
from kvlib.lessons import exercises, longcontext, memory, speed
from kvlib.model import models
from kvlib.ui import plots, widgets


def test_step_seconds_by_context(tiny):
    lengths, seconds = longcontext.step_seconds_by_context(tiny, [300, 8, 100], repeats=2)
    assert lengths == [8, 100, 300] and len(seconds) == 3  # sorted; how long each took is the machine's


def test_step_seconds_stays_in_the_context(tiny):
    with pytest.raises(KVLibError, match="between 1 and 511"):
        longcontext.step_seconds_by_context(tiny, [16, tiny.config.n_ctx])
    with pytest.raises(KVLibError):
        longcontext.step_seconds_by_context(tiny, [])


def test_the_timed_cache_is_what_the_step_would_see(tiny, monkeypatch):
    seen = []
    forward = type(tiny).forward

    def spy(self, ids, cache=None, **kw):
        if cache is not None and len(ids) == 1:
            seen.append(len(cache))
        return forward(self, ids, cache=cache, **kw)

    monkeypatch.setattr(type(tiny), "forward", spy)
    longcontext.step_seconds_by_context(tiny, [5, 20], repeats=3)
    assert seen == [5, 20] * 4  # a warm-up round, then 3 repeats: each saw exactly that many cached tokens


def test_shapes_are_the_live_models():
    gpt2 = GPT2Config()
    c = longcontext.SHAPES["GPT-2 small"]
    assert (c.n_layer, c.n_head, c.n_embd, c.n_ctx, c.vocab_size, c.n_inner) == \
        (gpt2.n_layer, gpt2.n_head, gpt2.n_embd, gpt2.n_positions, gpt2.vocab_size, 4 * gpt2.n_embd)
    where = models.local_dir("smollm2")
    if where is None:
        pytest.skip("SmolLM2 is not on this machine")
    hf = json.loads((where / "config.json").read_text())
    c = longcontext.SHAPES["SmolLM2-135M"]
    assert (c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_embd, c.n_inner, c.vocab_size, c.n_ctx) == \
        (hf["num_hidden_layers"], hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"],
         hf["hidden_size"], hf["intermediate_size"], hf["vocab_size"], hf["max_position_embeddings"])


def test_attention_share_grows_and_overtakes_where_it_says():
    for shape in longcontext.SHAPES.values():
        shares = longcontext.attention_share(shape, [1, 100, 10_000, 1_000_000])
        assert shares == sorted(shares) and shares[0] < 0.05 and shares[-1] > 0.9
        n = longcontext.attention_overtakes(shape)
        assert longcontext.attention_share(shape, [n - 1])[0] <= 0.5 < longcontext.attention_share(shape, [n])[0]
    c = longcontext.SHAPES["GPT-2 small"]  # by hand: weights 12 x 12 x 768^2 + logits 768 x 50257; attention 2 x 12 x 768 per token
    by_hand = (12 * 12 * 768 ** 2 + 768 * 50257) / (2 * 12 * 768)
    assert abs(longcontext.attention_overtakes(c) - by_hand) < 2


def test_kv_table_and_mistakes_table():
    table = longcontext.kv_table(["Llama-3.1-8B", "Mistral-7B-v0.1"], contexts=(8192, 131072))
    assert "Llama-3.1-8B" in table and "17.2 GB " in table and "16.1 GB" in table  # 128K tokens; bf16 weights
    assert "14.5 GB" in next(line for line in table.splitlines() if line.startswith("Mistral"))  # 7.24B, not 7B: 14.0
    mistral = next(line for line in table.splitlines() if line.startswith("Mistral"))
    assert mistral.count("0.5 GB") == 2 and "0.5 GB*" in mistral  # its windowed cache stops growing; 128K is past 32K
    assert table.splitlines()[-1].startswith("* past the model's trained context")
    text = longcontext.mistakes_table("Llama-3.1-8B", 131072)
    assert "4.00x" in text and "17.2 GB" in text and "*" not in text  # within its context: nothing to mark
    assert "right answer 17.2 GB*" in longcontext.mistakes_table("Llama-3-8B", 131072)  # 16 times Llama-3-8B's
    assert "none of the classic mistakes" in longcontext.mistakes_table("GPT-2 small", 1024)
    gpt2 = memory.CATALOGUE["GPT-2 small"]
    assert longcontext.mark(gpt2, 1024) == "" and longcontext.mark(gpt2, 1025) == longcontext.PAST  # its trained 1,024


def test_calculator_shows_the_catalogue_bytes():
    calc = widgets.KVCalculator()
    assert (calc.model.value, calc.context.value) == ("Llama-3.1-8B", 131072) and "trained context" not in calc.info.value
    for name, dtype, context, batch, by_hand in (
            ("Llama-3-8B", "bf16 / fp16 (2 bytes)", 131072, 1, 2 * 32 * 8 * 128 * 2 * 131072),
            # 21 layers windowed at 4,096 tokens, 21 global; 8 K/V heads of 256 in fp32
            ("Gemma-2-9B", "fp32 (4 bytes)", 1048576, 8, 8 * 21 * (2 * 8 * 256 * 4) * (4096 + 1048576)),
            ("DeepSeek-V2", "fp8 / int8 (1 byte)", 2048, 64, 64 * 60 * (512 + 64) * 1 * 2048)):  # the latent, 1 byte
        calc.model.value, calc.dtype.value, calc.context.value, calc.batch.value = name, dtype, context, batch
        assert calc.shown_bytes == by_hand
        assert f"{calc.shown_bytes:,} bytes" in calc.info.value and "⚠" not in calc.info.value
    calc.model.value = "Gemma-2-9B"
    assert "21 local layers capped at their 4,096-token window" in calc.info.value
    calc.model.value, calc.context.value = "Llama-3-8B", 131072
    assert "past Llama-3-8B's trained context of 8,192" in calc.info.value


def test_calculator_shows_errors_in_place_and_recovers(monkeypatch):
    calc = widgets.KVCalculator()
    monkeypatch.setattr(memory, "crossover_context", lambda *a: (_ for _ in ()).throw(KVLibError("broken")))
    calc.batch.value = 2
    assert "⚠" in calc.info.value and "broken" in calc.info.value and calc.shown_bytes is None
    monkeypatch.undo()
    calc.batch.value = 3
    assert "⚠" not in calc.info.value and calc.shown_bytes == 3 * 17_179_869_184  # Llama-3.1-8B, 131,072 tokens x 3
    for setting, words in (({"batch": 128}, "batch 1 to 64, not 128"), ({"context": 100_000}, "not 100000")):
        with pytest.raises(KVLibError, match=words):  # the sliders would clamp it, or fail in traitlets' words
            widgets.KVCalculator(**setting)


def test_plots():
    assert isinstance(plots.step_seconds_by_context([16, 128, 511], [1.0, 1.1, 1.3], "t"), Figure)
    assert isinstance(plots.attention_share([16, 1024], {"a": [0.1, 0.6]}, "t"), Figure)
    past = plots.attention_share([16, 1024, 4096], {"a": [0.1, 0.6, 0.9]}, "t", trained={"a": 1024}).axes[0]
    solid, dashed = ([list(line.get_xdata()) for line in past.lines if line.get_linestyle() == style] for style in ("-", "--"))
    assert solid == [[16, 1024]] and [16, 1024, 4096][1:] in dashed  # drawn dashed past the trained context
    assert any("a: trained context (dashed past it)" in text.get_text() for text in past.texts)
    assert isinstance(plots.savings_vs_loss(["x", "y"], [0.5, 0.75], [0.0, 0.2], "t"), Figure)
    assert isinstance(plots.loss_by_position({"a": [1.0] * 40, "b": [2.0] * 40}, "t"), Figure)
    with pytest.raises(ValueError, match="one per length"):
        plots.attention_share([16, 1024], {"a": [0.1]}, "t")
    with pytest.raises(ValueError, match="one of each"):
        plots.savings_vs_loss(["x"], [0.5, 0.75], [0.0], "t")
    with pytest.raises(ValueError, match="longer text"):
        plots.loss_by_position({"a": [1.0] * 4}, "t")


def test_mla_cut_is_smaller_than_the_famous_figure():
    cut = exercises.REGISTRY["07.mla_cut"].answer(None)
    assert 80 < cut < 84 and cut < 100 * memory.FACTS["deepseek_v2_kv_reduction"][0] - 5


def test_cache_read_times_each_length_past_the_context_in_every_layer(tiny, monkeypatch):
    """What is timed, pinned without timing it: per round (an untimed one, then `repeats`), each length in
    turn, shortest first, one query per head against that many cached keys, once per layer."""
    read = []
    real = longcontext.fused_attention
    monkeypatch.setattr(longcontext, "fused_attention",
                        lambda q, k, v, mask, gqa: read.append(k.shape[1]) or real(q, k, v, mask, gqa))
    lengths, seconds = longcontext.cache_read_seconds(tiny, [65536, 1024], repeats=3)
    assert lengths == [1024, 65536] and len(seconds) == 2
    assert lengths[-1] > tiny.config.n_ctx
    assert read == ([1024] * tiny.config.n_layer + [65536] * tiny.config.n_layer) * 4


def test_cache_read_times_the_cache_in_the_models_shape(small_llama, monkeypatch):
    """A grouped-head model is timed reading its K/V heads (2 here), not one per query head (4)."""
    read = []
    real = longcontext.fused_attention
    monkeypatch.setattr(longcontext, "fused_attention",
                        lambda q, k, v, mask, gqa: read.append((q.shape, k.shape, v.shape)) or real(q, k, v, mask, gqa))
    longcontext.cache_read_seconds(small_llama, [8], repeats=1)
    c = small_llama.config
    assert c.n_kv_head < c.n_head
    assert set(read) == {((c.n_head, 1, c.head_dim), (c.n_kv_head, 8, c.head_dim), (c.n_kv_head, 8, c.head_dim))}


def test_the_lesson_tables_and_timings_refuse_what_they_cannot_measure(tiny):
    for table in (lambda: longcontext.kv_table(["Llama-3-8B", "GPT-9"]), lambda: longcontext.mistakes_table("GPT-9", 8192)):
        with pytest.raises(KVLibError, match="'GPT-9' is not in the catalogue: pick one of GPT-2 small"):
            table()
    with pytest.raises(KVLibError, match="at least 1, not 0"):  # the fastest of no rounds: an infinite time
        longcontext.step_seconds_by_context(tiny, [8], repeats=0)
    with pytest.raises(KVLibError, match="lengths of 1 or more"):
        longcontext.cache_read_seconds(tiny, [-4])


def reported(capsys, none, cold, warm):
    """speed.report_prompt_caching's lines for these runs (seconds) of each prefill, medians taken as it does."""
    from types import SimpleNamespace
    runs = {"none": none, "cold": cold, "warm": warm}
    speed.report_prompt_caching({"seconds": {k: statistics.median(v) for k, v in runs.items()}, "runs": runs,
                                 "receipt": SimpleNamespace(input_tokens=512, cached_tokens=496, written_tokens=0),
                                 "prompt_len": 512, "model": "tiny"})
    return capsys.readouterr().out.splitlines()[-2:]


def test_the_prompt_caching_report_reads_the_numbers_as_they_came(capsys):
    warm, cost = reported(capsys, none=[1.0, 1.1, 1.2], cold=[1.3, 1.4, 1.5], warm=[0.2, 0.25, 0.3])
    assert warm == "  warm vs cold: warm was 5.6x faster" and cost == "  cost of a 0 % hit rate: +27.3% over no prompt cache"
    # the other way round: warm slower than cold, cold faster than no prompt cache; no "faster" below 1x, no negative cost
    warm, cost = reported(capsys, none=[1.0, 1.2, 1.4], cold=[0.9, 1.0, 1.3], warm=[1.9, 2.0, 2.2])
    assert warm == "  warm vs cold: warm was 2.0x slower"
    assert cost == "  cost of a 0 % hit rate: none measured, cold took 16.7% less than no prompt cache " \
                   "(within noise: their runs overlapped)"
    warm, cost = reported(capsys, none=[1.0, 1.1, 1.3], cold=[1.05, 1.15, 1.2], warm=[0.9, 1.1, 1.25])
    assert warm == "  warm vs cold: warm was 1.0x faster (within noise: their runs overlapped)"
    assert cost == "  cost of a 0 % hit rate: +4.5% over no prompt cache (within noise: their runs overlapped)"
    i18n.set_language("zh")
    try:
        warm, cost = reported(capsys, none=[1.0, 1.2, 1.4], cold=[0.9, 1.0, 1.3], warm=[1.9, 2.0, 2.2])
    finally:
        i18n.set_language("en")
    assert "更慢" in warm and "2.0 倍" in warm and "没有测出来" in cost and "-" not in cost


def test_prompt_caching_keeps_every_run_for_the_report(tiny, capsys):
    r = speed.prompt_caching(tiny, 64, repeats=2)
    assert {k: len(v) for k, v in r["runs"].items()} == {"none": 2, "cold": 2, "warm": 2}
    assert r["seconds"]["warm"] == statistics.median(r["runs"]["warm"]) and r["best"]["cold"] == min(r["runs"]["cold"])
    speed.report_prompt_caching(r)
    assert "warm vs cold: warm was" in capsys.readouterr().out


def test_prompt_caching_warms_up_takes_turns_and_times_on_one_thread(tiny, monkeypatch):
    """A round untimed, then each round none, cold, warm in turn, every forward pass on one CPU thread. Counted
    from the forward passes' calls (tokens fed, threads), not from a clock."""
    from kvlib.server import batching
    calls, bare, paged = [], type(tiny).forward, batching.forward_rows
    monkeypatch.setattr(type(tiny), "forward", lambda self, ids, *a, **k: calls.append(
        ("none", len(ids), torch.get_num_threads())) or bare(self, ids, *a, **k))
    monkeypatch.setattr(batching, "forward_rows", lambda model, cache, rows: calls.append(
        ("cache", len(rows[0][1]), torch.get_num_threads())) or paged(model, cache, rows))
    r = speed.prompt_caching(tiny, 64, repeats=2)
    assert calls[0][:2] == ("cache", 49)  # the shared part (48) and a token, filed before anything is timed
    rounds = calls[1:]
    assert [c[:2] for c in rounds] == [("none", 64), ("cache", 64), ("cache", 16)] * 3  # 1 untimed round + 2 timed
    assert {threads for *_, threads in rounds} == {1}
    assert {k: len(v) for k, v in r["runs"].items()} == {"none": 2, "cold": 2, "warm": 2}


def test_the_prompt_caching_report_leaves_out_what_was_not_timed(tiny, capsys):
    speed.report_prompt_caching(speed.prompt_caching(tiny, 64, repeats=1, kinds=("cold", "warm")))
    out = capsys.readouterr().out
    assert "warm vs cold: warm was" in out and "hit rate" not in out and "no prompt cache" not in out
