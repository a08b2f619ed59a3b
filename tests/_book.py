"""Shared helpers for the book tests: where things are, and building the book.

Each chapter is executed as few times as the tests need (the note in ``test_book.py`` lists
them): nbval executes every chapter on the default four simulated devices and compares its
outputs with the stored ones, so the site the tests build renders those stored outputs
(``execute=False``), and one build executes a single chapter to prove the executing build
itself (the README's first command) works.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
HTML = ROOT / "_build" / "html"


def jupyter_book() -> str | None:
    """The jupyter-book command of this Python environment, if installed."""
    here = Path(sys.executable).parent / "jupyter-book"
    return str(here) if here.exists() else shutil.which("jupyter-book")


def _config(execute: bool, only: str | None) -> Path:
    """``_config.yml`` with execution switched as asked, written to a temporary file.

    ``execute=False`` renders the stored outputs. ``only`` executes that one chapter and
    renders the others' stored outputs. Paths in the config are made absolute, since they
    are read relative to the config file.
    """
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    extensions = config["sphinx"]["local_extensions"]
    config["sphinx"]["local_extensions"] = {k: str(ROOT / v) for k, v in extensions.items()}
    settings = config["execute"]
    settings["execute_notebooks"] = "force" if execute else "off"
    if only is not None:
        others = sorted(p.name for p in BOOK.glob("*.ipynb") if p.stem != only)
        settings["exclude_patterns"] = others
    path = Path(tempfile.mkdtemp(prefix="book-config-")) / "_config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def build(
    strict: bool = True, execute: bool = False, only: str | None = None, out: Path | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    """``jupyter-book build . --all`` (plus ``-W --keep-going`` when strict) into ``out/_build``.

    ``out`` defaults to the repository (``_build/``, where the README's build writes).
    ``--all`` rebuilds every page even when an earlier build left ``_build/`` behind.
    """
    command = [jupyter_book(), "build", str(ROOT), "--all"]
    command += ["--config", str(_config(execute or only is not None, only))]
    if out is not None:
        command += ["--path-output", str(out)]
    if strict:
        command += ["-W", "--keep-going"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return result, time.perf_counter() - start


@functools.cache
def built_site() -> Path:
    """The site with its stored outputs, built once per test process into a folder of its own
    (so parallel test processes never write the same files); its ``html`` folder."""
    out = Path(tempfile.mkdtemp(prefix="book-site-"))
    result, _ = build(strict=False, out=out)
    if result.returncode != 0:
        raise RuntimeError("the book did not build:\n" + (result.stdout + result.stderr)[-4000:])
    return out / "_build" / "html"
