"""Submissions that try to take points without the work score 0 on what they fake.

Every cheat below replaces the scatter chapter's stub cells (the answers stay the wrong
stubs, or a wrong answer) and tries to make the grader believe otherwise from inside the
student's kernel. One honest, solved submission is graded beside them in the same run:
the grader must still give it full marks. Then the robustness cases: a hang, a crash in a
student cell, a 10 MB print and a syntax error each cost only the exercise they touch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

from learn_parallel.classroom.grade import grade, table  # noqa: E402
from learn_parallel.classroom.notebooks import CHECK, SOLUTION, STUB, exercises, read, tags  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
CHAPTER = "scatter"
WRONG_SIZES = "def chunk_sizes(rows, devices):\n    return [rows // devices] * devices\n"

CHEATS = {
    "patches check": """
import learn_parallel.classroom as c
c.check = lambda exercise_id, *answer: print(f"check passed: {exercise_id}")
""",
    "patches the check modules": """
import learn_parallel.classroom as c
import learn_parallel.classroom.checks.scatter as s
c._load_all()
s.chunk_sizes.__code__ = (lambda fn: "ok").__code__
s.split_batch.__code__ = (lambda fn: "ok").__code__
c._CHECKS.update({k: (lambda *a: "ok") for k in c._CHECKS})
""",
    "prints the pass lines": """
print("check passed: scatter-sizes")
print("check passed: scatter-dict")
""",
    "redefines print": """
import builtins, sys
builtins.print = lambda *a, **k: sys.__stdout__.write("check passed: scatter-sizes\\n")
""",
    "patches torch's comparisons": """
import torch
torch.equal = lambda *a, **k: True
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: True
""",
    "exits in its answer": """
import sys
def chunk_sizes(rows, devices):
    sys.exit(0)
def split_batch(batch, ids):
    raise SystemExit(0)
""",
    "returns objects that equal anything": """
class Yes:
    def __eq__(self, other):
        return True
    def __len__(self):
        return 1
class YesList(list):
    def __eq__(self, other):
        return True
def chunk_sizes(rows, devices):
    return YesList()
def split_batch(batch, ids):
    return [Yes() for _ in ids]
""",
    "interrupts the check from its answer": """
def chunk_sizes(rows, devices):
    raise KeyboardInterrupt
def split_batch(batch, ids):
    raise GeneratorExit
""",
    "writes fake results and transcripts": """
import glob, json, os, torch
fake = [{"submission": "x", "chapter": "scatter", "exercise": e, "passed": True, "message": ""}
        for e in ("scatter-sizes", "scatter-dict")]
for place in (".", "..", "RESULTS_DIR"):
    with open(os.path.join(place, "results.json"), "w") as f:
        json.dump(fake, f)
import learn_parallel.classroom.judge as j
def forged(path):
    def record(exercise_id, *answer):
        torch.save({"args": [{"call": True}], "outcomes": [], "kernel": None}, path)
    return record
j.recorder = forged
""",
    "forges a transcript holding its own object": """
import torch
import learn_parallel.classroom.judge as j
class Yes(list):
    def __eq__(self, other):
        return True
def forged(path):
    def record(exercise_id, *answer):
        outcomes = [{"value": Yes()} for _ in range(5000)]
        torch.save({"args": [{"call": True}], "outcomes": outcomes, "kernel": None}, path)
    return record
j.recorder = forged
""",
    "deletes and edits files": """
import glob, os
from pathlib import Path
for path in glob.glob("*") + glob.glob("../*"):
    if os.path.isfile(path):
        os.remove(path)
for path in Path("SUBMISSIONS_DIR").rglob("*.ipynb"):
    path.write_text("{}")
""",
}


def _notebook(stub_sources: list[str] | None, extra_cell: str = "") -> nbformat.NotebookNode:
    """The scatter handout (setup and exercise cells), its stubs replaced, one cell added last."""
    notebook = nbformat.read(str(BOOK / f"{CHAPTER}.ipynb"), as_version=4)
    setup = next(c for c in notebook.cells if c.cell_type == "code")
    cells = [c for c in notebook.cells if {STUB, CHECK} & set(tags(c))]
    cells = [c for c in cells if SOLUTION not in tags(c)]
    stubs = [c for c in cells if STUB in tags(c)]
    for cell, source in zip(stubs, stub_sources or []):
        if source is not None:
            cell.source = source
    extra = [nbformat.v4.new_code_cell(extra_cell)] if extra_cell else []
    notebook.cells = [setup, *cells, *extra]
    return notebook


def _solutions() -> list[str]:
    return [ex.solutions[0] for ex in exercises(read(BOOK / f"{CHAPTER}.ipynb"))]


def _scores(results) -> dict[str, dict[str, bool]]:
    scores: dict[str, dict[str, bool]] = {}
    for r in results:
        scores.setdefault(Path(r.submission).parent.name, {})[r.exercise] = r.passed
    return scores


def test_every_cheat_scores_zero_and_an_honest_answer_still_passes(tmp_path):
    submissions, results_dir = tmp_path / "submissions", tmp_path / "out"
    results_dir.mkdir()
    for name, cheat in {"honest": "", **CHEATS}.items():
        source = cheat.replace("RESULTS_DIR", str(results_dir))
        source = source.replace("SUBMISSIONS_DIR", str(submissions))
        folder = submissions / name.replace(" ", "-").replace("'", "")
        folder.mkdir(parents=True)
        # The cheats' own stubs stay (a wrong chunk_sizes); the honest student solved both.
        answers = _solutions() if name == "honest" else [WRONG_SIZES, None]
        nbformat.write(_notebook(answers, source), str(folder / f"{CHAPTER}.ipynb"))
    from learn_parallel.classroom.__main__ import main

    outputs = results_dir / "github_output"
    results_file = results_dir / "results.json"
    options = ["--jobs", "2", "--timeout", "60", "--classroom", str(outputs)]
    assert main(["grade", str(submissions), "--json", str(results_file), *options]) == 0
    # GitHub Classroom's step outputs (one repository per student there): one per exercise.
    names = [line.partition("=")[0] for line in outputs.read_text().splitlines()]
    assert sorted(names) == ["scatter-dict", "scatter-sizes"]
    results = json.loads(results_file.read_text())
    scores: dict[str, dict[str, bool]] = {}
    for r in results:
        scores.setdefault(Path(r["submission"]).parent.name, {})[r["exercise"]] = r["passed"]
    assert scores.pop("honest") == {"scatter-sizes": True, "scatter-dict": True}, results
    assert len(scores) == len(CHEATS)
    passed = {cheat: [e for e, ok in got.items() if ok] for cheat, got in scores.items()}
    assert all(not exercises for exercises in passed.values()), passed


def test_a_hang_a_crash_a_flood_and_a_syntax_error_cost_only_their_exercise(tmp_path):
    solved = _solutions()
    # A hang that waits (on input, a lock, a socket); test_classroom.py has one that spins.
    loop = "import time\n\n\ndef chunk_sizes(rows, devices):\n    time.sleep(3600)\n"
    dies = "import os\n\n\ndef split_batch(batch, ids):\n    os._exit(1)\n"
    flood = "print('x' * 10_000_000)\n" + solved[1].replace(
        "    return [", "    print('y' * 10_000_000)\n    return ["
    )
    cases = {
        # (the stub sources, one extra cell): the exercise that must fail
        "hangs": ([loop, solved[1]], ""),
        "crashes-in-a-cell": ([solved[0], solved[1]], "import os\nos._exit(1)\n"),
        "crashes-in-its-answer": ([solved[0], dies], ""),
        "floods": ([solved[0], flood], ""),
        "syntax-error": (["def chunk_sizes(rows, devices) return []\n", solved[1]], ""),
    }
    for name, (stubs, extra) in cases.items():
        (tmp_path / name).mkdir()
        nbformat.write(_notebook(stubs, extra), str(tmp_path / name / f"{CHAPTER}.ipynb"))
    results = grade(tmp_path, reference=BOOK, timeout=15, jobs=2)
    scores = _scores(results)
    report = table(results)
    assert scores["hangs"] == {"scatter-sizes": False, "scatter-dict": True}, report
    # A cell that kills the kernel is left out on restart: both answers still graded.
    assert scores["crashes-in-a-cell"] == {"scatter-sizes": True, "scatter-dict": True}, report
    assert scores["crashes-in-its-answer"] == {"scatter-sizes": True, "scatter-dict": False}
    assert scores["floods"] == {"scatter-sizes": True, "scatter-dict": True}, report
    assert scores["syntax-error"] == {"scatter-sizes": False, "scatter-dict": True}, report
    messages = {(Path(r.submission).parent.name, r.exercise): r.message for r in results}
    assert "Timeout" in messages["hangs", "scatter-sizes"]
    assert "kernel died" in messages["crashes-in-its-answer", "scatter-dict"]
    assert "NameError" in messages["syntax-error", "scatter-sizes"]


def test_the_grader_starts_its_kernels_without_an_encryption_warning(tmp_path):
    """ipykernel warns once per kernel about plain TCP; the grader provisions CurveZMQ keys
    (as the book build does), so a class's log is only the table."""
    import subprocess
    import sys

    notebook = _notebook(_solutions())
    notebook.cells = notebook.cells[:1] + [c for c in notebook.cells if CHECK in tags(c)][:1]
    nbformat.write(notebook, str(tmp_path / f"{CHAPTER}.ipynb"))
    command = [sys.executable, "-m", "learn_parallel.classroom", "grade", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "total: 0/2 passed" in done.stdout  # the stubs were left out: nothing to pass
    assert "WARNING" not in done.stderr and "encryption" not in done.stderr, done.stderr
