"""One student cannot stop the class: bad files, runaway cells and a killed grader.

Each test grades a small class in which one honest submission must keep its marks while the
others hand in what stopped issue 49's grader: malformed, linked, piped or oddly named files
(each scores 0 with its reason, and the table still prints, results written first), cells
that ignore interrupts or never end (a restart without the cell, and a wall clock per
notebook), answers that allocate past the memory limit (privately, or in the sandbox's
/dev/shm), and a grader killed mid-run (its folders are removed by the next run). Every test
runs sandboxed and without a sandbox: these are the grader's own defences.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

from _grading import (  # noqa: E402
    BOOK,
    BOTH,
    CHAPTER,
    EITHER,
    hand_in,
    notebook,
    running,
    scores,
    solutions,
)

from learn_parallel.classroom.grade import grade, table  # noqa: E402
from learn_parallel.classroom.notebooks import CHECK, tags  # noqa: E402
from learn_parallel.classroom.sandbox import GiB, Limits  # noqa: E402

ESCAPES = "\x1b[2J\x1b[Hada: 0/2\x1b]0;pwned\x07"
CHECK_CELL = 'from learn_parallel.classroom import check\n\ncheck("scatter-sizes", chunk_sizes)\n'


def _bad_files(folder: Path, good: Path) -> dict[str, str]:
    """Every kind of file that stopped the old grader, one per student: the reason each
    one's notebook must be refused with."""
    text = good.read_text()
    nested = json.loads(text)
    nested["cells"][0]["metadata"]["tags"] = 5
    numeric = json.loads(text)
    numeric["cells"][0]["source"] = 5
    writes = {
        "truncated": (text[:100], "not a notebook"),
        "nested": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        "tags-5": (json.dumps(nested), "not a valid notebook"),
        "numeric-source": (json.dumps(numeric), "not a valid notebook"),
    }
    reasons = {}
    for name, (content, reason) in writes.items():
        (folder / name).mkdir()
        (folder / name / f"{CHAPTER}.ipynb").write_text(content)
        reasons[name] = reason
    links = {"dangling": folder / "nowhere", "dev-zero": Path("/dev/zero"), "classmate": good}
    for name, target in links.items():
        (folder / name).mkdir()
        (folder / name / f"{CHAPTER}.ipynb").symlink_to(target)
        reasons[name] = "a symbolic link"
    (folder / "folder" / f"{CHAPTER}.ipynb").mkdir(parents=True)
    reasons["folder"] = "a folder"
    (folder / "pipe").mkdir()
    os.mkfifo(folder / "pipe" / f"{CHAPTER}.ipynb")
    reasons["pipe"] = "a named pipe"
    odd = os.path.join(os.fsencode(folder), b"caf\xe9")  # a name that is not UTF-8
    os.mkdir(odd)
    Path(os.fsdecode(os.path.join(odd, b"scatter.ipynb"))).write_text(text[:100])
    reasons["caf\\xe9"] = "not a notebook"  # as the grader shows it
    return reasons


@pytest.mark.parametrize("sandbox", EITHER)
def test_bad_files_score_zero_with_their_reason_and_the_class_is_graded(sandbox, tmp_path, capsys):
    from learn_parallel.classroom.__main__ import main

    class_folder, results = tmp_path / "class", tmp_path / "results.json"
    # Escapes: a terminal escape in its message, and its check cell handed in five times.
    escapes = notebook([f"def chunk_sizes(rows, devices):\n    raise ValueError({ESCAPES!r})\n"])
    escapes.cells += [nbformat.v4.new_code_cell(CHECK_CELL) for _ in range(5)]
    for cell in escapes.cells[-5:]:
        cell.metadata["tags"] = [CHECK]
    copied = notebook(solutions())  # not a chapter: its ten check cells earn nothing
    checks = [c for c in copied.cells if CHECK in tags(c)] * 5
    copied.cells += [nbformat.v4.new_code_cell(c.source, metadata=c.metadata) for c in checks]
    hand_in(class_folder, {"honest": notebook(solutions()), "escapes": escapes})
    nbformat.write(copied, str(class_folder / "honest" / "copied.ipynb"))
    reasons = _bad_files(class_folder, class_folder / "honest" / f"{CHAPTER}.ipynb")
    options = ["--json", str(results), "--jobs", "2", "--sandbox", sandbox]
    assert main(["grade", str(class_folder), "--reference", str(BOOK), *options]) == 0
    shown, rows = capsys.readouterr().out, json.loads(results.read_text())
    graded = scores(rows)
    assert graded.pop("honest") == {"scatter-sizes": True, "scatter-dict": True}, shown
    assert graded.pop("escapes") == {"scatter-sizes": False, "scatter-dict": False}, shown
    assert len([r for r in rows if "escapes" in r["submission"]]) == 2  # counted once
    assert set(graded) == set(reasons) and not any(any(g.values()) for g in graded.values())
    for r in rows:
        folder = Path(r["submission"]).parent.name
        if folder in reasons:
            assert r["message"].startswith("not graded: ") and reasons[folder] in r["message"]
    assert "caf\\xe9" in shown
    assert "ada: 0/2" in shown and not any(c in shown + results.read_text() for c in "\x1b\x07")
    assert "copied.ipynb: not a chapter of the reference, not graded" in shown


INTERRUPTS = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
HANGS = "import time\ntime.sleep(3600)\n"
# Shared memory past the 1 GiB limit: an anonymous mapping (never touched), then a file in
# /dev/shm for the same size (ENOSPC at once where that tmpfs is smaller than the request).
SHARES = """def split_batch(batch, ids):
    import mmap, os

    mapped = mmap.mmap(-1, 3 * 2**29)
    shared = os.open("/dev/shm/answer", os.O_RDWR | os.O_CREAT)
    os.posix_fallocate(shared, 0, 3 * 2**29)
"""


@pytest.mark.parametrize("sandbox", EITHER)
def test_runaway_cells_cost_only_their_own_notebook(sandbox, tmp_path):
    """A cell that ignores interrupts is left out on a restart (later cells do not wait for
    it); a notebook that never ends is stopped at its wall clock; an answer that allocates
    past the memory limit fails with MemoryError. In the sandbox, /dev/shm is as small as
    /tmp; an anonymous shared mapping is not counted (the guide's table says so)."""
    heavy = "import learn_parallel.classroom.judge\n"  # the grading cells' import, once
    uninterruptible = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in (heavy, INTERRUPTS, HANGS)]
    )
    endless = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in [INTERRUPTS] + [HANGS] * 30]
    )
    big = solutions()[0].replace("    size =", "    block = bytearray(3 * 2**29)\n    size =")
    # SHARES only in the sandbox: unsandboxed, it would fill this machine's own /dev/shm.
    answers = [big, SHARES] if sandbox == "bwrap" else [big]
    allocates = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(a) for a in answers])
    hand_in(tmp_path, {"allocates": allocates, "endless": endless, "ignores": uninterruptible})
    start = time.monotonic()
    limits = Limits(memory=GiB, seconds=30)  # a notebook's wall clock; a cell's: 5 s
    results = grade(tmp_path, BOOK, timeout=5, jobs=3, sandbox=sandbox, limits=limits)
    elapsed = time.monotonic() - start
    messages = {(Path(r.submission).parent.name, r.exercise): r.message for r in results}
    report = table(results)
    # The grading cells ran after the restart: the answers are missing, not timed out.
    assert "NameError" in messages["ignores", "scatter-sizes"], report
    assert "NameError" in messages["ignores", "scatter-dict"], report
    assert "ran past its limit of 30 s" in messages["endless", "scatter-sizes"], report
    assert "MemoryError" in messages["allocates", "scatter-sizes"], report
    if sandbox == "bwrap":  # the mapping was made; the file in /dev/shm could not be
        assert "No space left on device" in messages["allocates", "scatter-dict"], report
    assert elapsed < 90, f"{elapsed:.0f} s"


def _grader(folder: Path, tmp: Path, sandbox: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "learn_parallel.classroom", "grade", str(folder)]
    command += ["--reference", str(BOOK), "--sandbox", sandbox]
    env = dict(os.environ, TMPDIR=str(tmp), HOME=str(tmp.parent / "home"))
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("sandbox", BOTH)
def test_a_killed_grader_leaves_nothing_running_and_the_next_run_cleans_up(sandbox, tmp_path):
    tmp, class_folder = tmp_path / "tmp", tmp_path / "class"
    tmp.mkdir()
    (tmp_path / "home").mkdir()
    marker = f"still-running-{uuid.uuid4().hex}"  # tests run in parallel: each its own
    sleeper = f"import subprocess\nsubprocess.Popen(['/bin/sh', '-c', 'sleep 600', '{marker}'])\n"
    sleeper += HANGS
    sleeps = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(sleeper)])
    hand_in(class_folder, {"sleeps": sleeps})
    grader = _grader(class_folder, tmp, sandbox)
    deadline = time.monotonic() + 120
    while not running(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running(marker), "the submission's cell never started"
    grader.send_signal(signal.SIGKILL)
    grader.wait()
    time.sleep(3)
    assert not running(marker), "the submission's process outlived the killed grader"
    assert [p.name.startswith("learn-parallel-grade-") for p in tmp.iterdir()] == [True]
    (class_folder / "sleeps" / f"{CHAPTER}.ipynb").write_text("{")  # refused: nothing runs
    again = _grader(class_folder, tmp, sandbox)
    assert again.wait(timeout=300) == 0, again.stderr.read().decode()
    assert list(tmp.iterdir()) == [], "the temporary folder keeps what grading made"
