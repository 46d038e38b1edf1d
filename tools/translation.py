"""Keep a translated notebook in step with the English one it was translated from.

    python tools/translation.py check notebooks/zh/02_tokens.ipynb   # what is stale; exit 1 if anything
    python tools/translation.py sync  notebooks/zh/02_tokens.ipynb   # code cells regenerated from the English
    python tools/translation.py mark  notebooks/zh/02_tokens.ipynb 3 11   # these cells are translated from the English now

A translation (notebooks/LANG/NAME.ipynb) has the English notebook's (notebooks/NAME.ipynb) cells in the same
order, each with its tags. A markdown cell is translated by a person and records in `metadata.kvlib.en_sha`
the hash of the English cell it says; when the English changes, the hashes differ and `check` names the cell
until someone updates the translation and `mark`s it. A code cell is the English cell with a short list of
literal replacements (`metadata.kvlib.replace`: [[English, translation], ...], each found exactly once in
the English cell): Chinese example text, Chinese printed sentences. `sync` writes it; `check` fails if it
differs, or if a replacement no longer finds its English. A new translation starts as `sync` of a path that
does not exist yet: the English cells, markdown marked untranslated (en_sha ""), code with no replacements.

Standard library only: the tests import it, and a translator runs it without kvlib's environment.
"""

import hashlib
import json
import sys
from pathlib import Path


def sha(cell):  # the hash a translated cell records of the English cell it says
    return hashlib.sha256(source(cell).encode()).hexdigest()[:16]


def source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def english_of(path):  # notebooks/zh/02_tokens.ipynb -> notebooks/02_tokens.ipynb
    return Path(path).parent.parent / Path(path).name


def read(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write(path, nb):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def lines(text):  # a cell's source as nbformat keeps it: lines with their newlines
    return text.splitlines(keepends=True)


def translated_code(en, replace):
    """The English code cell's source with each [English, translation] replaced -> (source, problems)."""
    text, problems = source(en), []
    for old, new in replace:
        found = source(en).count(old)
        if found != 1:
            problems.append(f"the replacement of {old[:60]!r} finds it {found} times in the English cell, not once")
        text = text.replace(old, new)
    return text, problems


def stale(path):
    """What in the translation at path lags behind its English notebook: one line per cell, naming it."""
    en_cells, cells = read(english_of(path))["cells"], read(path)["cells"]
    if [c["cell_type"] for c in en_cells] != [c["cell_type"] for c in cells]:
        return [f"{path}: its cells' kinds {[c['cell_type'][0] for c in cells]} are not the English "
                f"{[c['cell_type'][0] for c in en_cells]}: add or remove the cells the English added or removed"]
    problems = []
    for i, (en, cell) in enumerate(zip(en_cells, cells)):
        at = f"{path} cell {i} ({source(en).strip().splitlines()[0][:50] if source(en).strip() else 'empty'!r})"
        meta = cell["metadata"].get("kvlib", {})
        if en["metadata"].get("tags", []) != cell["metadata"].get("tags", []):
            problems.append(f"{at}: tags {cell['metadata'].get('tags', [])}, the English has {en['metadata'].get('tags', [])}")
        if cell["cell_type"] == "markdown":
            if not meta.get("en_sha"):
                problems.append(f"{at}: not translated yet")
            elif meta["en_sha"] != sha(en):
                problems.append(f"{at}: the English changed since it was translated: update the translation, "
                                f"then `mark` it")
        else:
            text, wrong = translated_code(en, meta.get("replace", []))
            problems += [f"{at}: {w}" for w in wrong]
            if not wrong and text != source(cell):
                problems.append(f"{at}: differs from the English with its replacements: `sync` writes it")
    return problems


def sync(path):
    """Write every code cell from the English with its replacements (and every cell's tags); a new path
    starts as the English, untranslated. -> the problems left (those sync cannot fix)."""
    english = read(english_of(path))
    if not Path(path).exists():
        nb = json.loads(json.dumps(english))
        for cell in nb["cells"]:
            cell["metadata"]["kvlib"] = {"en_sha": ""} if cell["cell_type"] == "markdown" else {"replace": []}
        write(path, nb)
    nb = read(path)
    if [c["cell_type"] for c in english["cells"]] == [c["cell_type"] for c in nb["cells"]]:
        for en, cell in zip(english["cells"], nb["cells"]):
            tags = en["metadata"].get("tags")
            cell["metadata"].pop("tags", None)
            cell["metadata"].update({"tags": tags} if tags else {})
            if cell["cell_type"] == "code":
                text, wrong = translated_code(en, cell["metadata"].get("kvlib", {}).get("replace", []))
                if not wrong:
                    cell["source"] = lines(text)
        write(path, nb)
    return stale(path)


def mark(path, indices):
    """Record that markdown cells `indices` now say what the English cells say."""
    en_cells, nb = read(english_of(path))["cells"], read(path)
    for i in indices:
        if nb["cells"][i]["cell_type"] != "markdown" or en_cells[i]["cell_type"] != "markdown":
            raise SystemExit(f"cell {i} is not a markdown cell in both notebooks")
        nb["cells"][i]["metadata"].setdefault("kvlib", {})["en_sha"] = sha(en_cells[i])
    write(path, nb)


def main(argv):
    if len(argv) < 2 or argv[0] not in ("check", "sync", "mark"):
        raise SystemExit(__doc__)
    command, path = argv[0], argv[1]
    if command == "mark":
        mark(path, [int(i) for i in argv[2:]])
    problems = sync(path) if command == "sync" else stale(path)
    print("\n".join(problems) or f"{path}: in step with {english_of(path)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
