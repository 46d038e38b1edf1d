"""One copy of a model's weights for every process on the machine: kvlib's own layout, in a file mapped read-only.

transformers loads a checkpoint into memory each process owns, and kvlib then rearranges it (Llama's
projections transposed, the output head a [C, V] copy of the token table): about 0.8 GB of private memory
per kernel with SmolLM2, so a workshop server holds one learner per 0.8 GB before anyone runs a cell. Here
the rearranged weights are written once, as a safetensors file under kvlib's home, and every later load
maps that file: its pages sit once in the operating system's page cache and each process reads the same
pages (copy-on-write: a process that changed a weight in place would get its own copy of that page, never
another's). A room's memory then grows by each learner's activations and cache, not by the weights.

The file's name carries a digest of what the weights come from (a checkpoint's files: names, sizes, modification
times; for random-gpt2, its seed and the library versions that draw it), the dtype and LAYOUT, so a changed
checkpoint or layout gets a new file; it is written to a temporary name and
renamed, so thirty kernels starting at once never read half a file.
"""

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

LAYOUT = 1  # bump when kvlib's params change shape or names: old files are then never read


def path_for(home, name, sources, dtype):
    """home: kvlib's folder; name: the model's name; sources: what its weights are made from (a checkpoint's
    directory, or facts that make them, such as a seed and library versions) -> where its weights file lives."""
    if isinstance(sources, Path):  # a checkpoint: its files as they are now
        sources = [str(sources.resolve())] + [(p.name, p.stat().st_size, p.stat().st_mtime_ns)
                                              for p in sorted(sources.iterdir()) if p.is_file()]
    digest = hashlib.sha256(json.dumps([LAYOUT, str(dtype), *sources]).encode()).hexdigest()[:16]
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


def save(path, config, params, source):
    """Write config and params to path (via a temporary file renamed into place); source: what they were made
    from (a checkpoint's directory, or a name). Files of the same source and dtype written before (a checkpoint
    since changed), and files of a checkpoint whose directory is gone, are deleted: a process still mapping
    one keeps its pages until it exits."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    dtype = str(next(iter(params["h"][0].values())).dtype)
    # each tensor its own contiguous storage: safetensors refuses views that share memory
    save_file({k: v.detach().contiguous().clone() for k, v in flatten(params).items()}, str(tmp),
              metadata={"config": json.dumps(asdict(config)), "source": str(source), "dtype": dtype})
    os.replace(tmp, path)
    for other in path.parent.glob("*.safetensors"):
        if other != path and stale(other, str(source), dtype):
            other.unlink(missing_ok=True)


def stale(path, source, dtype):  # -> whether the file at path is an older copy of (source, dtype), or an orphan
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception:  # noqa: BLE001 (a file half written by a process that died: nothing to keep)
        return True
    theirs = meta.get("source", "")
    return (theirs == source and meta.get("dtype") == dtype) or (os.path.isabs(theirs) and not os.path.exists(theirs))


def load(path, config_class):  # -> (config, params), the params' memory the file's pages, mapped read-only
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        config = config_class(**json.loads(f.metadata()["config"]))
    return config, unflatten(load_file(str(path)), config.n_layer)


def shared(path, config_class, build, source):
    """(config, params) from the weights file at path, written first by build() -> (config, params) if it is not
    there; where kvlib's home cannot be written, build()'s own copy (private to this process, as before)."""
    if not path.exists():
        config, params = build()
        try:
            save(path, config, params, source)
        except OSError:
            return config, params
        del params  # this process, too, reads the shared pages from now on
    return load(path, config_class)
