"""The classroom kit: student copies, the autograder, and the build-it-yourself track.

* handouts: the student copies hold every stub and check cell and no solution code;
* grading: a folder with a correct, a wrong and an empty submission scores 2, 1 and 0;
  a hanging and a crashing answer score zero for their exercise only;
* the track: each task's tests fail when that task is stubbed out and pass on the
  reference package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# The kit reads and runs notebooks: a machine without Jupyter (say, a GPU box running
# ``pytest -m gpu``) skips this file instead of failing to collect it.
nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

from learn_parallel.classroom.grade import grade, grade_notebook, table  # noqa: E402
from learn_parallel.classroom.handouts import make_handouts  # noqa: E402
from learn_parallel.classroom.notebooks import (  # noqa: E402
    CHECK,
    SOLUTION,
    STUB,
    exercises,
    read,
    tags,
)
from learn_parallel.classroom.track import TASKS, make_track, run_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
CHAPTER = "scatter"  # a short chapter, for the tests that execute notebooks


def _lines(cells) -> set[str]:
    return {line.strip() for cell in cells for line in cell.source.splitlines() if line.strip()}


def _solution_only_lines(notebook) -> set[str]:
    """Lines of solution code found in no other cell of the chapter."""
    solutions = [c for c in notebook.cells if SOLUTION in tags(c)]
    others = [c for c in notebook.cells if SOLUTION not in tags(c)]
    return {line for line in _lines(solutions) - _lines(others) if not line.startswith("#")}


def test_handouts_keep_stubs_and_checks_and_drop_solutions(tmp_path):
    written = make_handouts(BOOK, tmp_path, package=False)
    chapters = [p for p in sorted(BOOK.glob("*.ipynb")) if exercises(read(p))]
    assert [p.name for p in written] == [p.name for p in chapters]
    for path in chapters:
        book, handout = read(path), read(tmp_path / path.name)
        solution_lines = _solution_only_lines(book)
        assert len(solution_lines) >= 2, f"{path.name}: no solution code found to look for"
        leaked = sorted(solution_lines & _lines(handout.cells))
        assert not leaked, f"{path.name}: solution code in the student copy: {leaked}"
        assert not any(SOLUTION in tags(c) for c in handout.cells)
        nbformat.validate(nbformat.read(str(tmp_path / path.name), as_version=4))
        for tag in (STUB, CHECK):
            want = [c.source for c in book.cells if tag in tags(c)]
            assert [c.source for c in handout.cells if tag in tags(c)] == want, (path.name, tag)
        code = [c for c in handout.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), path.name
        # Everything that is not a solution is kept, in order.
        kept = [c.source for c in book.cells if SOLUTION not in tags(c)]
        assert [c.source for c in handout.cells] == kept


def test_handouts_for_a_classroom_repository(tmp_path):
    import yaml

    template = yaml.safe_load((ROOT / ".github" / "classroom" / "autograde.yml").read_text())
    assert template["jobs"]["run-autograding-tests"]["runs-on"] == "ubuntu-latest"

    written = make_handouts(BOOK, tmp_path)
    workflow = yaml.safe_load((tmp_path / ".github" / "workflows" / "autograde.yml").read_text())
    steps = workflow["jobs"]["run-autograding-tests"]["steps"]
    ids = [ex.id for path in written for ex in exercises(read(path))]
    grade_step = next(s for s in steps if s.get("id") == "grade")
    assert '--classroom "$GITHUB_OUTPUT"' in grade_step["run"]
    reporter = steps[-1]
    assert reporter["uses"].endswith("autograding-grading-reporter@v1")
    assert reporter["with"]["runners"] == ",".join(ids)
    # The reporter reads <RUNNER>_RESULTS for each runner: the grade step's output of that id.
    assert reporter["env"] == {
        f"{i.upper()}_RESULTS": f"${{{{ steps.grade.outputs['{i}'] }}}}" for i in ids
    }
    assert (tmp_path / "_package" / "learn_parallel" / "classroom" / "checks").is_dir()
    assert (tmp_path / "_package" / "pyproject.toml").exists()
    assert "./_package" in (tmp_path / "README.md").read_text()


def test_classroom_results_are_what_the_reporter_reads(tmp_path):
    """One runner per exercise: base64 JSON with a status, a max score and one test whose
    score the reporter adds up (autograding-grading-reporter's format, version 1)."""
    import base64
    import json

    from learn_parallel.classroom.grade import Result, classroom_results

    rows = [
        Result("a.ipynb", "scatter", "scatter-sizes", True),
        Result("a.ipynb", "scatter", "scatter-dict", False, "piece 1 is on sim:0"),
    ]
    decoded = {k: json.loads(base64.b64decode(v)) for k, v in classroom_results(rows).items()}
    assert decoded["scatter-sizes"] == {
        "version": 1,
        "status": "pass",
        "max_score": 1,
        "tests": [{"name": "scatter-sizes", "status": "pass", "message": "", "score": 1}],
    }
    failed = decoded["scatter-dict"]
    assert (failed["status"], failed["tests"][0]["score"]) == ("fail", 0)
    assert failed["tests"][0]["message"] == "piece 1 is on sim:0"


def test_result_command_reports_one_exercise(tmp_path, capsys):
    from learn_parallel.classroom.__main__ import main
    from learn_parallel.classroom.grade import Result, write_json

    results = tmp_path / "results.json"
    write_json([Result("a.ipynb", "scatter", "scatter-sizes", False, "wrong sizes")], results)
    assert main(["result", str(results), "scatter-sizes"]) == 1
    assert "FAILED wrong sizes" in capsys.readouterr().out
    assert main(["result", str(results), "scatter-dict"]) == 1
    with pytest.raises(SystemExit, match="2"):
        main(["grade", str(tmp_path / "missing")])
    assert "does not exist" in capsys.readouterr().err


def _wrong_answers(chapter: str) -> dict:
    path = Path(__file__).resolve().parent / "exercise_wrong_answers" / f"{chapter}.py"
    spec = importlib.util.spec_from_file_location("wrong", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WRONG_ANSWERS


def _submission(answers: dict[str, str], keep_only_exercises: bool = False):
    """The student copy of CHAPTER with the stubs of ``answers``' exercises replaced."""
    handout = nbformat.read(str(BOOK / f"{CHAPTER}.ipynb"), as_version=4)
    handout.cells = [c for c in handout.cells if SOLUTION not in tags(c)]
    stubs = [c for c in handout.cells if STUB in tags(c)]
    ids = [ex.id for ex in exercises(handout)]
    for cell, exercise_id in zip(stubs, ids):
        if exercise_id in answers:
            cell.source = answers[exercise_id]
    if keep_only_exercises:  # the setup cell and the exercise cells: quicker to run
        first = next(c for c in handout.cells if c.cell_type == "code")
        handout.cells = [first] + [c for c in handout.cells if {STUB, CHECK} & set(tags(c))]
    return handout


def _solutions() -> dict[str, str]:
    return {ex.id: ex.solutions[0] for ex in exercises(read(BOOK / f"{CHAPTER}.ipynb"))}


def test_grading_a_correct_a_wrong_and_an_empty_submission(tmp_path, capsys):
    solved = _solutions()
    wrong = dict(
        solved,
        **{
            "scatter-sizes": _wrong_answers(CHAPTER)["scatter-sizes"][
                "calls the forbidden torch.chunk"
            ]
        },
    )
    for student, answers in (("correct", solved), ("wrong", wrong), ("empty", {})):
        (tmp_path / student).mkdir()
        nbformat.write(_submission(answers), str(tmp_path / student / f"{CHAPTER}.ipynb"))
    results = grade(tmp_path, reference=BOOK, timeout=120)
    scores = {}
    for r in results:
        student = Path(r.submission).parent.name
        scores[student] = scores.get(student, 0) + r.passed
    assert scores == {"correct": 2, "wrong": 1, "empty": 0}, table(results)
    failed = [r for r in results if Path(r.submission).parent.name == "wrong" and not r.passed]
    assert [r.exercise for r in failed] == ["scatter-sizes"]
    assert "chunk" in failed[0].message and "not to use" in failed[0].message
    report = table(results)
    assert "FAILED scatter-sizes: AssertionError: scatter-sizes: your answer calls" in report
    assert "total: 3/6 passed" in report


def test_a_hanging_and_a_crashing_answer_score_zero_for_their_exercise_only(tmp_path):
    solved = _solutions()
    hang = "def chunk_sizes(rows, devices):\n    while True:\n        pass\n"
    crash = "import os\n\n\ndef split_batch(batch, ids):\n    os._exit(1)\n"
    reference = exercises(read(BOOK / f"{CHAPTER}.ipynb"))
    for name, answers, bad in (
        ("hangs", dict(solved, **{"scatter-sizes": hang}), "scatter-sizes"),
        ("crashes", dict(solved, **{"scatter-dict": crash}), "scatter-dict"),
    ):
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(_submission(answers, keep_only_exercises=True), str(path))
        results = {r.exercise: r for r in grade_notebook(path, reference, timeout=10)}
        assert not results[bad].passed, name
        assert all(r.passed for e, r in results.items() if e != bad), table(list(results.values()))
        expected = "Timeout" if name == "hangs" else "kernel died"
        assert expected in results[bad].message


def test_each_track_task_fails_when_stubbed_and_passes_on_the_reference(tmp_path):
    reference = tmp_path / "reference"
    make_track(reference, tasks=[])
    every_task = " or ".join(t.name for t in TASKS)
    passed, message = run_task(reference, every_task)
    assert passed, f"the task tests fail on the reference: {message}"
    for task in TASKS:
        stubbed = tmp_path / task.name
        make_track(stubbed, tasks=[task.name])
        passed, message = run_task(stubbed, task.name)
        assert not passed and ("NotImplementedError" in message or "hung" in message), (
            f"{task.name}: {message}"
        )


@pytest.mark.parametrize("task", [t.name for t in TASKS])
def test_track_stubs_leave_the_rest_of_the_module_intact(task, tmp_path):
    make_track(tmp_path, tasks=[task])
    chosen = next(t for t in TASKS if t.name == task)
    stubbed = (tmp_path / "learn_parallel" / chosen.module).read_text()
    original = (ROOT / "learn_parallel" / chosen.module).read_text()
    assert f'raise NotImplementedError("{task}: write {chosen.qualname}")' in stubbed
    removed = set(original.splitlines()) - set(stubbed.splitlines())
    assert removed and len(removed) < 20, sorted(removed)
    compile(stubbed, chosen.module, "exec")


def test_the_exercise_table_matches_the_chapters():
    """The teacher's guide's table comes from the package: every exercise of every chapter,
    in the book's order, with its notebook title and one point."""
    import yaml

    from learn_parallel.classroom import CHAPTERS, exercise_table

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    with_exercises = [f.removeprefix("book/") for f in files]
    with_exercises = [c for c in with_exercises if exercises(read(BOOK / f"{c}.ipynb"))]
    assert list(CHAPTERS) == with_exercises
    expected = [
        f"| {chapter} | `{ex.id}` | {ex.text.splitlines()[0].removeprefix('### Exercise: ')} | 1 |"
        for chapter in CHAPTERS
        for ex in exercises(read(BOOK / f"{chapter}.ipynb"))
    ]
    assert exercise_table().splitlines()[2:] == expected


def test_a_failing_check_names_the_misplaced_piece_in_two_lines():
    """A piece left on the wrong device is named in the check's words (not torch's
    device-mixing error), and IPython shows the message and one line of where, with the
    path relative to the package."""
    from learn_parallel.classroom import CheckFailed, check
    from learn_parallel.devices import Device, device_type

    if device_type() != "sim":
        pytest.skip("written for simulated devices (the stored chapters' default)")

    def split_batch(batch, ids):  # every piece left on the first device
        pieces = {k: v.chunk(len(ids)) for k, v in batch.items()}
        first = Device("sim", 0).torch_device
        return [{k: p[i].to(first) for k, p in pieces.items()} for i in range(len(pieces["x"]))]

    with pytest.raises(CheckFailed) as failure:
        check("scatter-dict", split_batch)
    assert "3 rows, piece 1: 'x' is on sim:0, expected sim:1" in str(failure.value)
    shown = failure.value._render_traceback_()
    assert len(shown) == 2 and shown[0] == f"CheckFailed: {failure.value}"
    assert shown[1].startswith("  (learn_parallel/classroom/checks/scatter.py, line ")
