"""One client for any OpenAI-compatible endpoint, streamed as a provider streams, timed as a user feels it.

    ep = connect(engine)                   # kvlib's local llama-server (kvlib.server.llamacpp.Engine)
    ep = connect()                         # or the endpoint named by the environment, below
    reply = ep.complete(ids, max_tokens=1) # a prompt as text or token ids; ep.chat(messages) for chat
    reply.ttft, reply.cached_tokens, reply.timings

Any server that speaks OpenAI's API works: llama.cpp's server, vLLM (`vllm serve MODEL
--enable-prefix-caching`, plus `--enable-prompt-tokens-details` for the cached count), SGLang
(`--enable-cache-report` for the cached count), or a provider. Say which with three environment
variables: KVLIB_ENDPOINT_URL (the base URL, ending in /v1 as OpenAI's clients expect, e.g.
http://localhost:8000/v1), KVLIB_ENDPOINT_KEY (its API key, if it needs one) and KVLIB_ENDPOINT_MODEL
(the model's name; without it, the first the server lists).

Each request is streamed (server-sent events) and timed with the local clock: `ttft` from sending
to the first piece of text, `seconds` to the end of the stream. A stream ends with `data: [DONE]`, as
OpenAI's API and every server above send it: one that closes or breaks off before is an error, never
a shorter answer. The reused prompt tokens come from `usage.prompt_tokens_details.cached_tokens`
where the endpoint reports it (OpenAI, vLLM, SGLang), and from llama-server's own `timings`
(`cache_n` reused, `prompt_n` computed, `prompt_ms`...) where it sends them. Only the standard
library is used: nothing to install.
"""

import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from ..errors import KVLibError
from .llamacpp import opener

URL, KEY, MODEL = "KVLIB_ENDPOINT_URL", "KVLIB_ENDPOINT_KEY", "KVLIB_ENDPOINT_MODEL"
HOW = (f"set {URL} to an OpenAI-compatible base URL (vLLM: `vllm serve MODEL --enable-prefix-caching "
       f"--enable-prompt-tokens-details` then http://localhost:8000/v1; SGLang: `--enable-cache-report` then "
       f"http://localhost:30000/v1; or a provider's), {KEY} to its key and {MODEL} to the model's name; or use "
       f"kvlib's local engine: connect(kvlib.server.llamacpp.Engine().start())")


@dataclass
class Reply:
    """One streamed request: its text, its times, and what the endpoint said about its prompt."""
    text: str
    ttft: float       # seconds from sending the request to the first piece of text
    seconds: float    # seconds to the end of the stream
    usage: dict = field(default_factory=dict)    # as the endpoint reported it ({} if it did not)
    timings: dict = field(default_factory=dict)  # llama-server's: cache_n, prompt_n, prompt_ms... ({} elsewhere)

    @property
    def prompt_tokens(self):  # the whole prompt, reused or computed (None if the endpoint does not say)
        if "prompt_tokens" in self.usage:
            return self.usage["prompt_tokens"]
        if "prompt_n" in self.timings:
            return self.timings["prompt_n"] + self.timings.get("cache_n", 0)
        return None

    @property
    def cached_tokens(self):
        """Prompt tokens the endpoint reused rather than computed; None when it reports none."""
        details = self.usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            return details["cached_tokens"]
        return self.timings.get("cache_n")


class Endpoint:
    """An OpenAI-compatible server at `url` (its base, e.g. http://localhost:8000/v1)."""

    def __init__(self, url, key=None, model=None, timeout=60.0):
        if not str(url).startswith(("http://", "https://")):
            raise KVLibError(f"{url!r} is not an http(s) URL: {HOW}")
        self.url, self.key, self._model, self.timeout = str(url).rstrip("/"), key, model, timeout
        self.opener = opener(self.url)

    def __repr__(self):
        return f"Endpoint({self.url}, model {self._model or '(the first it lists)'}{', with a key' if self.key else ''})"

    @property
    def model(self):  # the name requests carry: as given, else the first the server lists
        if self._model is None:
            listed = self.request("GET", "/models").get("data") or []
            if not listed:
                raise KVLibError(f"{self.url}/models lists no model: set {MODEL} to the model's name")
            self._model = listed[0]["id"]
        return self._model

    def complete(self, prompt, max_tokens=16, temperature=0.0, **options):
        """A plain completion (/completions) of a prompt given as text or as token ids, streamed."""
        return self.stream("/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                                            **options})

    def chat(self, messages, max_tokens=16, temperature=0.0, **options):
        """A chat completion (/chat/completions) of [{"role": ..., "content": ...}], streamed."""
        return self.stream("/chat/completions", {"messages": messages, "max_tokens": max_tokens,
                                                 "temperature": temperature, **options})

    def stream(self, path, body):
        """POST `body` with stream=True; read the events as they arrive and time them."""
        body = {"model": self.model, **body, "stream": True, "stream_options": {"include_usage": True}}
        pieces, usage, timings, ttft = [], {}, {}, None
        t0 = time.perf_counter()
        with self._open("POST", path, body) as response:
            # one server-sent event per `data:` line; blank lines and `:` pings between
            for line in self._read(path, response):
                line = line.decode(errors="replace").strip()
                if line == "data: [DONE]":
                    break
                if not line.startswith("data:"):
                    continue
                event = self._json(path, line[5:])
                if "error" in event:
                    raise KVLibError(f"{self.url}{path} stopped with an error: {event['error']}")
                for choice in event.get("choices") or []:
                    piece = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                    if piece and ttft is None:
                        ttft = time.perf_counter() - t0
                    pieces.append(piece)
                usage = event.get("usage") or usage
                timings = event.get("timings") or timings
            else:  # the connection closed with no [DONE]: what came is part of an answer, not an answer
                raise KVLibError(f"{self.url}{path} closed its stream before `data: [DONE]`: the answer is incomplete; "
                                 "see the server's log, then send the request again")
        seconds = time.perf_counter() - t0
        return Reply("".join(pieces), seconds if ttft is None else ttft, seconds, usage, timings)

    def request(self, method, path, body=None):
        """One JSON request, its JSON answer."""
        with self._open(method, path, body) as response:
            return self._json(path, b"".join(self._read(path, response)).decode(errors="replace"))

    def _read(self, path, response):  # the response's lines, a break in the connection as a KVLibError
        try:
            yield from response
        except (http.client.HTTPException, OSError) as e:  # a reset, a chunk cut short, a timeout mid-answer
            raise KVLibError(f"the connection to {self.url}{path} broke off mid-answer ({e!r}): see the server's "
                             "log, then send the request again") from e

    def _json(self, path, text):
        try:
            return json.loads(text)
        except ValueError as e:
            raise KVLibError(f"{self.url}{path} sent {text[:200]!r}, which is not JSON: is {self.url} an "
                             "OpenAI-compatible API (its base URL, ending in /v1)?") from e

    def _open(self, method, path, body):
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            return self.opener.open(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            if e.code in (401, 403):
                raise KVLibError(f"{self.url} refused the request ({e.code}): set {KEY} to a valid key") from e
            if e.code == 404:
                detail += " (does the URL end in /v1?)"
            elif e.code >= 500:  # the server is there but failed: its log, not this request, says why
                detail += " (the server failed: see its log, then send the request again)"
            raise KVLibError(f"{method} {self.url}{path} answered {e.code}: {detail}") from e
        except (urllib.error.URLError, socket.timeout, ConnectionError) as e:
            why = getattr(e, "reason", e)
            raise KVLibError(f"nothing answers at {self.url} ({why}): start the server, or {HOW}") from e


def connect(engine=None, timeout=60.0):
    """The local engine's endpoint when one is given; else the endpoint the environment names; else
    a KVLibError that says how to name one."""
    if engine is not None:
        if not engine.running:
            raise KVLibError("the engine is not running: start it first (engine.start(), or `with Engine() as engine:`)")
        return Endpoint(f"{engine.url}/v1", timeout=timeout)
    if not os.environ.get(URL):
        raise KVLibError(f"no endpoint given: {HOW}")
    return Endpoint(os.environ[URL], os.environ.get(KEY) or None, os.environ.get(MODEL) or None, timeout)
