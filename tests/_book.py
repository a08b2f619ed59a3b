"""Shared helpers for the book tests: where things are, and building the book once."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
HTML = ROOT / "_build" / "html"


def jupyter_book() -> str | None:
    """The jupyter-book command of this Python environment, if installed."""
    here = Path(sys.executable).parent / "jupyter-book"
    return str(here) if here.exists() else shutil.which("jupyter-book")


def build(strict: bool = True) -> tuple[subprocess.CompletedProcess, float]:
    """``jupyter-book build . --all`` (plus ``-W --keep-going`` when strict) into ``_build/``.

    ``--all`` rebuilds every page, so every notebook really is executed again even when
    an earlier build left ``_build/`` behind.
    """
    command = [jupyter_book(), "build", str(ROOT), "--all"]
    if strict:
        command += ["-W", "--keep-going"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return result, time.perf_counter() - start


def html_is_fresh() -> bool:
    """True when _build/html exists and is newer than every chapter and the config."""
    index = HTML / "book" / "intro.html"
    if not index.exists():
        return False
    sources = [*BOOK.glob("*.ipynb"), *BOOK.glob("*.md"), ROOT / "_config.yml", ROOT / "_toc.yml"]
    sources += list((ROOT / "learn_parallel").rglob("*.py"))  # chapters show lab/ code too
    return index.stat().st_mtime >= max(p.stat().st_mtime for p in sources)
