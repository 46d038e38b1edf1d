"""`%%needs smollm2`: a notebook cell that needs a downloaded model runs only where the model is.

Offline, without SmolLM2, every notebook must still run top to bottom on the bundled model:
a cell marked `%%needs smollm2` then prints how to get the model instead of failing. Where the
model is present the cell runs as any cell does (its last value is shown, its errors raised).
Registered when kvlib is imported inside IPython.
"""

from . import models


def needs(line, cell):
    name = line.strip()
    if name not in models.HUB_IDS:
        raise models.KVLibError(f"%%needs takes a model name ({', '.join(models.HUB_IDS)}), not {name!r}")
    if models.local_dir(name) is None:
        print(f"(skipped: this cell needs {name}, which is not on this machine; "
              f"`{models.download_hint(name)}` fetches it, then run the notebook again)")
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
