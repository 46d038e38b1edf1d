"""One copy of a model's weights for every process on the machine: kvlib's own layout, in a file mapped read-only.

transformers loads a checkpoint into memory each process owns, and kvlib then rearranges it (Llama's
projections transposed, the output head a [C, V] copy of the token table): about 0.8 GB of private memory
per kernel with SmolLM2, so a workshop server holds one learner per 0.8 GB before anyone runs a cell. Here
the rearranged weights are written once, as a safetensors file under kvlib's home, and every later load
maps that file: its pages sit once in the operating system's page cache and each process reads the same
pages (copy-on-write: a process that changed a weight in place would get its own copy of that page, never
another's). A room's memory then grows by each learner's activations and cache, not by the weights.

The file's name carries a digest of the checkpoint's files (names, sizes, modification times), the dtype
and LAYOUT, so a changed checkpoint or layout gets a new file; it is written to a temporary name and
renamed, so thirty kernels starting at once never read half a file.
"""

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

LAYOUT = 1  # bump when kvlib's params change shape or names: old files are then never read


def path_for(home, name, checkpoint, dtype):
    """home: kvlib's folder; name: the model's name; checkpoint: its directory -> where its weights file lives."""
    files = sorted(p for p in Path(checkpoint).iterdir() if p.is_file())
    facts = [LAYOUT, str(dtype), str(Path(checkpoint).resolve())] + [(p.name, p.stat().st_size, p.stat().st_mtime_ns)
                                                                       for p in files]
    digest = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).name)
    return Path(home) / "weights" / f"{slug}-{str(dtype).removeprefix('torch.')}-{digest}.safetensors"


def flatten(params):  # kvlib's params {name: tensor, 'h': [{name: tensor}]} -> {name: tensor}, layer i as 'h.i.name'
    flat = {k: v for k, v in params.items() if k != "h"}
    for i, layer in enumerate(params["h"]):
        flat.update({f"h.{i}.{k}": v for k, v in layer.items()})
    return flat


def unflatten(flat, n_layer):  # the inverse of flatten
    params = {k: v for k, v in flat.items() if not k.startswith("h.")}
    params["h"] = [{} for _ in range(n_layer)]
    for k, v in flat.items():
        if k.startswith("h."):
            _, i, name = k.split(".", 2)
            params["h"][int(i)][name] = v
    return params


def save(path, config, params):
    """Write config and params to path (via a temporary file renamed into place)."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    # each tensor its own contiguous storage: safetensors refuses views that share memory
    save_file({k: v.detach().contiguous().clone() for k, v in flatten(params).items()}, str(tmp),
              metadata={"config": json.dumps(asdict(config))})
    os.replace(tmp, path)


def load(path, config_class):  # -> (config, params), the params' memory the file's pages, mapped read-only
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        config = config_class(**json.loads(f.metadata()["config"]))
    return config, unflatten(load_file(str(path)), config.n_layer)


def shared(path, config_class, build):
    """(config, params) from the weights file at path, written first by build() -> (config, params) if it is not
    there; where kvlib's home cannot be written, build()'s own copy (private to this process, as before)."""
    if not path.exists():
        config, params = build()
        try:
            save(path, config, params)
        except OSError:
            return config, params
        del params  # this process, too, reads the shared pages from now on
    return load(path, config_class)
