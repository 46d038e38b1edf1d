"""kvlib's own forward pass as an ONNX graph, for the course's pages that run the model (issue 34).

The graph is `gpt2.gpt2` or `llama.llama`, the very functions the notebooks call, traced by torch.onnx
(opset 17, the TorchScript exporter) with a cache object of its own (`GraphCache`) whose `admit` and
per-layer `append` answer from the graph's inputs, and a `Trace` for the weights. Batch 1:

    input   ids        int64    [T]                new tokens
    input   positions  int64    [T]                their places in the text: P, P+1, ...
    input   past_k     float32  [L, nkv, P, hs]    every layer's cached K (P may be 0: a prefill)
    input   past_v     float32  [L, nkv, P, hs]    and V
    output  logits     float32  [T, V]
    output  k, v       float32  [L, nkv, T, hs]    the new rows, what a cache appends
    output  weights    float32  [L, nh, T, P + T]  every layer's and head's attention weights
T and P are dynamic. New row i sees key j iff j <= P + i (the plain causal mask, kv_cache.causal_mask).
A cached step feeds back the k and v of every call before it, concatenated along P.

Weights (`STORAGE`): `tiny`'s are stored as fp16 and cast to fp32 inside the graph, so every
multiply is fp32 and the page's cache holds 4 bytes per number: 8.7 MB (fp32 would
be 17.4). SmolLM2's are quantized by onnxruntime's own tool, weight-only (`quantize`: each matrix's
weights in 8 bits, its token table fp16; the arithmetic fp32): about 177 MB, served over http only.

The bound. Against kvlib run on the SAME weights (fp16-rounded: `stored`), the graph differs only
in the order of its fp32 arithmetic (onnxruntime's kernels against torch's). Both are fp32
evaluations of one function, so each lies within its own rounding error of the exact value; that
error is measured, not guessed: kvlib run in float64 on those weights is the exact value to fp32's
eyes, and `tolerance` is BOUND_FACTOR × kvlib's own worst fp32 error on that output (with a floor of
a few units in the last place of its largest entry, where kvlib happens to be exact). So the graph
must be no less exact than BOUND_FACTOR times kvlib itself. Storing fp16 instead of fp32 moves the
logits further than that; `check` reports that drift against the fp32 model (max |Δ logit| and
whether the greedy token agrees), and it is no part of the bound.

Measured on tiny (`python -m kvlib.tools.webmodel --model tiny`), the three HELD_OUT texts, a prefill and 4
cached steps each: |graph - kvlib| at most 1.5e-5 (logits, which reach 17), 3.4e-6 (K), 2.2e-6 (V),
2.0e-6 (weights), at most 1.6 times kvlib's own fp32 error, so within the bound of 4 with room; the
greedy token agrees at every call. fp16 storage against kvlib's fp32 weights: max |Δ logit| 8.8e-3,
greedy token equal at 15 of 15 calls.

SmolLM2's 8-bit weights are stated as agreement (AGREES), measured on the 10 PROMPTS: the graph's
greedy next token equals kvlib's fp32 on 10 of 10, its greedy 8-token answer on 7 of 10 (the other three
part after 4 equal tokens, each where kvlib's own top two logits were within 0.09 of each other, at
logits of 18 to 28, and the graph took kvlib's second). The parting is the weights' rounding,
not the graph's: kvlib itself, its matrices rounded in torch to 8 bits per block of 32 as the quantizer
rounds them, gives the same counts, and the fp16 token table alone parts from none.
"""

import argparse
import logging
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantFormat
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

from ..errors import KVLibError
from ..model.kv_cache import causal_mask
from ..model.models import Model, load_model
from ..model.trace import Trace
from ..model.weights_file import flatten, unflatten
from ..server.generate import generate

INPUTS = ("ids", "positions", "past_k", "past_v")
OUTPUTS = ("logits", "k", "v", "weights")
OPSET = 17
STORAGE = {"tiny": "fp16", "smollm2": "int8"}  # how each page model's weights are stored; others fp16
HELD_OUT = ("Will will Will's will be done?", "轩辕养了一只黄色的虎皮鹦鹉", "The parrot 🦜 said hello")
PROMPTS = HELD_OUT + ("The tallest mountain in Japan is", "My grandmother's soup recipe starts with",
                      "def fibonacci(n):", "Seven times eight equals", "Water boils at", "My favourite colour is",
                      "A good name for a grey cat is")  # SmolLM2's agreement
BOUND_FACTOR = 4  # the graph's error may be this many times kvlib's own fp32 error (see the docstring)
ULPS = 4          # the floor: this many units in the last place of the output's largest entry
AGREES = {"next_token": 10, "answer": 7}  # SmolLM2's graph against kvlib on PROMPTS, as measured (docstring)


class GraphLayer:
    """One layer's past K and V [nkv, P, hs] from the graph's inputs; `append` keeps the new rows for the output."""

    def __init__(self, past_k, past_v):
        self.past_k, self.past_v = past_k, past_v

    def append(self, k, v):  # [nkv, T, hs] x 2 -> [nkv, P + T, hs] x 2, as LayerCache.append
        self.k, self.v = k, v
        return torch.cat([self.past_k, k], dim=1), torch.cat([self.past_v, v], dim=1)


class GraphCache:
    """The two things the forward pass asks of a cache (kv_cache.KVCache), answered from the graph's inputs."""

    def __init__(self, positions, past_k, past_v):  # [T], [L, nkv, P, hs] x 2
        self.positions = positions
        self.layers = [GraphLayer(k, v) for k, v in zip(past_k.unbind(0), past_v.unbind(0))]

    def admit(self, t_new, device=None):  # -> positions [T], mask [T, P + T]
        """As KVCache.admit with nothing dropped. t_new (len(ids)) would be a constant to the tracer: the
        positions input says where the new rows sit, and the past's length where the cached ones do."""
        held = torch.cat([torch.arange(self.layers[0].past_k.shape[1]), self.positions])  # [P + T]
        return self.positions, causal_mask(self.positions, held)

    def new_rows(self):  # -> k, v [L, nkv, T, hs]
        return torch.stack([layer.k for layer in self.layers]), torch.stack([layer.v for layer in self.layers])


def tied(model):  # the output head [C, V] is the token table [V, C] transposed (tiny's and SmolLM2's are)
    params = model.params
    return torch.equal(params["lm_head.weight"], params[model.family.token_table].T)


def stored(model, storage="fp16"):
    """The model as the graph computes it: its weights rounded to fp16 and back (fp32 again), so kvlib run on
    this and the graph differ only in the order of their fp32 arithmetic. "fp32": the model itself."""
    if storage == "fp32":
        return model
    if storage != "fp16":
        raise KVLibError(f"{storage} weights are rounded by onnxruntime's quantizer, not by kvlib: compare such a "
                         f"graph with kvlib by `agreement` (greedy tokens) instead")
    named = {k: v.half().float() for k, v in flatten(model.params).items()}
    return Model(model.name, unflatten(named, model.config.n_layer), model.config, model.tokenizer, model.device)


def fp32(t):
    return t if t.dtype == torch.float32 else t.float()


class Graph(torch.nn.Module):
    """The module torch.onnx traces: the family's forward pass over weights held as buffers (in `dtype`, the
    token table in `table_dtype`, each cast to fp32 where it is read: the file stores them so, and the graph
    computes in fp32)."""

    def __init__(self, model, dtype=torch.float16, table_dtype=None):
        super().__init__()
        self.forward_pass, self.config = model.family.forward, model.config
        named = flatten(model.params)
        self.table = model.family.token_table if tied(model) else None
        if self.table:  # one table in the file, read twice (kvlib keeps a contiguous copy for speed)
            del named["lm_head.weight"]
        self.names = list(named)
        for name in self.names:  # buffer names cannot hold dots; the ONNX file keeps these
            stored_as = table_dtype if name == model.family.token_table and table_dtype else dtype
            self.register_buffer(name.replace(".", "_"), named[name].detach().to("cpu", stored_as))

    def params(self):  # -> kvlib's params, fp32
        # a Cast only where the stored dtype needs one: onnxruntime's quantizer finds a weight by its initializer
        named = {name: fp32(getattr(self, name.replace(".", "_"))) for name in self.names}
        if self.table:
            named["lm_head.weight"] = named[self.table].T
        return unflatten(named, self.config.n_layer)

    def forward(self, ids, positions, past_k, past_v):  # [T], [T], [L, nkv, P, hs] x 2
        cache, trace = GraphCache(positions, past_k, past_v), Trace()
        logits = self.forward_pass(ids, self.params(), self.config, cache, trace)  # [T, V]
        weights = torch.stack([layer.weights for layer in trace.layers])  # [L, nh, T, P + T]
        return (logits, *cache.new_rows(), weights)


def shapes(config):  # every input's and output's shape, as the module's docstring lists them; a name is dynamic
    L, nkv, nh, hs = config.n_layer, config.n_kv_head, config.n_head, config.head_dim
    return {"ids": ["T"], "positions": ["T"], "past_k": [L, nkv, "P", hs], "past_v": [L, nkv, "P", hs],
            "logits": ["T", config.vocab_size], "k": [L, nkv, "T", hs], "v": [L, nkv, "T", hs],
            "weights": [L, nh, "T", "S"]}  # S = P + T


def dynamic(config):  # torch.onnx's dynamic_axes: {name: {axis: its name}}
    return {name: {i: d for i, d in enumerate(shape) if isinstance(d, str)} for name, shape in shapes(config).items()}


def write_sizes(path, config):
    """torch.onnx names the outputs' fixed sizes it could not infer ("Concatk_dim_1"): write the numbers, so the
    file itself says what the page gets."""
    graph = onnx.load(str(path))
    sizes = shapes(config)
    for value in graph.graph.output:
        for dim, size in zip(value.type.tensor_type.shape.dim, sizes[value.name]):
            if isinstance(size, int):
                dim.dim_value = size
    onnx.save(graph, str(path))


def example_inputs(config, t=3, p=2):  # a cached call (P > 0), so nothing in the trace takes P for 0
    past = torch.zeros(config.n_layer, config.n_kv_head, p, config.head_dim)
    return torch.arange(t), torch.arange(p, p + t), past, past.clone()


def layer_norm(g, x, shape, w, b, eps, cudnn):  # aten::layer_norm -> LayerNormalization over the last axis
    return g.op("LayerNormalization", x, w, b, axis_i=-1, epsilon_f=eps)


def rms_norm(g, x, shape, w, eps):  # aten::rms_norm -> w * x / sqrt(mean(x²) + eps) (opset 17 has no RMSNorm)
    mean = g.op("ReduceMean", g.op("Mul", x, x), axes_i=[-1], keepdims_i=1)
    inverse = g.op("Reciprocal", g.op("Sqrt", g.op("Add", mean, g.op("Constant", value_t=torch.tensor(eps)))))
    return g.op("Mul", g.op("Mul", x, inverse), w)


def norms():
    """gpt2.layer_norm and llama.rms_norm name the last axis by its size, x.shape[-1], which the tracer records
    as a value computed in the graph, and torch's own symbolics want a constant there. Both always normalize
    over the last axis, so these say so without reading the size."""
    register_custom_op_symbolic("aten::layer_norm", parse_args("v", "v", "v", "v", "f", "none")(layer_norm), OPSET)
    register_custom_op_symbolic("aten::rms_norm", parse_args("v", "v", "v", "f")(rms_norm), OPSET)


def export_graph(model, path, dtype, table_dtype=None):
    """torch.onnx's trace of `Graph` into `path`. No constant folding: it would fold each fp16 weight's cast
    into an fp32 copy, doubling the file."""
    norms()
    graph = Graph(model, dtype, table_dtype).eval()
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer warns of two Python numbers it records as constants, both rightly: len(ids), which
        # GraphCache.admit does not read, and √hs in attention's scale. torch.onnx warns that this exporter is
        # the old one: the new (dynamo=True) needs onnxscript, and this one traces kvlib's code as it runs
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*(legacy TorchScript|will be removed)")
        torch.onnx.export(graph, example_inputs(model.config), str(path), input_names=list(INPUTS),
                          output_names=list(OUTPUTS), dynamic_axes=dynamic(model.config), opset_version=OPSET,
                          dynamo=False, do_constant_folding=False)
    write_sizes(path, model.config)
    return path


def quantize(src, dst):
    """onnxruntime's weight-only quantizer: each MatMul's weight [in, out] to 8 bits, a scale per block of 32 along
    `in` (MatMulNBits, which computes in fp32). Tried on SmolLM2 and ten held-out prompts: onnxruntime's dynamic
    int8 (quantize_dynamic), which rounds every activation to 8 bits too, agreed with kvlib's greedy 8-token
    answer on 0 of 10 (next token 7 of 10, 249 MB); 4 bits per weight on 0 of 10 (6 of 10, 124 MB)."""
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, bits=8, quant_format=QuantFormat.QOperator)
    log = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = log.level
    log.setLevel(logging.WARNING)  # not a line per node
    try:
        quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), algo_config=config)
        quantizer.process()
    finally:
        log.setLevel(level)
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return dst


def export(model, path, storage=None):
    """Write `model`'s graph to `path` (.onnx); storage "fp16" (tiny's), "fp32" or "int8" (SmolLM2's), by default
    STORAGE's. Returns (path, bytes)."""
    storage = storage or STORAGE.get(model.name, "fp16")
    if storage not in ("fp16", "fp32", "int8"):
        raise KVLibError(f"storage is fp16, fp32 or int8, not {storage!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if storage == "int8":  # the token table, which Gather reads (and the tied output head), stays fp16
        with tempfile.TemporaryDirectory() as tmp:
            quantize(export_graph(model, Path(tmp) / "fp32.onnx", torch.float32, torch.float16), path)
    else:
        export_graph(model, path, torch.float16 if storage == "fp16" else torch.float32)
    return path, path.stat().st_size


def describe(model):
    """What the page needs to know to run the graph and label its views."""
    c = model.config
    return {"name": model.name, "arch": c.arch, "n_layer": c.n_layer, "n_head": c.n_head, "n_kv_head": c.n_kv_head,
            "head_dim": c.head_dim, "n_ctx": c.n_ctx, "vocab": c.vocab_size, "eos": model.eos_token_id,
            "bytes_per_number": 4,  # the graph computes in fp32, so the K and V it hands the page are fp32
            "inputs": list(INPUTS), "outputs": list(OUTPUTS), "shapes": shapes(c)}


def session(onnx_path):  # onnxruntime's CPU session on the graph
    if not Path(onnx_path).is_file():
        raise KVLibError(f"no ONNX graph at {onnx_path}: write one with `python -m kvlib.tools.webmodel --model tiny "
                         f"--out DIR` (or webmodel.export)")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: not the optimizer's notes on the graph
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


def run(sess, ids, past):  # one call of the graph: new ids after past K and V [L, nkv, P, hs] x 2 -> {output: numpy}
    p = past[0].shape[2]
    feed = {"ids": np.asarray(ids, np.int64), "positions": np.arange(p, p + len(ids), dtype=np.int64),
            "past_k": past[0], "past_v": past[1]}
    return dict(zip(OUTPUTS, sess.run(list(OUTPUTS), feed)))


def kvlib_step(model, ids, cache):  # one call of kvlib -> {output: tensor} in the graph's shapes
    trace, before = Trace(), len(cache)
    logits = model.forward(ids, cache=cache, trace=trace)
    rows = lambda which: torch.stack([getattr(layer, which)[:, before:] for layer in cache.layers])  # noqa: E731
    return {"logits": logits, "k": rows("keys"), "v": rows("values"),
            "weights": torch.stack([layer.weights for layer in trace.layers])}


def in_float64(model):  # the same weights, computed in float64: the exact value, to fp32's eyes
    named = {k: v.double() for k, v in flatten(model.params).items()}
    return Model(model.name, unflatten(named, model.config.n_layer), model.config, model.tokenizer, model.device)


def empty_past(config):  # [L, nkv, 0, hs] x 2: a prefill's past K and V
    empty = np.zeros((config.n_layer, config.n_kv_head, 0, config.head_dim), np.float32)
    return empty, empty


def grown(past, graph):  # past K and V [L, nkv, P, hs] x 2, a call's outputs -> [L, nkv, P + T, hs] x 2
    """What the page's cache holds after a call: the past with the call's new rows appended."""
    return np.concatenate([past[0], graph["k"]], 2), np.concatenate([past[1], graph["v"]], 2)


@torch.no_grad()
def side_by_side(model, sess, text, steps):
    """The graph, kvlib and kvlib in float64 on `text`: a prefill, then `steps` one-token cached steps, the same
    token fed to all three (kvlib's greedy one), the graph fed back its own k and v of every call before.
    Yields (kvlib's outputs, float64 kvlib's, the graph's) per call, as numpy arrays."""
    exact, past = in_float64(model), empty_past(model.config)
    cache, cache64, new = model.new_cache(), exact.new_cache(), model.encode(text)
    for _ in range(1 + steps):
        ours, ref = kvlib_step(model, new, cache), kvlib_step(exact, new, cache64)
        graph = run(sess, new, past)
        yield {k: t.numpy() for k, t in ours.items()}, {k: t.numpy() for k, t in ref.items()}, graph
        past = grown(past, graph)
        new = [int(ours["logits"][-1].argmax())]


def largest(a, b):  # max |a - b|, in float64
    return float(np.abs(a.astype(np.float64) - b).max())


def tolerance(own, largest_entry):  # kvlib's own fp32 error on an output -> what the graph may differ from it
    return max(BOUND_FACTOR * own, ULPS * float(np.spacing(np.float32(largest_entry))))


def check(model, onnx_path, texts=HELD_OUT, steps=4):
    """The graph against kvlib on `texts`, each a prefill then `steps` cached one-token steps. Per text: per call
    the largest |graph - kvlib| of each output and whether the greedy token agrees; per output the tolerance
    (from kvlib's own fp32 error over the text's calls, see the module's docstring) and whether every call
    is within it. Pass `stored(model)` for the bound; the fp32 model to see what fp16 storage moves."""
    sess = session(onnx_path)
    report = {}
    for text in texts:
        calls, own, big = [], dict.fromkeys(OUTPUTS, 0.0), dict.fromkeys(OUTPUTS, 0.0)
        for ours, ref, graph in side_by_side(model, sess, text, steps):
            calls.append({"tokens": len(ours["logits"]), **{name: largest(graph[name], ours[name]) for name in OUTPUTS},
                          "token_agrees": bool(graph["logits"][-1].argmax() == ours["logits"][-1].argmax())})
            for name in OUTPUTS:
                own[name] = max(own[name], largest(ours[name], ref[name]))
                big[name] = max(big[name], float(np.abs(ref[name]).max()))
        tol = {name: tolerance(own[name], big[name]) for name in OUTPUTS}
        report[text] = {"calls": calls, "kvlib_fp32_error": own, "tolerance": tol,
                        "within": all(call[name] <= tol[name] for call in calls for name in OUTPUTS)}
    return report


def greedy(sess, model, text, n):  # the graph alone: its greedy answer to `text`, n new ids (no stop at eos)
    past, new, answer = empty_past(model.config), model.encode(text), []
    for _ in range(n):
        graph = run(sess, new, past)
        past = grown(past, graph)
        new = [int(graph["logits"][-1].argmax())]
        answer += new
    return answer


def agreement(model, onnx_path, texts, n=8):
    """Per text: do the graph's greedy next token and greedy n-token answer equal kvlib's (on `model`)?"""
    sess = session(onnx_path)
    report = {}
    for text in texts:
        ours = generate(model, text, n, stop_at_eos=False).ids
        theirs = greedy(sess, model, text, n)
        report[text] = {"next_token": ours[0] == theirs[0], "answer": ours == theirs, "kvlib": ours, "graph": theirs}
    return report


def print_check(report):
    for text, r in report.items():
        worst = {name: max(call[name] for call in r["calls"]) for name in OUTPUTS}
        print(f"  {text!r}: prefill of {r['calls'][0]['tokens']} tokens + {len(r['calls']) - 1} cached steps, "
              f"{'within' if r['within'] else 'NOT within'} the bound")
        for name in OUTPUTS:
            print(f"    {name:8s} max |graph - kvlib| {worst[name]:.2e}  bound {r['tolerance'][name]:.2e} "
                  f"(kvlib's own fp32 error {r['kvlib_fp32_error'][name]:.2e})")
        print(f"    greedy token agrees at every call: {all(call['token_agrees'] for call in r['calls'])}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kvlib.tools.webmodel", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny (default) or smollm2")
    parser.add_argument("--out", required=True, help="folder to write <model>.onnx into")
    args = parser.parse_args(argv)
    model = load_model(args.model, device="cpu")
    storage = STORAGE.get(model.name, "fp16")
    path, size = export(model, Path(args.out) / f"{model.name}.onnx", storage)
    print(f"{path}: {size:,} bytes ({size / 2 ** 20:.1f} MiB), weights {storage}")
    if storage == "int8":
        report = agreement(model, path, PROMPTS)
        print(f"greedy next token equal to kvlib's on {sum(r['next_token'] for r in report.values())} of "
              f"{len(report)} held-out prompts; 8-token answers equal on {sum(r['answer'] for r in report.values())}")
        return
    print(f"against kvlib on the same ({storage}-rounded) weights:")
    print_check(check(stored(model, storage), path))
    drift = check(model, path)
    print(f"what {storage} storage moves, against kvlib's fp32 weights: max |Δ logit| "
          f"{max(call['logits'] for r in drift.values() for call in r['calls']):.2e}, greedy token agrees at "
          f"{sum(call['token_agrees'] for r in drift.values() for call in r['calls'])} of "
          f"{sum(len(r['calls']) for r in drift.values())} calls")


if __name__ == "__main__":
    main()
