"""The catalogue of real architectures: each entry's figures those its source gives (typed here once, not
read back from the catalogue), its bytes by the formula, the formula equal to real tensors wherever kvlib
runs the model, and the classic mistakes measured."""

import ast
from pathlib import Path

import pytest

from kvlib import KVLibError
from kvlib.lessons import longcontext, memory
from kvlib.lessons.exercises import n07, n08

BF16 = 2  # bytes a number: the catalogue sizes caches in bf16

# Each entry's figures as its source gives them (the sources memory.CATALOGUE names): layers, query heads,
# K/V heads cached, head size, hidden size, context (tokens), parameters (the real count, not the name's: COUNTED
# below works out those a config gives the shapes of; DeepSeek's are their reports' totals).
SOURCES = {
    "GPT-2 small": (12, 12, 12, 64, 768, 1024, 124_439_808), "GPT-2 medium": (24, 16, 16, 64, 1024, 1024, 354_823_168),
    "GPT-2 large": (36, 20, 20, 64, 1280, 1024, 774_030_080), "GPT-2 XL": (48, 25, 25, 64, 1600, 1024, 1_557_611_200),
    "Llama-2-7B": (32, 32, 32, 128, 4096, 4096, 6_738_415_616),  # of Llama 2, only 70B groups its K/V heads
    "Llama-2-70B": (80, 64, 8, 128, 8192, 4096, 68_976_648_192),
    "Llama-3-8B": (32, 32, 8, 128, 4096, 8192, 8_030_261_248), "Llama-3-70B": (80, 64, 8, 128, 8192, 8192, 70_553_706_496),
    "Llama-3.1-8B": (32, 32, 8, 128, 4096, 131072, 8_030_261_248),  # sku_list.py: dim 4096 / 32 heads = 128; CONTEXT_LENGTH
    "Llama-3.1-405B": (126, 128, 8, 128, 16384, 131072, 405_853_388_800),
    "Mistral-7B-v0.1": (32, 32, 8, 128, 4096, 32768, 7_241_732_096),
    "Falcon-7B": (32, 71, 1, 64, 4544, 2048, 6_921_720_704),  # multi_query: its 71 query heads share one K/V head
    "DeepSeek-67B": (95, 64, 8, 128, 8192, 4096, 67_425_001_472),
    "DeepSeek-V2": (60, 128, 128, 128, 5120, 131072, 236e9), "DeepSeek-V3": (61, 128, 128, 128, 7168, 131072, 671e9),
    "Gemma-2-9B": (42, 16, 8, 256, 3584, 8192, 9_241_705_984),  # head_dim 256, not 3584 / 16
    "Gemma-2-27B": (46, 32, 16, 128, 4608, 8192, 27_227_128_320),
    "Gemma-3-12B": (48, 16, 8, 256, 3840, 131072, 11_766_034_176),
    "Gemma-3-27B": (62, 32, 16, 128, 5376, 131072, 27_009_346_304),
    "SmolLM2-135M": (30, 9, 3, 64, 576, 8192, 134_515_008),
}
GPT2 = dict(vocab=50257, family="gpt2")  # GPT-2's configs leave n_inner null: the feed-forward is 4 x hidden
EXTRAS = {  # what only some sources give: a sliding window and the layers' pattern of Local and Global ones,
    # MLA's (latent, RoPE key) numbers cached per layer, the vocabulary and feed-forward width of models kvlib runs
    "Mistral-7B-v0.1": dict(window=4096, pattern="L"),
    "Gemma-2-9B": dict(window=4096, pattern="LG"), "Gemma-2-27B": dict(window=4096, pattern="LG"),
    "Gemma-3-12B": dict(window=1024, pattern="LLLLLG"), "Gemma-3-27B": dict(window=1024, pattern="LLLLLG"),
    "DeepSeek-V2": dict(mla=(512, 64)), "DeepSeek-V3": dict(mla=(512, 64)),  # kv_lora_rank, qk_rope_head_dim
    "GPT-2 small": dict(GPT2, ffn=4 * 768), "GPT-2 medium": dict(GPT2, ffn=4 * 1024),
    "GPT-2 large": dict(GPT2, ffn=4 * 1280), "GPT-2 XL": dict(GPT2, ffn=4 * 1600),
    "SmolLM2-135M": dict(vocab=49152, ffn=1536, family="llama"),
}
FACTS = {  # the sources' own numbers, as memory.FACTS cites them
    "vllm_token_states": (0.204, 0.382), "vllm_token_states_paged": 0.963, "vllm_waste": 0.04,
    "deepseek_v2_kv_reduction": 0.933, "deepseek_v2_deployed_kv_bits": 6, "kivi": "keys per channel, values per token",
    "deepseek_v3_weight_bytes": 1, "streamingllm_sinks": 4,
}


def bytes_per_token(name):  # bf16, by hand from the source's figures: K and V x layers x K/V heads x head size x 2
    layers, _, kv_heads, head_dim, *_ = SOURCES[name]
    mla = EXTRAS.get(name, {}).get("mla")  # MLA caches one latent and one RoPE key per layer, shared by all heads
    return (sum(mla) if mla else 2 * kv_heads * head_dim) * layers * BF16


def test_the_catalogue_holds_its_sources_figures():
    assert memory.CATALOGUE.keys() == SOURCES.keys()
    for name, figures in SOURCES.items():
        arch, extra = memory.CATALOGUE[name], EXTRAS.get(name, {})
        assert (arch.n_layer, arch.n_head, arch.n_kv_head, arch.head_dim, arch.hidden, arch.context,
                arch.params) == figures, name
        assert (arch.window, arch.pattern, arch.mla, arch.vocab, arch.ffn, arch.family) == (
            extra.get("window"), extra.get("pattern", "G"), extra.get("mla"), extra.get("vocab"), extra.get("ffn"),
            extra.get("family")), name


def gpt2_count(hidden, layers, vocab=50257, positions=1024):
    """GPT-2: token and position tables, per layer two norms (weight and bias), Q/K/V, the output projection and a
    4 x hidden feed-forward, each with a bias (12 hidden^2 + 13 hidden), a final norm; the output layer is the token table."""
    return vocab * hidden + positions * hidden + layers * (12 * hidden ** 2 + 13 * hidden) + 2 * hidden


def gated_count(vocab, hidden, layers, heads, kv_heads, head_dim, ffn, tied, norms=2, qk_norm=False):
    """Llama, Mistral, DeepSeek-67B, Gemma: Q and the output projection of every query head, K and V of every K/V head,
    a gated feed-forward (three matrices), `norms` norms of `hidden` per layer (Gemma 3 also one of q and of k), a
    final norm; no biases; an output layer apart from the token table unless tied."""
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    layer = attention + 3 * hidden * ffn + norms * hidden + (2 * head_dim if qk_norm else 0)
    return vocab * hidden * (1 if tied else 2) + layers * layer + hidden


def falcon_count(vocab, hidden, layers, heads, head_dim):
    """Falcon: Q of every head and one K and V (multi-query), the output projection, a 4 x hidden feed-forward of two
    matrices, one norm (weight and bias) per layer, a final norm, no biases; the output layer is the token table."""
    layer = hidden * (heads + 2) * head_dim + hidden * hidden + 8 * hidden ** 2 + 2 * hidden
    return vocab * hidden + layers * layer + 2 * hidden


# The parameter counts the released configs' shapes give (vocab_size, intermediate_size, tie_word_embeddings,
# typed here from each config.json), against the catalogue's: Llama-2-7B has 6.74B weights, not 7B.
COUNTED = {
    "GPT-2 small": gpt2_count(768, 12), "GPT-2 medium": gpt2_count(1024, 24), "GPT-2 large": gpt2_count(1280, 36),
    "GPT-2 XL": gpt2_count(1600, 48),
    "Llama-2-7B": gated_count(32000, 4096, 32, 32, 32, 128, 11008, tied=False),
    "Llama-2-70B": gated_count(32000, 8192, 80, 64, 8, 128, 28672, tied=False),
    "Llama-3-8B": gated_count(128256, 4096, 32, 32, 8, 128, 14336, tied=False),
    "Llama-3-70B": gated_count(128256, 8192, 80, 64, 8, 128, 28672, tied=False),
    "Llama-3.1-8B": gated_count(128256, 4096, 32, 32, 8, 128, 14336, tied=False),
    "Llama-3.1-405B": gated_count(128256, 16384, 126, 128, 8, 128, 53248, tied=False),
    "Mistral-7B-v0.1": gated_count(32000, 4096, 32, 32, 8, 128, 14336, tied=False),
    "Falcon-7B": falcon_count(65024, 4544, 32, 71, 64),
    "DeepSeek-67B": gated_count(102400, 8192, 95, 64, 8, 128, 22016, tied=False),
    "Gemma-2-9B": gated_count(256000, 3584, 42, 16, 8, 256, 14336, tied=True, norms=4),
    "Gemma-2-27B": gated_count(256000, 4608, 46, 32, 16, 128, 36864, tied=True, norms=4),
    "Gemma-3-12B": gated_count(262208, 3840, 48, 16, 8, 256, 15360, tied=True, norms=4, qk_norm=True),
    "Gemma-3-27B": gated_count(262208, 5376, 62, 32, 16, 128, 21504, tied=True, norms=4, qk_norm=True),
    "SmolLM2-135M": gated_count(49152, 576, 30, 9, 3, 64, 1536, tied=True),
}


def test_parameters_are_counted_not_the_size_in_the_name():
    assert {name: figures[-1] for name, figures in SOURCES.items() if name in COUNTED} == COUNTED
    assert set(SOURCES) - set(COUNTED) == {"DeepSeek-V2", "DeepSeek-V3"}  # mixtures of experts: their reports' totals
    for arch in memory.CATALOGUE.values():
        assert len(arch.params_source) > 40, arch.name
        assert ("config.json" in arch.params_source) == (arch.name in COUNTED), arch.name
    llama2 = memory.CATALOGUE["Llama-2-7B"]  # 6.74B parameters in bf16: 13.5 GB of weights, not the name's 14.0
    assert round(memory.all_weight_bytes(llama2) / 1e9, 1) == 13.5


def test_facts_hold_their_sources_numbers():
    assert {key: number for key, (number, _) in memory.FACTS.items()} == FACTS
    assert all(len(source) > 20 for _, source in memory.FACTS.values())


def test_every_entry_names_its_source_and_date():
    for arch in memory.CATALOGUE.values():
        assert len(arch.source) > 20 and arch.date[:2] in ("19", "20"), arch.name


@pytest.mark.parametrize("name", [name for name in SOURCES if "window" not in EXTRAS.get(name, {})])
def test_bytes_per_token_by_hand(name):
    assert memory.kv_bytes(memory.CATALOGUE[name], 1) == bytes_per_token(name)
    assert memory.kv_bytes(memory.CATALOGUE[name], 1000, batch=3) == 3000 * bytes_per_token(name)
    for context, batch in ((-5, 1), (1.5, 1), (10, 0), (10, -2)):
        with pytest.raises(KVLibError, match="a (context|batch) .* must be a whole number"):
            memory.kv_bytes(memory.CATALOGUE[name], context, batch)


def test_sliding_windows_bound_only_their_layers():
    layers, _, kv_heads, head_dim, *_ = SOURCES["Gemma-2-9B"]
    per_layer_token, window = 2 * kv_heads * head_dim * BF16, EXTRAS["Gemma-2-9B"]["window"]
    # local layers (the window) alternate with global ones (all 8,192 tokens): 21 of each
    assert memory.kv_bytes(memory.CATALOGUE["Gemma-2-9B"], 8192) == layers // 2 * (window + 8192) * per_layer_token
    mistral = memory.CATALOGUE["Mistral-7B-v0.1"]  # every layer windowed: the cache stops growing
    window = bytes_per_token("Mistral-7B-v0.1") * EXTRAS["Mistral-7B-v0.1"]["window"]  # 536,870,912 bytes
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
    if name:  # the live model has its source's shape and parameters, and its cache the bytes worked out from it
        c = model.config
        assert (c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_embd) == SOURCES[name][:5]
        assert arch.params == memory.CATALOGUE[name].params == SOURCES[name][-1]
        assert memory.kv_bytes(memory.CATALOGUE[name], 37) == memory.kv_bytes(arch, 37) == 37 * bytes_per_token(name)


def test_crossover_is_where_the_cache_outweighs_the_weights():
    arch = memory.CATALOGUE["Llama-3-8B"]
    # 8,030,261,248 x 2 bytes of bf16 weights / 131,072 bytes per token = 122,532.9 tokens; 8 sequences: 15,316.6 each
    assert bytes_per_token("Llama-3-8B") == 131_072
    assert memory.crossover_context(arch) == 122_533 and memory.crossover_context(arch, batch=8) == 15_317


def test_classic_mistakes():
    wrong = memory.mistakes(memory.CATALOGUE["Llama-3-8B"], 8192)
    (bad, right), = wrong.values()
    assert right == bytes_per_token("Llama-3-8B") * 8192 and bad == 4 * right  # GQA ignored: 32 K/V heads, not 8
    gemma = memory.mistakes(memory.CATALOGUE["Gemma-2-9B"], 8192)
    bad, right = gemma["head_dim taken as hidden / heads"]
    assert bad / right == pytest.approx((3584 // 16) / 256)
    bad, right = gemma["sliding window applied to every layer"]
    assert bad < right  # an underestimate: the global layers keep everything


def test_what_deepseeks_93_percent_compares():
    """The report's 93.3 % compares its deployed cache (about 6 bits a number) with DeepSeek 67B's in bf16;
    bf16 against bf16 the cut is 82.2 %: 1 - 576 x 60 / (2 x 8 x 128 x 95), and 1 - 576 x 60 x 6/8 / (that x 2)."""
    v2, base = memory.CATALOGUE["DeepSeek-V2"], memory.CATALOGUE["DeepSeek-67B"]
    bf16 = 1 - memory.kv_bytes(v2, 1) / memory.kv_bytes(base, 1)
    deployed = FACTS["deepseek_v2_deployed_kv_bits"] / 8  # bytes a number
    six_bits = 1 - memory.kv_bytes(v2, 1, bytes_per_number=deployed) / memory.kv_bytes(base, 1)
    assert round(bf16, 3) == 0.822 and round(six_bits, 3) == FACTS["deepseek_v2_kv_reduction"]


def test_deepseek_v3_weights_are_counted_as_shipped_in_fp8():
    v3 = memory.CATALOGUE["DeepSeek-V3"]
    assert memory.all_weight_bytes(v3, FACTS["deepseek_v3_weight_bytes"]) == 671e9  # 671 GB, half the bf16 count
    source = memory.FACTS["deepseek_v3_weight_bytes"][1]
    assert "FP8" in source and "2024-12-26" in source and "FP8" in v3.note


def test_only_entries_that_give_a_vocabulary_and_feed_forward_become_configs():
    c = memory.as_config(memory.CATALOGUE["GPT-2 XL"])
    layers, heads, _, _, hidden, *_ = SOURCES["GPT-2 XL"]
    xl = EXTRAS["GPT-2 XL"]
    assert (c.n_layer, c.n_head, c.n_embd, c.n_inner, c.vocab_size, c.arch) == (
        layers, heads, hidden, xl["ffn"], xl["vocab"], xl["family"])
    with pytest.raises(KVLibError, match="pick one of GPT-2 small"):
        memory.as_config(memory.CATALOGUE["Llama-3-8B"])


def test_llama_3_1_is_llama_3s_shape_trained_on_a_long_context():
    """The notebooks' 131,072-token examples use Llama-3.1-8B: Llama-3-8B's bytes per token, 16 times its context."""
    old, new = memory.CATALOGUE["Llama-3-8B"], memory.CATALOGUE["Llama-3.1-8B"]
    assert bytes_per_token("Llama-3.1-8B") == bytes_per_token("Llama-3-8B") == 131_072
    assert (new.context, old.context) == (131072, 8192) and new.params == old.params


# ---- no table row uses a context longer than its model's, unless marked ----

TABLE_CONTEXTS = (1024, 4096, 8192, 32768, 131072, 1048576)


@pytest.mark.parametrize("name", list(SOURCES))
def test_tables_mark_every_context_past_the_models_own(name):
    context = SOURCES[name][5]  # the trained context, from the source
    table = longcontext.kv_table([name], contexts=TABLE_CONTEXTS).splitlines()
    row = next(line for line in table if line.startswith(name))
    cells = row[len(name):].split()  # "0.3 GB*" -> "0.3", "GB*": a figure's unit carries its mark
    marks = [unit.endswith(longcontext.PAST) for unit in cells[1:2 * len(TABLE_CONTEXTS):2]]
    assert marks == [n > context for n in TABLE_CONTEXTS], row
    assert (table[-1].startswith(longcontext.PAST + " past the model's trained context")) == (max(TABLE_CONTEXTS) > context)
    for n in (context, 2 * context):
        text = longcontext.mistakes_table(name, n)
        if "none of the classic mistakes" not in text:
            first = text.splitlines()[0]
            assert first.endswith(longcontext.PAST) == (n > context) == ("trained context" in text), text


NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
SIZERS = {"kv_bytes", "kv_bytes_per_layer", "mistakes", "crossover_context"}  # memory's functions of (model, context)


def sized(source):
    """(model, context) for each call of memory's sizers in a cell whose model and context are spelled out:
    memory.CATALOGUE["X"] or a name bound to it, and a number or a loop's name over numbers."""
    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.startswith("%%")))
    catalogued = lambda node: (node.slice.value if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                               and ast.unparse(node.value).endswith("CATALOGUE") else None)
    models, numbers = {}, {}
    for node in ast.walk(tree):  # what the cell binds: models by name, loops over numbers
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(target, node.value)])
                models.update({t.id: catalogued(v) for t, v in pairs if isinstance(t, ast.Name) and catalogued(v)})
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List)):
            numbers[node.target.id] = [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SIZERS \
                and len(node.args) >= 2:
            arch, context = node.args[:2]
            name = catalogued(arch) or (models.get(arch.id) if isinstance(arch, ast.Name) else None)
            contexts = ([context.value] if isinstance(context, ast.Constant)
                        else numbers.get(context.id, []) if isinstance(context, ast.Name) else [])
            found += [(name, n) for n in contexts if name and isinstance(n, int)]
    return found


def test_the_reading_finds_a_model_sized_past_its_context():
    old = 'llama = memory.CATALOGUE["Llama-3-8B"]\nfor n in (8192, 131072):\n    cache = memory.kv_bytes(llama, n)'
    assert sized(old) == [("Llama-3-8B", 8192), ("Llama-3-8B", 131072)]
    assert sized('a, b = memory.CATALOGUE["Falcon-7B"], 3\nmemory.mistakes(a, 4096)') == [("Falcon-7B", 4096)]


@pytest.mark.parametrize("notebook", ["07_long_context_memory", "08_serving"])
def test_the_lessons_size_no_model_past_its_context(notebook):
    """Every catalogued model a notebook sizes by hand, it sizes within its trained context; the tables mark the
    rest (above), the calculator warns (test_lessons_07), and the exercises stay within it."""
    import json

    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    pairs = [pair for c in cells if c["cell_type"] == "code" for pair in sized("".join(c["source"]))]
    assert pairs, "the reading found nothing to check"
    assert [(name, n) for name, n in pairs if memory.past_context(memory.CATALOGUE[name], n)] == []
    assert not memory.past_context(n07.LLAMA, n07.CONTEXT) and not memory.past_context(n08.LLAMA, 131072)
