"""The course as files a learner owns: the notebooks, from wherever kvlib is, copied into a folder of theirs.

In a checkout the notebooks sit in notebooks/ beside the package; in an installed wheel they travel inside it
(pyproject maps notebooks/ to the package kvlib.course). `kvlib lab` copies them into the learner's folder and
opens JupyterLab there. A copy never overwrites the learner's work: each file's hash as copied is kept in the
folder (MANIFEST), so a later copy updates a notebook only if it is still as copied, and leaves an edited one
as it is, with the course's new version beside it.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import KVLibError

MANIFEST = ".kvlib-course.json"  # {relative path: sha256 of the file as kvlib last copied it}
FIRST = "01_generation_loop.ipynb"


def course_dir():
    """Where this kvlib's notebooks are: inside the installed package, else beside it in a checkout."""
    here = Path(__file__).resolve().parents[1]  # kvlib/
    for folder in (here / "course", here.parent / "notebooks"):
        if (folder / FIRST).exists():
            return folder
    raise KVLibError("this kvlib has no notebooks beside it or inside it: reinstall it from its wheel "
                     "(pip install kvlib) or run it from a checkout of the repository")


def course_files(folder):  # -> the course's files under folder, as relative paths: notebooks and READMEs
    return sorted(p.relative_to(folder) for p in folder.rglob("*")
                  if p.suffix in (".ipynb", ".md") and ".ipynb_checkpoints" not in p.parts)


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def copy_course(dest, source=None):
    """Copy the course into dest -> {"copied": [...], "updated": [...], "kept": [...]} (relative paths): new files
    copied, files still as last copied brought up to date, edited ones kept (the course's version written beside,
    NAME.new.ipynb)."""
    source, dest = Path(source or course_dir()), Path(dest).expanduser()
    if dest.exists() and not dest.is_dir():
        raise KVLibError(f"{dest} is a file: give a folder for the course")
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    done = {"copied": [], "updated": [], "kept": []}
    for rel in course_files(source):
        src, dst, key = source / rel, dest / rel, rel.as_posix()
        new = digest(src)
        if not dst.exists():
            what = "copied"
        elif digest(dst) == new:
            manifest[key] = new
            continue
        elif digest(dst) == manifest.get(key):  # as kvlib copied it: the learner did not touch it
            what = "updated"
        elif new == manifest.get(key):  # edited by the learner, and the course has not changed since: nothing to do
            continue
        else:  # the learner's edits, and a newer course: never overwritten, the new version beside them
            shutil.copyfile(src, dst.with_name(f"{dst.stem}.new{dst.suffix}"))
            done["kept"].append(key)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        manifest[key] = new
        done[what].append(key)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return done


def say_copied(dest, done):  # -> lines for the learner: where the course is, and what was kept
    lines = [f"kvlib: the course is in {Path(dest).expanduser()} ({len(done['copied'])} files copied, "
             f"{len(done['updated'])} updated)"]
    lines += [f"kvlib: kept your edited {k}; the course's version is beside it as "
              f"{Path(k).stem}.new{Path(k).suffix}" for k in done["kept"]]
    return lines


def lab(dest, open_lab=True):
    """Copy the course into dest, then open JupyterLab on it (torch's threads waiting without spinning: the
    browser and the lab share the cores with the kernel)."""
    done = copy_course(dest)
    print("\n".join(say_copied(dest, done)), flush=True)
    if not open_lab:
        return 0
    root = ["--allow-root"] if hasattr(os, "getuid") and os.getuid() == 0 else []
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    return subprocess.call([sys.executable, "-m", "jupyterlab", "--notebook-dir", str(Path(dest).expanduser()), *root],
                           env=env)
