"""A test run leaves the reader's files and the temporary folder as it found them.

The process that runs the session (pytest's controller under xdist) points ``TMPDIR`` at a
fresh, empty folder before any test starts; the xdist workers, nbval, the Jupyter kernels,
the book builds, nested pytest sessions and every other process a test starts inherit it
(a nested session leaves the checking to the run). At the end of the session
whatever is left in that folder, or changed under ``_build/`` (where the README's build
writes the reader's site), is listed and fails the run; the folder is then removed. Tests
keep what they write in pytest's own temporary paths (``tmp_path``), outside that folder,
which pytest removes after a passing run (``tmp_path_retention_policy`` in pyproject.toml).
``tests/test_leftovers.py`` shows the check failing on a test that leaves a file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Left in the folder by design, not by a test: torch's compile cache (DistributedDataParallel's
# constructor makes it, empty; torch keeps it from run to run), torchrun's log folder (without
# --log-dir each run makes one, mkdtemp(prefix="torchelastic_") in torch.distributed.elastic's
# multiprocessing/api.py, and leaves it, empty where nothing is redirected into it), and the root
# of a nested pytest session's numbered folders once its passing run has emptied them.
EXPECTED = ("torchinductor_*", "torchelastic_*", "pytest-of-*")
NESTED = "LEARN_PARALLEL_TEST_RUN_TMPDIR"  # set in a checked run: sessions it starts skip it
_STATE = pytest.StashKey[tuple[Path, str | None, dict[str, tuple[int, int]]]]()


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` (relative path), with its size and modification time."""
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.rglob("*"):
        if not path.is_dir():
            stat = path.lstat()
            found[path.relative_to(folder).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def _describe(path: Path) -> str:
    """``name`` for a file, ``name/ (N files, M MB)`` for a folder."""
    if not path.is_dir():
        return path.name
    sizes = [size for size, _ in files_under(path).values()]
    return f"{path.name}/ ({len(sizes)} files, {sum(sizes) / 1e6:.1f} MB)"


def _expected(path: Path) -> bool:
    regular = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return any(path.match(pattern) for pattern in EXPECTED) and not regular


def _checked_by_another(config: pytest.Config) -> bool:
    """An xdist worker, or a pytest session a test started: the run around it checks."""
    return hasattr(config, "workerinput") or NESTED in os.environ


@pytest.hookimpl(trylast=True)  # after pytest's tmpdir plugin has set up its factory
def pytest_configure(config: pytest.Config) -> None:
    if _checked_by_another(config):
        return
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        factory.getbasetemp()  # pytest's own temporary paths stay where they always are
    fresh = Path(tempfile.mkdtemp(prefix="learn-parallel-test-run-"))
    build = config.rootpath / "_build"
    config.stash[_STATE] = (fresh, os.environ.get("TMPDIR"), files_under(build))
    os.environ["TMPDIR"] = os.environ[NESTED] = str(fresh)
    tempfile.tempdir = None  # tempfile reads TMPDIR again


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _STATE not in config.stash:  # this process made no folder: another one checks
        return
    fresh, tmpdir, build_before = config.stash[_STATE]
    left = [_describe(p) for p in sorted(fresh.iterdir()) if not _expected(p)]
    build_after = files_under(config.rootpath / "_build")
    changed = sorted(
        name
        for name in build_before.keys() | build_after.keys()
        if build_before.get(name) != build_after.get(name)
    )
    os.environ.pop(NESTED, None)
    if tmpdir is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = None
    shutil.rmtree(fresh, ignore_errors=True)
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return  # interrupted or broken: the tests did not all run to their cleanup
    problems = []
    if left:
        problems.append(f"{len(left)} thing(s) left in the temporary folder (TMPDIR):")
        problems += [f"  {line}" for line in left]
    if changed:
        problems.append(f"{len(changed)} file(s) under _build/ (the reader's site) changed:")
        problems += [f"  {name}" for name in changed[:40]]
    if problems:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "the test run left files behind", red=True)
            for line in problems:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
