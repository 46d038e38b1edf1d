"""kvlib.server.endpoint against a fake OpenAI-compatible server on 127.0.0.1, over real HTTP: a good stream is read
whole, and every way a server can fail (an HTTP error, an error event, a stream cut short or garbled, no model,
nobody listening) is a KVLibError that says what to do, never a half-read answer. No model, no llama.cpp: fast.

The fake server's behaviour is the first part of the path: the endpoint at http://127.0.0.1:PORT/good/v1 streams
as vLLM and llama-server do, /fail/v1 answers 500, /cut/v1 closes mid-stream, and so on (BEHAVIOURS)."""

import http.server
import json
import socket
import struct
import threading
from types import SimpleNamespace

import pytest

from kvlib.errors import KVLibError
from kvlib.server import endpoint
from kvlib.server.endpoint import Endpoint, connect

KEY = "sk-right"  # the key the /locked server wants
USAGE = {"prompt_tokens": 1024, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1008}}  # vLLM's
TIMINGS = {"cache_n": 1020, "prompt_n": 4, "prompt_ms": 2.5, "predicted_n": 3}  # llama-server's, on its last event


def text_event(piece, finish=None):  # a /completions event
    return {"choices": [{"index": 0, "text": piece, "finish_reason": finish}]}


def chat_event(delta, finish=None):  # a /chat/completions event
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def completion_stream():  # as vLLM streams it: text, then the usage alone, pings and blank lines between
    return [text_event("Hel"), ": ping", text_event("lo, "), text_event("world", "length"),
            {"choices": [], "usage": USAGE}, "[DONE]"]


def chat_stream():  # as llama-server streams it: a role first (no text), content, timings on the last event
    return [chat_event({"role": "assistant"}), chat_event({"content": "Hi"}), chat_event({"content": " there"}),
            {**chat_event({}, "stop"), "usage": {"prompt_tokens": 1024, "completion_tokens": 2}, "timings": TIMINGS},
            "[DONE]"]


def sse(event):  # one server-sent event as a server writes it: a `data:` line and a blank line (a ping as it is)
    if isinstance(event, str) and event.startswith(":"):
        return f"{event}\n\n".encode()
    return f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()


class FakeOpenAI(http.server.BaseHTTPRequestHandler):
    """/BEHAVIOUR/v1/models and /BEHAVIOUR/v1/(chat/)completions; every request is kept in server.seen."""

    def do_GET(self):
        self.answer(None)

    def do_POST(self):
        self.answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    def answer(self, body):
        self.server.seen.append((self.path, self.headers.get("Authorization"), body))
        behaviour, _, rest = self.path[1:].partition("/")
        chat = rest == "v1/chat/completions"
        if rest == "v1/models":
            if behaviour == "html":  # a proxy's sign-in page where the API should be
                return self.send(200, b"<html>Sign in to the proxy</html>")
            return self.json(200, {"object": "list", "data": [] if behaviour == "empty" else [{"id": "fake-model"}]})
        if rest not in ("v1/completions", "v1/chat/completions"):  # /good/completions: the base URL lacks /v1
            return self.json(404, {"error": {"message": f"File Not Found: {self.path}"}})
        if behaviour == "locked" and self.headers.get("Authorization") != f"Bearer {KEY}":
            return self.json(401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}})
        if behaviour == "fail":
            return self.json(500, {"error": {"message": "CUDA error: out of memory", "type": "server_error"}})
        first = chat_event({"content": "Hel"}) if chat else text_event("Hel")
        if behaviour == "broken":  # chunked, then the connection closes inside a chunk (http.client: IncompleteRead)
            return self.chunked(sse(first), b"400\r\n" + sse(first))  # a chunk of 0x400 bytes begun, never ended
        if behaviour == "reset":  # one event, then a reset (RST) instead of a close
            self.send(200, sse(first))
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return self.connection.close()
        events = {"good": chat_stream() if chat else completion_stream(),
                  "locked": completion_stream(),
                  "error-event": [first, {"error": {"message": "out of memory while decoding", "code": 500}}, "[DONE]"],
                  "cut": [first, text_event("lo")],  # then the connection closes: no finish_reason, no [DONE]
                  "garbled": [first, '{"choices": [{"text": "lo', "[DONE]"]}[behaviour]
        self.send(200, b"".join(map(sse, events)), "text/event-stream")

    def json(self, code, answer):
        self.send(code, json.dumps(answer).encode(), "application/json")

    def send(self, code, data, kind="text/html"):  # HTTP/1.0: the answer ends when the connection closes
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(data)

    def chunked(self, whole, raw):  # HTTP/1.1 chunked encoding: `whole` as one chunk, then `raw` bytes as they are
        self.protocol_version, self.close_connection = "HTTP/1.1", True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n%s" % (len(whole), whole, raw))

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI) as running:
        running.seen = []
        threading.Thread(target=running.serve_forever, daemon=True).start()
        yield running
        running.shutdown()


def at(server, base):  # the fake server's URL for a base such as "good/v1"
    return f"http://127.0.0.1:{server.server_address[1]}/{base}"


@pytest.fixture
def ticks(monkeypatch):
    """endpoint's clock made a counter that goes up by 1 at each reading, so ttft and seconds say at which
    reading they were taken (sending: 0) rather than how fast this machine is."""
    readings = iter(range(100))
    monkeypatch.setattr(endpoint, "time", SimpleNamespace(perf_counter=lambda: next(readings)))


def test_a_streamed_completion_reads_every_piece_and_the_usage(server, ticks):
    reply = Endpoint(at(server, "good/v1"), timeout=5).complete([1, 2, 3], max_tokens=3)
    assert reply.text == "Hello, world"
    assert (reply.ttft, reply.seconds) == (1, 2)  # the clock read when sending, at the first piece, at the end
    assert (reply.usage, reply.cached_tokens, reply.prompt_tokens, reply.timings) == (USAGE, 1008, 1024, {})
    (models_path, _, _), (path, key, body) = server.seen[-2:]  # no model given: the first the server lists
    assert (models_path, path, key) == ("/good/v1/models", "/good/v1/completions", None)
    assert body == {"model": "fake-model", "prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0.0, "stream": True,
                    "stream_options": {"include_usage": True}}


def test_a_streamed_chat_reads_llama_server_timings(server, ticks):
    messages = [{"role": "user", "content": "Hello"}]
    reply = Endpoint(at(server, "good/v1"), model="named", timeout=5).chat(messages, max_tokens=2)
    assert reply.text == "Hi there"
    assert (reply.ttft, reply.seconds) == (1, 2)  # the role-only event that came first is not the first token
    assert (reply.timings, reply.cached_tokens, reply.prompt_tokens) == (TIMINGS, 1020, 1024)  # cache_n: no details
    path, _, body = server.seen[-1]
    assert (path, body["model"], body["messages"]) == ("/good/v1/chat/completions", "named", messages)


def test_a_key_the_server_takes_is_sent_as_a_bearer_token(server):
    reply = Endpoint(at(server, "locked/v1"), key=KEY, model="m", timeout=5).complete("Hello")
    assert (reply.text, server.seen[-1][1]) == ("Hello, world", f"Bearer {KEY}")


@pytest.mark.parametrize("base, error", [
    ("fail/v1", r"answered 500: .*CUDA error: out of memory.* \(the server failed: see its log"),
    ("good", r"answered 404: .*\(does the URL end in /v1\?\)"),
    ("locked/v1", r"refused the request \(401\): set KVLIB_ENDPOINT_KEY to a valid key"),
    ("error-event/v1", r"stopped with an error: .*out of memory while decoding"),
    ("cut/v1", r"closed its stream before `data: \[DONE\]`: the answer is incomplete"),
    ("broken/v1", r"broke off mid-answer \(IncompleteRead"),
    ("reset/v1", r"broke off mid-answer \(ConnectionResetError"),
    ("garbled/v1", r"""sent ' {"choices": \[{"text": "lo', which is not JSON: is .* an OpenAI-compatible API"""),
], ids=["500", "404", "401", "error-event", "cut", "broken", "reset", "garbled"])
@pytest.mark.parametrize("kind", ["complete", "chat"])
def test_a_failing_server_is_a_clear_error_never_a_half_read_answer(server, base, error, kind):
    ep = Endpoint(at(server, base), model="m", timeout=5)
    with pytest.raises(KVLibError, match=error):
        ep.complete("Hello") if kind == "complete" else ep.chat([{"role": "user", "content": "Hello"}])


@pytest.mark.parametrize("base, error", [
    ("empty/v1", "/models lists no model: set KVLIB_ENDPOINT_MODEL to the model's name"),
    ("html/v1", "sent '<html>Sign in to the proxy</html>', which is not JSON"),
], ids=["empty", "html"])
def test_a_server_that_names_no_model_says_to_name_one(server, base, error):
    with pytest.raises(KVLibError, match=error):
        Endpoint(at(server, base), timeout=5).complete("Hello")


def test_nothing_listening_says_to_start_the_server():
    with socket.socket() as closed:  # a port that was just free: nothing listens there once it is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(KVLibError, match=f"nothing answers at http://127.0.0.1:{port}/v1 .*: start the server"):
        Endpoint(f"http://127.0.0.1:{port}/v1", model="m", timeout=5).complete("Hello")


def test_a_stopped_engine_says_to_start_it():
    stopped = SimpleNamespace(running=False, url="http://127.0.0.1:8080")  # what connect reads of an Engine
    with pytest.raises(KVLibError, match=r"the engine is not running: start it first \(engine.start\(\)"):
        connect(stopped)
    assert connect(SimpleNamespace(running=True, url="http://127.0.0.1:8080")).url == "http://127.0.0.1:8080/v1"
