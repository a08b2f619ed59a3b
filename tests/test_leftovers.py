"""The check that a test run leaves nothing behind (``tests/_leftovers.py``) can fail.

Each test runs a small pytest session of its own, in a subprocess, with the check loaded the
way ``tests/conftest.py`` loads it: once on one process, once on two xdist workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _leftovers
import pytest

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""\
import sys
sys.path.insert(0, {str(TESTS)!r})
from _leftovers import pytest_configure, pytest_sessionfinish  # noqa: E402, F401
"""

LEAKS = """\
import tempfile
from pathlib import Path


def test_a_clean_test(tmp_path):
    (tmp_path / "kept-by-pytest.txt").write_text("pytest removes its own tmp_path")
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "removed.txt").write_text("cleaned up by its with block")


def test_leaves_a_temporary_folder():
    folder = Path(tempfile.mkdtemp(prefix="forgotten-"))
    (folder / "result.json").write_text("{}")


def test_rewrites_the_readers_site():
    Path("_build/html/index.html").write_text("<p>overwritten</p>")
"""


def _session(
    project: Path, tests: str, *options: str, nested: bool = False
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``tests`` in a pytest session of their own; its result, and what it left in the
    temporary folder (the check removes its own folder)."""
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_it.py").write_text(tests)
    site = project / "_build" / "html"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<p>the reader's site</p>")
    temporary = project.parent / "tmp"
    temporary.mkdir()
    env = dict(os.environ, TMPDIR=str(temporary))
    env.pop(_leftovers.NESTED, None)  # a session of its own, not one inside this test run
    if nested:  # as if started by a test of a checked run
        env[_leftovers.NESTED] = str(temporary)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:nbval", "-q"]
    command += [*options, "--basetemp", str(project.parent / "basetemp")]
    done = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=120
    )
    return done, sorted(p.name for p in temporary.iterdir())


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two workers"])
def test_a_run_that_leaves_files_fails_and_names_them(tmp_path, workers):
    done, left = _session(tmp_path / "project", LEAKS, *workers)
    assert left == [], "the check did not remove its folder"
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "3 passed" in out  # every test passed: the check alone fails the run
    assert "the test run left files behind" in out
    assert "1 thing(s) left in the temporary folder (TMPDIR):" in out
    assert "  forgotten-" in out and "(1 files, 0.0 MB)" in out
    assert "1 file(s) under _build/ (the reader's site) changed:\n  html/index.html" in out


CLEAN = (
    LEAKS.split("\n\n\ndef test_leaves")[0]
    + """


def test_makes_torchs_cache_folder():
    (Path(tempfile.gettempdir()) / "torchinductor_someone").mkdir()
"""
)


def test_a_run_that_cleans_up_passes(tmp_path):
    done, left = _session(tmp_path / "project", CLEAN, "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left files behind" not in done.stdout and left == []


def test_a_session_started_inside_a_checked_run_leaves_the_check_to_it(tmp_path):
    done, left = _session(tmp_path / "project", LEAKS, nested=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(left) == 1 and left[0].startswith("forgotten-")  # for the run to find
