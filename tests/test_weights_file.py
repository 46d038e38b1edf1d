"""One copy of the weights per machine: kvlib's layout written once, mapped by every process that loads the model."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from kvlib.model import models, weights_file

LINUX = sys.platform.startswith("linux")  # /proc/self/smaps: how a process sees which of its pages it shares


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLIB_HOME", str(tmp_path / "kv"))
    return tmp_path / "kv"


def mapping(path):
    """This process's mappings of the file at path (Linux): {field: kB}, summed over them; {} if none."""
    found, inside = {}, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5:  # a mapping's first line: address range, permissions, ..., its path
            inside = line.rstrip().endswith(str(path))
        elif inside and line.split(":")[0] in ("Rss", "Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty"):
            found[line.split(":")[0]] = found.get(line.split(":")[0], 0) + int(head[1])
    return found


def test_the_weights_come_from_one_file_equal_to_transformers_load(home, small_gpt2_dir):
    path_dir = str(small_gpt2_dir)
    direct = models.from_hf(path_dir, *models.hf_model(path_dir), torch.device("cpu"))
    first = models.load_model(path_dir, device="cpu")  # writes the file, then maps it
    files = list((home / "weights").iterdir())
    assert len(files) == 1 and files[0].suffix == ".safetensors"  # no temporary file left beside it
    second = models.load_model(path_dir, device="cpu")
    flat = weights_file.flatten
    for model in (first, second):
        assert model.config == direct.config
        assert flat(model.params).keys() == flat(direct.params).keys()
        assert all(torch.equal(flat(model.params)[k], v) for k, v in flat(direct.params).items())
    ids = direct.encode("The king is dead, long live the")
    assert torch.equal(second.forward(ids), direct.forward(ids))
    if LINUX:  # the tensors' memory is the file's pages, not a copy
        assert mapping(files[0]).get("Rss", 0) > 0


def test_a_changed_checkpoint_gets_a_new_file_and_old_ones_go(home, small_gpt2_dir, tmp_path):
    """A checkpoint saved again gets a new file and its old one goes; so does the file of a checkpoint since
    deleted, at the next file written. Another dtype of the same checkpoint is another file, kept."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in small_gpt2_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    models.load_model(str(copy), device="cpu")
    models.load_model(str(copy), device="cpu", dtype="bfloat16")
    before = {p.name for p in (home / "weights").iterdir()}
    weights = next(copy.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # saved again
    model = models.load_model(str(copy), device="cpu")
    after = {p.name for p in (home / "weights").iterdir()}
    assert len(before) == len(after) == 2 and len(after - before) == 1  # float32's file replaced, bfloat16's kept
    assert torch.equal(model.forward([1, 2]), models.from_hf("c", *models.hf_model(str(copy)), torch.device("cpu")).forward([1, 2]))
    shutil.rmtree(copy)
    models.load_model(str(small_gpt2_dir), device="cpu")
    assert len(list((home / "weights").iterdir())) == 1  # the deleted checkpoint's two files gone, this one's new


def test_where_kvlibs_home_cannot_be_written_the_model_still_loads(tmp_path, monkeypatch, small_gpt2_dir):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("KVLIB_HOME", str(blocked))  # mkdir under a file fails: the process keeps its own copy
    model = models.load_model(str(small_gpt2_dir), device="cpu")
    direct = models.from_hf("d", *models.hf_model(str(small_gpt2_dir)), torch.device("cpu"))
    assert torch.equal(model.forward([1, 2, 3]), direct.forward([1, 2, 3]))


@pytest.mark.slow  # two processes
@pytest.mark.skipif(not LINUX, reason="reads /proc/self/smaps, Linux's account of shared pages")
def test_two_processes_share_the_weights_pages(home, small_gpt2_dir):
    """Two processes load the model and read every weight; while both are alive, the second's pages of the
    weights file are shared, none of them private to it."""
    code = f"""
import sys, torch
sys.path.insert(0, {os.path.dirname(__file__)!r})
from kvlib.model import models
from test_weights_file import mapping
m = models.load_model({str(small_gpt2_dir)!r}, device="cpu")
m.forward([1, 2, 3])
path = next(models.kvlib_home().joinpath("weights").iterdir())
print(sum(float(t.sum()) for t in models.weights_file.flatten(m.params).values()), flush=True)  # every page read
sys.stdin.readline()  # stay alive, the file mapped, until told to look
print(mapping(path), flush=True)
sys.stdin.readline()  # and until the other has looked too
"""
    env = {**os.environ, "KVLIB_HOME": str(home)}
    procs = []
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=env))
        assert procs[-1].stdout.readline()  # loaded and read all its weights before the next starts
    seen = []
    for p in procs:  # each looks while both are alive
        p.stdin.write("\n")
        p.stdin.flush()
        seen.append(eval(p.stdout.readline()))
    for p in procs:
        p.communicate("\n", timeout=120)
    size_kb = next((home / "weights").iterdir()).stat().st_size / 1024
    for pages in seen:  # each process's view of the file's pages, while the other has them mapped too
        shared = pages.get("Shared_Clean", 0) + pages.get("Shared_Dirty", 0)
        assert shared >= 0.5 * size_kb and pages.get("Private_Dirty", 0) == 0, pages

