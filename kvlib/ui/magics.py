"""`%%needs smollm2` (or `%%needs smollm2 engine`): a notebook cell that needs something only set-up
fetches runs only where it is.

Offline, without SmolLM2, every notebook must still run top to bottom on the bundled model:
a cell marked `%%needs smollm2` then prints how to get the model instead of failing. `engine` is
llama.cpp's server (`make engine` builds it) with SmolLM2's GGUF file, which notebook 8 runs; a
learner may go without it. Where everything named is present the cell runs as any cell does (its
last value is shown, its errors raised). Registered when kvlib is imported inside IPython.
"""

from ..errors import KVLibError
from ..model import models

ENGINE = "engine"


def missing(name):
    """(what is missing, how to get it) where `name` is not on this machine; None where it is."""
    if name == ENGINE:
        from ..server import llamacpp

        try:
            llamacpp.Engine().command()  # finds the server and the GGUF it serves, or says how to get each
        except KVLibError as e:
            return "llama.cpp's server (the engine)", str(e)
        return None
    if models.local_dir(name) is None:
        return name, f"`{models.download_hint(name)}` fetches it"
    return None


def needs(line, cell):
    names = line.split()
    known = (*models.HUB_IDS, ENGINE)
    if not names or any(name not in known for name in names):
        raise KVLibError(f"%%needs takes one or more of {', '.join(known)}, not {line.strip()!r}")
    absent = [m for m in map(missing, names) if m]
    if absent:
        print("(skipped: this cell needs " + "; and ".join(f"{what}, which is not on this machine: {how}"
                                                           for what, how in absent) + ". Then run the notebook again.)")
        return None
    from IPython import get_ipython

    get_ipython().run_cell(cell).raise_error()  # shows the cell's last value; a failure fails this cell


def register():
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.register_magic_function(needs, magic_kind="cell")
