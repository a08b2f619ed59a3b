"""The sandbox itself, the build-it-yourself track's grading, and grading without a sandbox.

* inside bubblewrap a job sees no other process, none of the teacher's files (nor the
  chapters a wheel carries), no network (not even the host's loopback), no variable of the
  grader's, and the package read-only;
* track copies are graded with the teacher's tests on a copy made before any student code
  runs, and a process a task's code leaves behind ends with it;
* where no sandbox can start, ``grade`` says so in one line and stops, and its help says
  what a student can do when the teacher grades with ``--sandbox none``.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

from _grading import BOOK, BOTH, CHAPTER, hand_in, needs_bwrap, notebook, running, solutions  # noqa: E402

from learn_parallel.classroom import files  # noqa: E402
from learn_parallel.classroom.grade import grade, reference_exercises, table  # noqa: E402
from learn_parallel.classroom.sandbox import Bubblewrap, Container, Limits, environment  # noqa: E402
from learn_parallel.classroom.track import TASKS, make_track  # noqa: E402

INSIDE = """
import json, os, socket, sys
chapters = sys.argv[1].split(os.pathsep)
facts = {"processes": [], "chapters": [os.path.exists(p) for p in chapters]}
facts["home"] = os.environ["HOME"]
for pid in filter(str.isdigit, os.listdir("/proc")):
    facts["processes"].append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
facts["environ"] = [open(f"/proc/{p}/environ", "rb").read().decode(errors="replace")
                    for p in filter(str.isdigit, os.listdir("/proc"))]
try:
    open(os.path.join(sys.argv[2], "classroom", "checks", "zz.py"), "w")
    facts["package"] = "writable"
except OSError as error:
    facts["package"] = error.strerror
try:  # the grader's Python installation, which the grader imports from as it judges
    open(os.path.join(sys.argv[4], "zz_planted.py"), "w")
    facts["installation"] = "writable"
except OSError as error:
    facts["installation"] = error.strerror
for name, address in (("host", ("127.0.0.1", int(sys.argv[3]))), ("net", ("1.1.1.1", 53))):
    try:
        socket.create_connection(address, timeout=3).close()
        facts[name] = "connected"
    except OSError as error:
        facts[name] = error.strerror or str(error)
print(json.dumps(facts))
"""


@needs_bwrap
def test_inside_the_sandbox_a_job_sees_only_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "grader-secret-7f3a")
    # An installed wheel: the package carries the chapters, solutions included.
    wheel = tmp_path / "site-packages" / "learn_parallel"
    shutil.copytree(files.PACKAGE, wheel, ignore=shutil.ignore_patterns("__pycache__"))
    shipped = wheel / "classroom" / "shipped"
    (shipped / "book").mkdir(parents=True)
    shutil.copy(BOOK / f"{CHAPTER}.ipynb", shipped / "book")
    monkeypatch.setattr(files, "PACKAGE", wheel)
    monkeypatch.setattr(files, "SHIPPED", shipped)
    box, job = Bubblewrap(), tmp_path / "job"
    job.mkdir()
    with socket.socket() as server:  # a service on the host's loopback
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        chapters = f"{BOOK / CHAPTER}.ipynb:{shipped / 'book' / CHAPTER}.ipynb"
        installation = sysconfig.get_paths()["purelib"]
        argv = [sys.executable, "-c", INSIDE, chapters, str(wheel), str(port), installation]
        command = box.command(argv, job, environment(box, job), Limits())
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    programs = sorted(p.split("\0")[0] for p in facts["processes"])
    assert programs == sorted([box.binary, sys.executable])  # bwrap's init, and itself
    assert not any("grader-secret" in e for e in facts["environ"])
    assert facts["chapters"] == [False, False] and facts["home"] == "/tmp/home"
    assert facts["package"] == facts["installation"] == "Read-only file system", facts
    assert facts["host"] != "connected" and facts["net"] != "connected", facts


def test_a_container_gets_no_network_limits_and_the_package_read_only(tmp_path):
    box = Container("docker", "grader-image")
    command = box.command(["python3", "runner.py"], tmp_path, {"HOME": "/tmp/home"}, Limits())
    joined = " ".join(command)
    assert "--network none" in joined and "--read-only" in joined
    assert (
        f"--memory {Limits().memory}" in joined and f"--pids-limit {Limits().processes}" in joined
    )
    assert f"{files.PACKAGE}:/opt/learn-parallel/learn_parallel:ro" in joined
    assert command[-3:] == ["grader-image", "python3", "runner.py"]
    assert "needs --image" in Container("docker", None).problem() or box.engine is None


def test_without_a_sandbox_grading_stops_in_one_line(tmp_path, monkeypatch, capsys):
    from learn_parallel.classroom.__main__ import main

    hand_in(tmp_path, {"ada": notebook(None)})
    monkeypatch.setattr(Bubblewrap, "problem", lambda self: "no user namespaces here")
    assert main(["grade", str(tmp_path), "--reference", str(BOOK)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note")]
    assert len(lines) == 1 and "no user namespaces here" in lines[0], lines
    assert "--sandbox none" in lines[0]
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    none = shown[shown.index("none: no sandbox") :]
    cans = ("read your files", "talk to a classmate's kernel", "leave processes running")
    cans += ("rewrite the other jobs of the run", "kill the grader", "decide any pass")
    for can in cans:  # the guide's table, column `--sandbox none` (test_grading_attacks.py)
        assert can in none, can
    assert "cannot" not in none and "stop the class" not in none
    assert "not native Windows: use WSL" in none


def test_without_a_sandbox_grading_needs_unix_as_the_guide_and_readme_say():
    """Native Windows cannot grade at all: the job's runner imports `resource` and the grader
    ends a job with `os.killpg`, both Unix-only; the guide, the README and the students'
    README send Windows users to WSL."""
    import ast

    from learn_parallel.classroom import runner, sandbox
    from learn_parallel.classroom.handouts import STUDENT_README
    from learn_parallel.classroom.notebooks import read

    imports = ast.parse(Path(runner.__file__).read_text()).body
    assert any(isinstance(n, ast.Import) and n.names[0].name == "resource" for n in imports)
    assert "os.killpg(" in Path(sandbox.__file__).read_text()
    guide = " ".join(" ".join(c.source for c in read(BOOK / "teaching.ipynb").cells).split())
    readme = " ".join((BOOK.parent / "README.md").read_text().split())
    assert (
        "the job's runner imports `resource`, and the grader ends each job with `os.killpg`"
        in guide
    )
    assert "grade in WSL there" in guide and "(use WSL there)" in readme
    assert "on Windows, in WSL" in " ".join(STUDENT_README.split())


def test_each_exercise_of_the_reference_counts_once(tmp_path):
    chapter = nbformat.read(str(BOOK / f"{CHAPTER}.ipynb"), as_version=4)
    checks = [c for c in chapter.cells if "exercise-check" in c.metadata.get("tags", [])]
    chapter.cells += [nbformat.v4.new_code_cell(c.source, metadata=c.metadata) for c in checks]
    nbformat.write(chapter, str(tmp_path / f"{CHAPTER}.ipynb"))
    assert [e.id for e in reference_exercises(tmp_path, CHAPTER)] == [
        "scatter-sizes",
        "scatter-dict",
    ]


REWRITES = """
from pathlib import Path
victim = Path("CLASS") / "keeps-a-child"
(victim / "tests" / "test_tasks.py").write_text("def test_nothing():\\n    assert False\\n")
(victim / "learn_parallel" / "replicate.py").write_text("raise ImportError('broken')\\n")
"""
PASSES = "import pytest\n" + "".join(
    f"@pytest.mark.{t.name}\ndef test_{t.name}():\n    pass\n" for t in TASKS
)


@pytest.mark.parametrize("sandbox", BOTH)
def test_track_copies_are_graded_with_the_teachers_tests_on_a_copy(sandbox, tmp_path):
    marker = f"left-behind-{uuid.uuid4().hex}"  # tests run in parallel: each its own
    handwritten, honest = tmp_path / "handwritten", tmp_path / "keeps-a-child"
    make_track(handwritten)  # every task a stub, and a tests file that passes anyway
    (handwritten / "tests" / "test_tasks.py").write_text(PASSES)
    make_track(honest, tasks=[])  # the reference, whose import leaves a process behind
    module = honest / "learn_parallel" / "scatter_gather.py"
    spawn = f"import subprocess as _s\n_s.Popen(['/bin/sh', '-c', 'sleep 600', '{marker}'])\n"
    module.write_text(module.read_text() + spawn)
    hand_in(
        tmp_path, {"rewrites": notebook(None, first_cell=REWRITES.replace("CLASS", str(tmp_path)))}
    )
    results = grade(tmp_path, BOOK, jobs=2, sandbox=sandbox, limits=Limits(seconds=400))
    tracks = {}
    for r in results:
        if r.chapter == "track":
            tracks.setdefault(Path(r.submission).name, {})[r.exercise] = r.passed
    assert tracks == {
        "handwritten": {t.name: False for t in TASKS},
        "keeps-a-child": {t.name: True for t in TASKS},
    }, table(results)
    assert not running(marker), "a process a task's code started outlived its grading"


def test_the_guides_table_names_the_tests_that_try_each_attack_and_the_real_limits():
    from learn_parallel.classroom.notebooks import read

    guide = "\n".join(c.source for c in read(BOOK / "teaching.ipynb").cells)
    table = guide[guide.index("### What a student can and cannot do") :]
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    assert len(rows) >= 10
    here = Path(__file__).parent
    for row in rows:
        cells = [cell.strip() for cell in row.strip()[1:-1].split("|")]
        assert len(cells) == 5, row
        for name in cells[-1].replace("`", "").split(","):
            if name.strip():
                assert (here / name.strip()).exists(), row
    limits = Limits()
    assert f"(`--notebook-timeout`, {limits.seconds} s)" in guide
    gib = limits.memory // 2**30
    assert f"(`--memory`, {gib} GiB" in guide
    assert f"private allocations (`RLIMIT_DATA`, {gib} GiB, `--memory`)" in table
    assert f"a `/tmp` and a `/dev/shm` of {gib} GiB each" in table


def test_the_classroom_files_are_short_and_every_check_module_is_a_chapter():
    from learn_parallel.classroom import CHAPTERS

    for path in sorted(files.PACKAGE.joinpath("classroom").rglob("*.py")):
        assert len(path.read_text().splitlines()) <= 300, f"{path.name}: split the file"
    modules = {p.stem for p in files.PACKAGE.joinpath("classroom", "checks").glob("*.py")}
    assert modules - {"__init__"} == set(CHAPTERS)


@pytest.mark.gpu
@needs_bwrap
def test_on_a_gpu_machine_the_sandboxed_kernel_sees_the_graders_gpus(tmp_path):
    """With two or more GPUs the checks run on them: the sandbox passes the GPUs through
    (``/dev/nvidia*``, ``/sys`` read-only), or the judge would refuse every exercise because
    the kernel saw other devices than the grader."""
    hand_in(tmp_path, {"ada": notebook(solutions())})
    results = grade(tmp_path, BOOK, sandbox="bwrap")
    assert [r.passed for r in results] == [True, True], table(results)
