"""Submissions that try to take points without the work score 0 on what they fake.

Every cheat below replaces the scatter chapter's stub cells (the answers stay the wrong
stubs, or a wrong answer) and tries to make the grader believe otherwise from inside the
student's kernel. One honest, solved submission is graded beside them in the same run:
the grader must still give it full marks. One forgery does pass, as the teaching chapter's
threat table says: a transcript of the right values, computed as the readable checks do.
Then the robustness cases: a hang, a crash in a student cell, a 10 MB print and a syntax
error each cost only the exercise they touch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

from _grading import BOOK, CHAPTER, SANDBOX, notebook, scores, solutions  # noqa: E402

from learn_parallel.classroom.grade import grade, table  # noqa: E402

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

# The grader judges the values the kernel recorded; nothing in a transcript says which code
# computed them. This one holds what each check expects (the hidden cases' too), computed
# the way checks/scatter.py computes it, while the stubs stay wrong: it passes both.
FORGES_THE_RIGHT_VALUES = """
import torch
import learn_parallel as lp
import learn_parallel.classroom.judge as j
from learn_parallel.classroom.plain import encode
from learn_parallel.classroom.tools import machine

def right_values(exercise_id):
    if exercise_id == "scatter-sizes":
        pairs = [(r, d) for r in range(1, 200) for d in range(1, 17)]
        return [[len(c) for c in torch.arange(r).chunk(d)] for r, d in pairs]
    here = machine()
    torch.manual_seed(0)
    values = []
    for rows in (1, 3, 10):
        x, y = torch.randn(rows, 2, device=here.source), torch.arange(rows, device=here.source)
        values.append(lp.scatter({"x": x, "y": y}, here.ids))
    return values

def forged(path):
    def record(exercise_id, *answer):
        outcomes = [{"value": encode(v)} for v in right_values(exercise_id)]
        devices = j._devices_here()
        transcript = {"args": [{"call": True}], "outcomes": outcomes, "kernel": None}
        torch.save({**transcript, "devices": devices}, path)
    return record
j.recorder = forged
"""
FORGERY = "forges the right values"


def test_every_cheat_scores_zero_but_honest_work_and_forged_right_values_pass(tmp_path):
    submissions, results_dir = tmp_path / "submissions", tmp_path / "out"
    results_dir.mkdir()
    for name, cheat in {"honest": "", **CHEATS, FORGERY: FORGES_THE_RIGHT_VALUES}.items():
        source = cheat.replace("RESULTS_DIR", str(results_dir))
        source = source.replace("SUBMISSIONS_DIR", str(submissions))
        folder = submissions / name.replace(" ", "-").replace("'", "")
        folder.mkdir(parents=True)
        # The cheats' own stubs stay (a wrong chunk_sizes); the honest student solved both.
        answers = solutions() if name == "honest" else [WRONG_SIZES, None]
        nbformat.write(notebook(answers, source), str(folder / f"{CHAPTER}.ipynb"))
    from learn_parallel.classroom.__main__ import main

    outputs = results_dir / "github_output"
    results_file = results_dir / "results.json"
    options = ["--jobs", "2", "--timeout", "60", "--classroom", str(outputs), "--sandbox", SANDBOX]
    assert main(["grade", str(submissions), "--json", str(results_file), *options]) == 0
    # GitHub Classroom's step outputs (one repository per student there): one per exercise.
    names = [line.partition("=")[0] for line in outputs.read_text().splitlines()]
    assert sorted(names) == ["scatter-dict", "scatter-sizes"]
    results = json.loads(results_file.read_text())
    graded = scores(results)
    assert graded.pop("honest") == {"scatter-sizes": True, "scatter-dict": True}, results
    # The limit the threat table states: a forged transcript of the right values passes.
    forgery = FORGERY.replace(" ", "-")
    assert graded.pop(forgery) == {"scatter-sizes": True, "scatter-dict": True}, results
    assert len(graded) == len(CHEATS)
    passed = {cheat: [e for e, ok in got.items() if ok] for cheat, got in graded.items()}
    assert all(not exercises for exercises in passed.values()), passed


def test_a_hang_a_crash_a_flood_and_a_syntax_error_cost_only_their_exercise(tmp_path):
    solved = solutions()
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
        nbformat.write(notebook(stubs, extra), str(tmp_path / name / f"{CHAPTER}.ipynb"))
    results = grade(tmp_path, reference=BOOK, timeout=15, jobs=2, sandbox=SANDBOX)
    graded = scores(results)
    report = table(results)
    assert graded["hangs"] == {"scatter-sizes": False, "scatter-dict": True}, report
    # A cell that kills the kernel is left out on restart: both answers still graded.
    assert graded["crashes-in-a-cell"] == {"scatter-sizes": True, "scatter-dict": True}, report
    assert graded["crashes-in-its-answer"] == {"scatter-sizes": True, "scatter-dict": False}
    assert graded["floods"] == {"scatter-sizes": True, "scatter-dict": True}, report
    assert graded["syntax-error"] == {"scatter-sizes": False, "scatter-dict": True}, report
    messages = {(Path(r.submission).parent.name, r.exercise): r.message for r in results}
    assert "Timeout" in messages["hangs", "scatter-sizes"]
    assert "kernel died" in messages["crashes-in-its-answer", "scatter-dict"]
    assert "NameError" in messages["syntax-error", "scatter-sizes"]
