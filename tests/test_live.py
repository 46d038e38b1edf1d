"""The site's live pages in Chromium, from file:// with the network cut: the page runs the model itself
(kvlib's forward pass exported to ONNX, run by ONNX Runtime Web) and hands the notebooks' own views what
the Python side hands them. Each number read from a page is checked against kvlib computing the same in
Python on the same text.

First, the cache view's byte line: it takes the bytes per number from the data it is given (kvlib's fp32
cache: 4; an fp16 one: 2), checked against the arrays' own sizes at every step.
"""

import json
import re

import nbformat
import pytest
import torch

import kvlib
from browser import chromium
from kvlib import site, views
from test_site import check_offline, open_offline

PROMPT, NEW = "Mary had a little", 5


def static_page(folder, named):
    """A page of views built in Python, exported as make site exports an executed notebook (no kernel):
    {name: view} -> the page's path. Each view's output cell is named by an id, its state stored as an
    executed notebook stores it."""
    state, cells = {}, [nbformat.v4.new_markdown_cell("# Views\n\nBuilt in the test.")]
    for name, view in named.items():
        s = json.loads(json.dumps(view.get_state(), default=str))
        state[name] = {"model_name": s["_model_name"], "model_module": s["_model_module"],
                       "model_module_version": s["_model_module_version"], "state": s}
        cells.append(nbformat.v4.new_code_cell(f"{name}  # a view", outputs=[nbformat.v4.new_output(
            "display_data", data={site.VIEW: {"model_id": name, "version_major": 2, "version_minor": 0},
                                  "text/plain": view.summary()})]))
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"widgets": {site.STATE: {
        "state": state, "version_major": 2, "version_minor": 0}}})
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "views.ipynb")
    site.export([folder / "views.ipynb"], folder / "site")
    return folder / "site" / "views.html"


def held_bytes(cache):  # the arrays' own sizes: every layer's K and V, as stored
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.mark.slow
def test_the_cache_views_bytes_follow_the_datas_bytes_per_number(browser, tmp_path):
    """fp32 and fp16 caches of the same run: at every step the view's formula, its bytes per number and the
    measured total equal the bytes the cache's own tensors hold (a view that assumed 2 or 4 bytes fails one)."""
    runs, named = {}, {}
    for dtype in ("float32", "float16"):
        model = kvlib.load_model("tiny", dtype=dtype)
        ids, cache, sizes, feed = model.encode(PROMPT), model.new_cache(), [], model.encode(PROMPT)
        for _ in range(NEW):  # greedy, reading the arrays after every step: the view's run, done apart
            token = int(model.forward(feed, cache=cache)[-1].argmax())
            sizes.append(held_bytes(cache))
            feed = [token]
        runs[dtype] = sizes, cache.layers[0].keys.element_size()
        named[dtype.replace("float", "fp")] = views.CacheGrowth.of(model, PROMPT, new_tokens=NEW)
    assert runs["float32"][1] == 4 and runs["float16"][1] == 2
    page, errors = open_offline(browser, static_page(tmp_path, named))
    page.wait_for_selector(".kv-cachegrowth .kv-total")
    mounts = page.locator(".kv-cachegrowth")
    assert mounts.count() == 2
    for i, dtype in enumerate(runs):
        sizes, b = runs[dtype]
        view = mounts.nth(i)
        for s, size in enumerate(sizes):
            if s:
                view.get_by_role("button", name="step forward").click()
            assert view.get_attribute("data-step") == str(s)
            line = view.locator(".kv-note.kv-mono").inner_text()
            formula = int(re.search(r"= ([\d,]+) bytes", line).group(1).replace(",", ""))
            assert f"× {b} bytes =" in line and formula == size, (dtype, s, line, size)
            assert view.locator(".kv-total").inner_text() == f"{size:,} bytes" and line.endswith("✓"), line
    check_offline(page, errors, "views")
