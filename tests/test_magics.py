"""%%needs: a cell that needs a downloaded model runs where it is and says how to get it where not."""

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.slow  # each test starts a kernel

CELLS = ["import kvlib", "%%needs smollm2\nx = 41\nx + 1", "print('after', globals().get('x'))"]


def execute(cells, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    return ["".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in c.outputs)
            for c in nb.cells]


def test_runs_where_the_model_is(smollm2, tmp_path):
    out = execute(CELLS, tmp_path)
    assert out[1] == "42" and out[2] == "after 41\n"


def test_skips_with_the_way_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLIB_HOME", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    out = execute(CELLS, tmp_path)
    assert "skipped" in out[1] and "python -m kvlib download smollm2" in out[1]
    assert out[2] == "after None\n"


def test_a_failing_cell_still_fails(smollm2, tmp_path):
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        execute(["import kvlib", "%%needs smollm2\n1 / 0"], tmp_path)


ENGINE_CELLS = ["import kvlib", "%%needs smollm2 engine\nfrom kvlib.server import llamacpp\ny = llamacpp.Engine().command()[0]\n'ok'",
                "print('after', globals().get('y') is not None)"]


@pytest.mark.engine
def test_runs_where_the_engine_is(smollm2, tmp_path):
    """`make engine` built llama.cpp's server and fetched SmolLM2's GGUF (make test does): the cell runs."""
    from kvlib.ui import magics

    assert magics.missing("engine") is None, magics.missing("engine")
    out = execute(ENGINE_CELLS, tmp_path)
    assert out[1] == "'ok'" and out[2] == "after True\n"


def test_without_the_engine_it_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLIB_HOME", str(tmp_path / "empty"))  # no GGUF there (nor SmolLM2), whatever is installed
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    out = execute(ENGINE_CELLS, tmp_path)
    assert out[1].startswith("(skipped: this cell needs smollm2") and "python -m kvlib download smollm2`" in out[1]
    assert "llama.cpp's server (the engine)" in out[1] and "make engine" in out[1]
    assert out[2] == "after False\n"


def test_an_unknown_need_names_the_known_ones(tmp_path):
    with pytest.raises(CellExecutionError, match="%%needs takes one or more of .*smollm2, engine, not 'engin'"):
        execute(["import kvlib", "%%needs engin\n1"], tmp_path)
