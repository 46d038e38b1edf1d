import atexit
import os
import platform
import shutil
import subprocess
import tempfile

# Hermetic: the suite gets an empty Hugging Face cache of its own, set before anything imports huggingface_hub
# (which reads these once), so no test depends on what this machine's ~/.cache/huggingface holds, none writes
# there, and the hub (unreachable here) is never asked. Subprocesses inherit it. kvlib's own home
# (~/.cache/kvlib, where SmolLM2 is converted) stays: tests that need it name the smollm2 fixture.
# Torch's OpenMP threads sleep when they wait instead of spinning: the suite runs a Jupyter server, Chromium and
# kernels beside each other on 2 cores, and spinning threads there took a 200-token SmolLM2 prefill from 0.4 s to
# 8-12 s (measured on this machine with one other busy process). Kernels and servers started by tests inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HF_HOME = tempfile.mkdtemp(prefix="kvlib-tests-hf-")
os.environ.update(HF_HOME=HF_HOME, HF_HUB_CACHE=os.path.join(HF_HOME, "hub"), HF_HUB_OFFLINE="1")
atexit.register(shutil.rmtree, HF_HOME, ignore_errors=True)

import pytest  # noqa: E402  (after the environment above)
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

import kvlib  # noqa: E402
from kvlib.model import models  # noqa: E402

torch.set_num_threads(2)

# Property tests draw the same examples on every run, so a red CI names a bug, not an unlucky draw
# (CI once drew a run of special tokens on which float32 drift is larger; it is now an @example).
# `HYPOTHESIS_PROFILE=explore make test` draws fresh ones to hunt for new cases.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiny():
    return kvlib.load_model("tiny", device="cpu")


def eager(path):  # transformers' model, with the attention written out (its reference, and it returns weights)
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()


@pytest.fixture(scope="session")
def hf_tiny():
    """tiny as transformers alone reads it, and its tokenizer: an expectation that shares no code with kvlib."""
    from transformers import AutoTokenizer

    return eager(models.TINY_DIR), AutoTokenizer.from_pretrained(models.TINY_DIR)


@pytest.fixture(scope="session")
def random_gpt2():
    return kvlib.load_model("random-gpt2", device="cpu")


@pytest.fixture(scope="session")
def small_gpt2_dir(tmp_path_factory):
    """A GPT-2-family checkpoint saved with save_pretrained, as a user's disk holds it."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    out = tmp_path_factory.mktemp("small-gpt2")
    tok = AutoTokenizer.from_pretrained(models.TINY_DIR)
    torch.manual_seed(1)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=48, n_layer=3, n_head=3)).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def small_llama_dir(tmp_path_factory):
    """A small random Llama-family checkpoint with grouped KV heads (4 query heads share 2 K/V heads)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("small-llama")
    tok = AutoTokenizer.from_pretrained(models.TINY_DIR)
    torch.manual_seed(2)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         rope_theta=10000.0, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def small_llama(small_llama_dir):
    return kvlib.load_model(str(small_llama_dir), device="cpu")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct, fetched by `make test` (python -m kvlib download smollm2)."""
    return kvlib.load_model("smollm2", device="cpu")


@pytest.fixture(scope="session")
def hf_small_llama(small_llama_dir):
    return eager(small_llama_dir)


@pytest.fixture(scope="module")  # 540 MB: held while one module needs it
def smollm2_hf(smollm2):
    return eager(models.local_dir("smollm2"))


@pytest.fixture(scope="module")
def hf_random_gpt2(random_gpt2):
    hf, _ = models.random_gpt2()  # the weights random-gpt2 is built from (the same seed)
    hf.config._attn_implementation = "eager"
    return hf


def hf_model(request, name):  # transformers' model read from the same weights as the kvlib fixture `name`
    if name == "tiny":
        return request.getfixturevalue("hf_tiny")[0]
    return request.getfixturevalue({"small_llama": "hf_small_llama", "smollm2": "smollm2_hf",
                                    "random_gpt2": "hf_random_gpt2"}[name])


@torch.no_grad()
def hf_greedy(hf, ids, n, stop_at_eos=True):
    """transformers' own greedy decoding of `ids` (a path that shares no code with kvlib's): up to n new ids,
    ending after transformers' end-of-text token as generate does by default; with stop_at_eos=False exactly
    n, that token taken like any other (min_new_tokens would forbid it, and another token win)."""
    no_stop = {} if stop_at_eos else {"eos_token_id": None}
    out = hf.generate(torch.tensor([list(ids)]), max_new_tokens=n, do_sample=False, pad_token_id=0, **no_stop)
    return out[0, len(ids):].tolist()


SLOW_FIXTURES = {"smollm2", "smollm2_hf", "random_gpt2", "hf_random_gpt2"}
# The modules that take longest (the suite's durations: each notebook in the browser, then by nbclient, then the
# parity runs), handed to make test's two workers first: xdist's loadscope gives out a module at a time, by default
# the modules with the most tests first, and the browser's few long tests came near the end, the other worker idle.
LONGEST_FIRST = ("test_browser.py", "test_notebooks.py", "test_live.py", "test_parity.py", "test_hub.py",
                 "test_course.py")


def pytest_addoption(parser):
    parser.addoption("--kvlib-language", default="en", choices=sorted(kvlib.i18n.LANGUAGES),
                     help="the language kvlib speaks in every test: test_batching.py runs its own and "
                          "test_serving.py's tests again under zh, unchanged (codes are compared, never words)")


@pytest.fixture(autouse=True)
def kvlib_language(request):  # each test starts in the language asked for (en unless --kvlib-language says)
    kvlib.set_language(request.config.getoption("--kvlib-language"))


def pytest_collection_modifyitems(items):
    """`make check` leaves out tests marked slow: every test on SmolLM2 or GPT-2 small's shape (a load,
    then work at their size), whether it names the fixture or takes its name as a parameter (and then calls
    `request.getfixturevalue`), and every exercise on SmolLM2, besides those marked by hand (subprocesses,
    notebooks, the browser, long streams). `marked_as_it_runs` checks the marks against what each test did.
    Then the LONGEST_FIRST modules are put first, for make test's two workers."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        named = set(item.fixturenames) | {v for v in params.values() if isinstance(v, str)}
        if SLOW_FIXTURES & named or getattr(params.get("ex"), "uses", ()):
            item.add_marker(pytest.mark.slow)
    first = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest keep their order


platform.platform()  # asks `uname -p` once and keeps it: a test that names the platform starts no process


def big(config):  # SmolLM2 (30 x 576^2) and GPT-2 small (12 x 768^2) are; tiny (4 x 256^2) is not
    return config.n_layer * config.n_embd ** 2 > 10 ** 6


@pytest.fixture(autouse=True)
def marked_as_it_runs(request, monkeypatch):
    """The slow mark tells the truth: a test without it that starts a process or builds a big model, or
    uses one of SLOW_FIXTURES however it got it, fails at teardown and says to mark it (`make check`, which
    leaves slow tests out, stays fast and free of them)."""
    did = []
    start, build = subprocess.Popen.__init__, models.Model.__init__

    def starting(self, args, *a, **kw):
        did.append(f"started a process ({args if isinstance(args, str) else ' '.join(map(str, args))[:80]})")
        start(self, args, *a, **kw)

    def building(self, name, params, config, *a, **kw):
        if big(config):
            did.append(f"built {name}")
        build(self, name, params, config, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", starting)
    monkeypatch.setattr(models.Model, "__init__", building)
    yield
    did += [f"used the {name} fixture" for name in sorted(SLOW_FIXTURES & set(request.fixturenames))]
    if did and request.node.get_closest_marker("slow") is None:
        pytest.fail(f"{request.node.nodeid} {', '.join(did)}: mark it @pytest.mark.slow (make check leaves those out)",
                    pytrace=False)


UNWARNED_S = 15  # a cell past this without a ⏱ before it is named in the table, for a person to judge


def pytest_terminal_summary(terminalreporter):
    """The notebooks' slowest cells as nbclient ran them (test_notebooks.py): measured on every run and
    reported here, never asserted, because a cell's time is the machine's. A slow cell with no ⏱ warning
    before it is named, for whoever edits the notebook to tag and warn of it."""
    rows = [tuple(row) for reports in terminalreporter.stats.values() for r in reports
            if getattr(r, "when", None) == "call"
            for name, value in getattr(r, "user_properties", ()) if name == "cell_times" for row in value]
    if not rows:
        return
    rows.sort(key=lambda row: -row[2])
    write = terminalreporter.write_line
    terminalreporter.section("notebook cells by time (SmolLM2 as the default; measured here, not asserted)")
    for notebook, first_line, seconds, tagged in rows[:12]:
        write(f"{seconds:7.1f} s  {'⏱' if tagged else ' '}  {notebook}  {first_line}")
    write(f"all {len(rows)} cells: {sum(row[2] for row in rows):.0f} s")
    for notebook, first_line, seconds, _ in [row for row in rows if row[2] > UNWARNED_S and not row[3]]:
        write(f"no ⏱ before a cell that took {seconds:.0f} s here: {notebook}  {first_line}")


def toy_by_hand():
    """The toy cached step worked by hand from notebook 4's toy numbers, as a learner with a pencil would:
    each token's 3 numbers times W_K and W_V, the new one's times W_Q; scores over √2, softmax, weights · V."""
    from kvlib.lessons.attention import TOY_E, TOY_NEXT_E, TOY_W

    times = lambda e, W: [sum(e[c] * W[c][j] for c in range(3)) for j in range(2)]  # [3] @ [3, 2]
    rows = [*TOY_E, TOY_NEXT_E]
    q, K, V = times(TOY_NEXT_E, TOY_W["Q"]), [times(e, TOY_W["K"]) for e in rows], [times(e, TOY_W["V"]) for e in rows]
    scores = [(q[0] * k[0] + q[1] * k[1]) / 2 ** 0.5 for k in K]
    e = [2.718281828459045 ** s for s in scores]
    weights = [x / sum(e) for x in e]
    return q, K, V, scores, weights, [sum(w * v[j] for w, v in zip(weights, V)) for j in range(2)]


def cached_loop(model, prompt_ids, n):  # a learner's right answer to 05.cached_loop
    cache, ids = model.new_cache(), []
    logits = model.forward(prompt_ids, cache=cache)
    for _ in range(n):
        ids.append(int(logits[-1].argmax()))
        logits = model.forward([ids[-1]], cache=cache)
    return ids
