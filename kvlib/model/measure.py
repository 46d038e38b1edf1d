"""Measuring a model's work, for the lessons, the server's timed runs and the benchmark alike: a clock that
waits for the device, one CPU thread to time on, the count of rounds whose fastest is kept, random prompts
and request lengths (a synthetic stream of requests), and the bytes and bare matmuls a decode step cannot
do without. It sits beside the model (it imports only `models`), so the server may time itself with it.

Every clock read here first waits for the device (`models.synchronize`): a GPU runs
ahead of Python, and a clock read without waiting times the queueing, not the work.
"""

import dataclasses
import random
import statistics
import time
from contextlib import contextmanager

import torch

from ..errors import KVLibError, check_count
from . import models


def timed(fn, device="cpu"):
    """(fn(), seconds it took), the device's queued work finished on both sides of the clock."""
    models.synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    models.synchronize(device)
    return out, time.perf_counter() - t0


@contextmanager
def one_thread():
    """Run on one CPU thread: on a busy machine a matmul split over two threads waits for the slower
    one, and a thread descheduled by other work stalls it for a whole time slice (~100 ms here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Fed:
    """The model, counting the tokens (rows) each of its forward passes is fed: the work it did, counted where it
    is done, not read off a receipt. A prompt cache given this model in place of the model counts its own work."""

    def __init__(self, model):
        self.model, self.rows = model, []  # rows: tokens fed to each forward pass, in order

    @property
    def total(self):  # tokens fed so far, in every pass
        return sum(self.rows)

    @property
    def family(self):  # the model's forward pass and facts, its forward writing down each pass's rows first
        family = self.model.family

        def forward(ids, *args, **kwargs):  # ids [T]
            self.rows.append(len(ids))
            return family.forward(ids, *args, **kwargs)
        return dataclasses.replace(family, forward=forward)

    def __getattr__(self, name):  # everything else is the model's: config, params, encode, check_ids...
        return getattr(self.model, name)


def check_repeats(repeats):  # the fastest of 0 repeats would be an infinite time
    check_count(repeats, "repeats (timed rounds, the fastest kept)")


def random_ids(model, n, seed):
    """n token ids drawn from the model's vocabulary, the same for the same seed."""
    return torch.randint(0, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def request_lengths(n, seed=0, max_len=2048, scale=1.0):
    """n random requests as (prompt tokens, output tokens), each together at most max_len.

    Prompts and answers are log-normal (many short, a few long), as in chat traffic. scale multiplies
    both (0.1: a median prompt of ~15 tokens and answer of ~9, for a small model's short context)."""
    check_count(n, "n (requests)")
    check_count(max_len, "max_len (tokens of a request)", least=2)
    if scale <= 0:
        raise KVLibError(f"scale multiplies the lengths: give one above 0, not {scale!r}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = min(max_len - 1, max(1, round(scale * rng.lognormvariate(5.0, 1.0))))    # median ~150 tokens
        answer = min(max_len - prompt, max(1, round(scale * rng.lognormvariate(4.5, 1.0))))  # median ~90 tokens
        out.append((prompt, answer))
    return out


def read_bandwidth(device="cpu", nbytes=512 * 2**20, repeats=5):
    """Bytes per second `device` reads from its own memory (a big tensor there summed, best of a few)."""
    x = torch.ones(nbytes // 4, device=device)
    x.sum()  # warm up: a GPU's first kernel pays for its launch
    return nbytes / min(timed(x.sum, device)[1] for _ in range(repeats))


def step_weight_bytes(model):
    """Bytes of a loaded model's weights that one decode step reads: every matrix once, but only a
    row of each lookup table. (memory.all_weight_bytes counts all of a catalogued architecture's.)"""
    lookups = {model.family.token_table, model.family.position_table}  # the output head is its own [C, V] copy
    tensors = [t for k, t in model.params.items() if k != "h" and k not in lookups]
    tensors += [t for layer in model.params["h"] for t in layer.values()]
    return sum(t.numel() * t.element_size() for t in tensors)


def matmul_pass(model, batch=1):
    """One decode step's weight matmuls alone, as a function to time: every matrix of every layer and the
    output head times `batch` tokens' vectors (one per sequence of a batch), back to back, nothing else."""
    weights = [w for layer in model.params["h"] for w in layer.values() if w.ndim == 2]  # [in, out] each
    weights.append(model.params["lm_head.weight"])  # [C, V]
    xs = {n: torch.randn(batch, n, device=model.device, dtype=model.dtype) for n in {w.shape[0] for w in weights}}

    def step():
        for w in weights:
            torch.mm(xs[w.shape[0]], w)  # [batch, in] @ [in, out]
    return step


def bare_matmul_seconds(model, repeats=5, batch=1):
    """Median seconds of one decode step's weight matmuls alone (matmul_pass). What torch itself reaches."""
    step = matmul_pass(model, batch)
    step()  # warm up
    return statistics.median(timed(step, model.device)[1] for _ in range(repeats))
