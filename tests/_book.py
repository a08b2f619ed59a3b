"""Shared helpers for the book tests: where things are, and building the book.

Each chapter is executed as few times as the tests need (the note in ``test_book.py`` lists
them): nbval executes every chapter on the default four simulated devices and compares its
outputs with the stored ones, so the site the tests build renders those stored outputs
(``execute=False``), and one build executes a single chapter to prove the executing build
itself (the README's first command) works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import filelock
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


def jupyter_book() -> str | None:
    """The jupyter-book command of this Python environment, if installed."""
    here = Path(sys.executable).parent / "jupyter-book"
    return str(here) if here.exists() else shutil.which("jupyter-book")


def _config(execute: bool, only: str | None, folder: Path) -> Path:
    """``_config.yml`` with execution switched as asked, written into ``folder``.

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
    path = folder / "_config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def build(
    out: Path, strict: bool = True, execute: bool = False, only: str | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    """``jupyter-book build . --all`` (plus ``-W --keep-going`` when strict) into ``out/_build``.

    Always into a folder of the test's own, never into the repository's ``_build/``, where
    the README's build wrote the reader's site (``tests/_leftovers.py`` checks that).
    """
    out.mkdir(parents=True, exist_ok=True)
    command = [jupyter_book(), "build", str(ROOT), "--all", "--path-output", str(out)]
    command += ["--config", str(_config(execute or only is not None, only, out))]
    if strict:
        command += ["-W", "--keep-going"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return result, time.perf_counter() - start


def shared_build(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess, float, Path]:
    """The strict build of the site with its stored outputs (``-W --keep-going``), made once
    per test run: parallel test processes share it through a lock in the run's temporary
    folder, as building the site takes a process's whole core for ten seconds and more. The
    build's result, its seconds, and its ``html`` folder."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's own
    out, record = run / "shared-book-site", run / "shared-book-site.json"
    with filelock.FileLock(str(run / "shared-book-site.lock")):
        if not record.exists():
            result, seconds = build(out, strict=True)
            done = {"returncode": result.returncode, "stdout": result.stdout}
            done |= {"stderr": result.stderr, "seconds": seconds, "args": result.args}
            record.write_text(json.dumps(done))
    done = json.loads(record.read_text())
    result = subprocess.CompletedProcess(
        done["args"], done["returncode"], done["stdout"], done["stderr"]
    )
    return result, done["seconds"], out / "_build" / "html"


def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site with its stored outputs (`shared_build`); its ``html`` folder."""
    result, _, html = shared_build(tmp_path_factory)
    if not (html / "book").is_dir():  # a warning fails the strict build, not the site
        log = (result.stdout + result.stderr)[-4000:]
        raise RuntimeError("the book did not build:\n" + log)
    return html
