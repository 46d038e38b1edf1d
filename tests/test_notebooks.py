"""Notebooks are committed without outputs (they are executed by nbmake: see Makefile)."""

import json
from pathlib import Path

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS][:3] == ["01", "02", "03"]


def test_notebooks_are_committed_without_outputs():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f"{path.name} carries outputs"


def test_notebooks_open_by_loading_the_model():
    for path in NOTEBOOKS:
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        assert "kvlib.load_model(" in "".join(cells[0]["source"]), path.name
