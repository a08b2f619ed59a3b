"""What a class hands in, read safely before any student code runs.

`find` walks the submissions folder without following links. Only regular files are read,
each at most `MAX_NOTEBOOK_BYTES` (a link, a pipe, a device or a folder named ``*.ipynb`` is
refused without being opened for reading), and a notebook that is not valid nbformat 4 is
refused too: each refusal costs its own notebook only (0 on every exercise, with the
reason). A track copy (a folder holding ``tests/test_tasks.py``) is copied, regular files
only, before anything runs. `printable` cleans every text the grader shows or writes: no
control characters (a terminal escape cannot repaint the table), and a name that is not
UTF-8 is shown with backslash escapes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import unicodedata
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_NOTEBOOK_BYTES = 20 * 2**20
MAX_TRACK_BYTES = 50 * 2**20
_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFSOCK: "a socket",
}


class Refused(Exception):
    """Why a file is not graded (its notebook scores 0, with this as the message)."""


def printable(text: object, limit: int = 1000) -> str:
    """``text`` on one line, without control or format characters, at most ``limit`` long."""
    text = str(text)
    try:  # a file name's undecodable bytes (os.fsdecode's surrogates) back as \xNN
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    kept = []
    for character in text:
        category = unicodedata.category(character)
        if character.isspace():
            kept.append(" ")
        elif category not in ("Cc", "Cf", "Cs"):
            kept.append(character)
    line = "".join(kept)
    return line if len(line) <= limit else line[: limit - 4] + " ..."


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes: a link is
    not followed (``O_NOFOLLOW``) and a named pipe cannot block (``O_NONBLOCK``)."""
    try:
        kind = stat.S_IFMT(os.lstat(path).st_mode)
        if kind != stat.S_IFREG:
            raise Refused(f"{_KINDS.get(kind, 'not a regular file')}, not a regular file")
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise Refused(f"cannot be read ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"larger than {limit // 2**20} MiB")
    return data


def read_notebook(path: Path) -> Any:
    """A valid nbformat 4 notebook, or `Refused` saying what is wrong with it."""
    import nbformat  # here: the checks (and this module's other readers) need no Jupyter

    data = read_regular(path, MAX_NOTEBOOK_BYTES)
    invalid: dict = {}  # nbformat puts its verdict here instead of logging it
    try:
        with warnings.catch_warnings():  # duplicate cell ids: repaired, nothing to say
            warnings.simplefilter("ignore")
            notebook = nbformat.reads(data.decode("utf-8"), 4, capture_validation_error=invalid)
        if invalid:
            raise invalid["ValidationError"]
    except RecursionError:
        raise Refused("not a notebook: its JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise Refused(f"not a notebook ({type(error).__name__}: {printable(error, 200)})") from None
    except Exception as error:  # nbformat's ValidationError, or a reader's surprise
        message = getattr(error, "message", None) or error
        raise Refused(f"not a valid notebook ({printable(message, 200)})") from None
    return notebook


@dataclass
class Found:
    """Every ``*.ipynb`` under the submissions (path, and the notebook or why it was refused)
    and every track folder, in a stable order."""

    notebooks: list[tuple[Path, Any]] = field(default_factory=list)  # notebook, or Refused
    tracks: list[Path] = field(default_factory=list)


def find(submissions: Path) -> Found:
    """Read every notebook under ``submissions`` (links are neither followed nor read)."""
    found = Found()
    for folder, folders, names in os.walk(submissions):
        folders[:] = sorted(f for f in folders if f != ".ipynb_checkpoints")
        here = Path(folder)
        if "tests" in folders and os.path.lexists(here / "tests" / "test_tasks.py"):
            found.tracks.append(here)
        for name in sorted(n for n in names + folders if n.endswith(".ipynb")):
            path = here / name
            try:
                found.notebooks.append((path, read_notebook(path)))
            except Refused as refusal:
                found.notebooks.append((path, refusal))
    found.notebooks.sort(key=lambda entry: str(entry[0]))
    return found


def copy_track(folder: Path, target: Path) -> None:
    """Copy the student's ``learn_parallel/`` from a track folder into ``target`` (regular
    files only, at most `MAX_TRACK_BYTES` in all); their tests and settings are not copied."""
    source = folder / "learn_parallel"
    if not source.is_dir() or source.is_symlink():
        raise Refused("no learn_parallel/ folder in this track copy")
    total = 0
    for here, folders, names in os.walk(source):
        folders[:] = [f for f in folders if f != "__pycache__"]
        for name in names:
            path = Path(here) / name
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                continue  # links, pipes and devices stay behind
            total += info.st_size
            if total > MAX_TRACK_BYTES:
                raise Refused(f"the track copy is larger than {MAX_TRACK_BYTES // 2**20} MiB")
            copy = target / path.relative_to(folder)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(read_regular(path, MAX_TRACK_BYTES))
    if not (target / "learn_parallel" / "__init__.py").exists():
        shutil.rmtree(target / "learn_parallel", ignore_errors=True)
        raise Refused("no learn_parallel/__init__.py in this track copy")
