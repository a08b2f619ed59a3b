"""The classroom kit: student copies, the autograder, and the build-it-yourself track.

* handouts: the student copies hold every stub and check cell, no solution code, and no
  text that points at a solution;
* grading: a folder with a correct, a wrong and an empty submission scores 2, 1 and 0
  (hangs, crashes and cheats: test_grading_tamper.py and the other test_grading_* files);
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

from _grading import SANDBOX  # noqa: E402

from learn_parallel.classroom.grade import grade, table  # noqa: E402
from learn_parallel.classroom.handouts import (  # noqa: E402
    MENTIONS_A_SOLUTION,
    make_handouts,
    without_solution_text,
)
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
        # Everything that is not a solution is kept, in order, less its words about solutions.
        kept = [c for c in book.cells if SOLUTION not in tags(c)]
        assert [c.source for c in handout.cells] == [
            without_solution_text(c.source, c.cell_type) for c in kept
        ]


def test_no_handout_points_at_a_solution_it_does_not_have(tmp_path):
    """The chapters say "click the folded line labelled Solution"; a handout has none, so no
    sentence, comment or printed string of any handout may mention a solution."""
    written = make_handouts(BOOK, tmp_path, package=False)
    book_mentions = 0
    for path in written:
        book_mentions += sum(
            bool(MENTIONS_A_SOLUTION.search(c.source))
            for c in read(BOOK / path.name).cells
            if SOLUTION not in tags(c)
        )
        for index, cell in enumerate(read(path).cells):
            for line in cell.source.splitlines():
                assert not MENTIONS_A_SOLUTION.search(line), f"{path.name} cell {index}: {line}"
    assert book_mentions >= 12  # the chapters do mention them: the rewriting was needed


def test_solution_text_is_rewritten_or_dropped_sentence_by_sentence():
    exercises_text = (
        "## Exercises\n\nEach exercise has a stub and a check cell that runs `check` on it. "
        "Under each check\ncell, a folded line labelled **Solution** holds the answer: click "
        "it. The student copies leave the solutions out.\n\nGood luck."
    )
    assert without_solution_text(exercises_text, "markdown") == (
        "## Exercises\n\nEach exercise has a stub and a check cell that runs `check` on it."
        "\n\nGood luck."
    )
    exercise = "Write `f`. The cell after the\nsolution uses it (`perf-efficiency`)."
    assert without_solution_text(exercise, "markdown") == (
        "Write `f`. The cell after the\ncheck uses it (`perf-efficiency`)."
    )
    code = 'solution = 1  # (the solution)\nprint("Write f above (or paste its solution).")\n'
    assert without_solution_text(code, "code") == 'solution = 1  #\nprint("Write f above.")\n'


def test_code_loses_solution_text_in_strings_of_several_lines_but_not_in_f_strings():
    """A docstring of several lines is rewritten like a one-line string; an f-string is left
    as it is on every Python (its braces hold code: ``len(solution)`` is no parenthesis of
    text), and so is every line of code."""
    code = (
        'def f(solution):\n    """Write f\n    (the solution is below)."""\n'
        "    print(f'{len(solution)} rows')  # (not the solution)\n"
    )
    assert without_solution_text(code, "code") == (
        'def f(solution):\n    """Write f."""\n    print(f\'{len(solution)} rows\')  #\n'
    )


def _two_jobs(workflow: dict, runners: list[str]) -> tuple[list, dict]:
    """The checks every Classroom workflow passes: the job that runs student code keeps no
    token in the checkout and has one that can only read, and hands one output per runner
    to the reporter, which runs alone in the job named after the check run it updates.
    Returns the grade job's steps and its outputs."""
    assert workflow["permissions"] == {"contents": "read"}
    grade, report = workflow["jobs"]["grade"], workflow["jobs"]["run-autograding-tests"]
    assert "permissions" not in grade and grade["runs-on"] == "ubuntu-latest"
    checkout = next(s for s in grade["steps"] if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["persist-credentials"] is False
    assert report["needs"] == "grade" and report["permissions"]["checks"] == "write"
    [reporter] = report["steps"]  # nothing of the student's runs in this job
    assert reporter["uses"] == "classroom-resources/autograding-grading-reporter@v1"
    assert reporter["with"]["runners"] == ",".join(runners)
    # The reporter reads <RUNNER>_RESULTS for each runner: the grade job's output of that id.
    assert reporter["env"] == {
        f"{i.upper()}_RESULTS": f"${{{{ needs.grade.outputs['{i}'] }}}}" for i in runners
    }
    assert list(grade["outputs"]) == runners
    return grade["steps"], grade["outputs"]


def test_handouts_for_a_classroom_repository(tmp_path):
    import yaml

    template = yaml.safe_load((ROOT / ".github" / "classroom" / "autograde.yml").read_text())
    assert set(template["jobs"]) == {"grade", "run-autograding-tests"}

    written = make_handouts(BOOK, tmp_path)
    workflow = yaml.safe_load((tmp_path / ".github" / "workflows" / "autograde.yml").read_text())
    ids = [ex.id for path in written for ex in exercises(read(path))]
    steps, outputs = _two_jobs(workflow, ids)
    assert outputs == {i: f"${{{{ steps.grade.outputs['{i}'] }}}}" for i in ids}
    grade_step = next(s for s in steps if s.get("id") == "grade")
    command = " ".join(grade_step["run"].replace("\\\n", " ").split())
    assert command.endswith('--sandbox none --json results.json --classroom "$GITHUB_OUTPUT"')
    guide = " ".join(c.source for c in read(BOOK / "teaching.ipynb").cells)
    quoted = command.removeprefix("python -m learn_parallel.classroom ")
    assert f"`{quoted}`" in " ".join(guide.split()), "the guide quotes the grade step whole"
    assert (tmp_path / "_package" / "learn_parallel" / "classroom" / "checks").is_dir()
    assert (tmp_path / "_package" / "pyproject.toml").exists()
    assert "./_package" in (tmp_path / "README.md").read_text()


def test_a_track_copy_has_a_workflow_with_one_runner_per_task(tmp_path):
    """GitHub Classroom grades a pushed track copy: one command-grader step (one point) per
    chosen task, running that task's tests as `run_task` does, on simulated devices."""
    import yaml

    from learn_parallel.classroom.workflows import pytest_arguments

    chosen = ["task_scatter", "task_worker"]
    make_track(tmp_path, tasks=chosen)
    workflow = yaml.safe_load((tmp_path / ".github" / "workflows" / "autograde.yml").read_text())
    steps, outputs = _two_jobs(workflow, chosen)
    assert outputs == {t: f"${{{{ steps.{t}.outputs.result }}}}" for t in chosen}
    runners = [s for s in steps if s.get("uses", "").endswith("autograding-command-grader@v1")]
    assert [s["id"] for s in runners] == chosen
    for step, task in zip(runners, chosen):
        assert step["with"]["max-score"] == 1 and step["with"]["test-name"] == task
        python = " ".join(["python", *pytest_arguments(task)])
        assert step["with"]["command"] == f"LEARN_PARALLEL_SIMULATE=1 {python}"
    assert ".github/workflows/autograde.yml" in (tmp_path / "TASKS.md").read_text()
    make_track(tmp_path / "reference", tasks=[])  # no task, nothing to grade: no workflow
    assert not (tmp_path / "reference" / ".github").exists()


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
    assert capsys.readouterr().out == "a.ipynb: scatter-sizes: FAILED wrong sizes\n"
    assert main(["result", str(results), "scatter-dict"]) == 1
    with pytest.raises(SystemExit, match="2"):
        main(["grade", str(tmp_path / "missing")])
    assert "does not exist" in capsys.readouterr().err


def test_help_says_what_each_command_and_argument_does(capsys):
    """``--help`` lists every command with a summary; each command's ``--help`` has a
    sentence saying what it does and help for every argument."""
    import argparse
    import re

    from learn_parallel.classroom.__main__ import build_parser, main

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == {"handouts", "grade", "track", "result"}
    with pytest.raises(SystemExit, match="0"):
        main(["--help"])
    top = capsys.readouterr().out
    for summary in commands._choices_actions:  # "  handouts  write student copies ..."
        assert summary.help and re.search(rf"^ +{summary.dest} +{summary.help}$", top, re.M), top
    for name, command in commands.choices.items():
        assert command.description and command.description.endswith("."), name
        arguments = [a for a in command._actions if not isinstance(a, argparse._HelpAction)]
        undocumented = [a.dest for a in arguments if not (a.help or "").strip()]
        assert not undocumented, f"{name}: no help for {undocumented}"
        with pytest.raises(SystemExit, match="0"):
            main([name, "--help"])
        shown = "".join(capsys.readouterr().out.split())  # argparse wraps lines, paths too
        assert "".join(command.description.split()) in shown, name
        for argument in arguments:
            assert "".join(argument.help.split()) in shown, (name, argument.dest)


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
    results = grade(tmp_path, reference=BOOK, timeout=120, sandbox=SANDBOX)
    scores = {}
    for r in results:
        student = Path(r.submission).parent.name
        scores[student] = scores.get(student, 0) + r.passed
    assert scores == {"correct": 2, "wrong": 1, "empty": 0}, table(results)
    failed = [r for r in results if Path(r.submission).parent.name == "wrong" and not r.passed]
    assert [r.exercise for r in failed] == ["scatter-sizes"]
    assert "chunk" in failed[0].message and "not to use" in failed[0].message
    report = table(results)
    assert "FAILED scatter-sizes: CheckFailed: scatter-sizes: your answer calls" in report
    assert "total: 3/6 passed" in report
    # The grader reports what the student saw under the check cell (the message, and the
    # line of their code that made the forbidden call), and nothing more.
    assert failed[0].message == _seen_in_the_notebook("scatter-sizes", wrong["scatter-sizes"])
    assert "(your cell, line " in failed[0].message
    assert "checks/scatter.py" not in report and "Traceback" not in report


def _seen_in_the_notebook(exercise_id: str, answer: str) -> str:
    """What IPython shows under the check cell when ``answer`` is checked, on one line."""
    from IPython.core.inputtransformer2 import TransformerManager

    from learn_parallel.classroom import CheckFailed
    from learn_parallel.classroom.notebooks import namespace

    chapter = read(BOOK / f"{CHAPTER}.ipynb")
    check_cell = next(ex.check for ex in exercises(chapter) if ex.id == exercise_id)
    names = namespace(chapter)
    # As IPython runs a cell (it drops leading blank lines, so line numbers match its own).
    exec(TransformerManager().transform_cell(answer), names)
    with pytest.raises(CheckFailed) as failure:
        exec(check_cell, names)
    return " ".join(line.strip() for line in failure.value._render_traceback_())


def test_a_sample_class_is_handed_in_solved_half_done_and_untouched(tmp_path):
    """The teaching page's class (and its recorded grading run) hands in student copies
    with all, the first or none of the stubs replaced by the solutions."""
    from learn_parallel.classroom.sample_class import hand_in

    students = {"ada": "solved", "bo": "half-done", "cy": "untouched"}
    written = hand_in(BOOK, tmp_path, students, CHAPTER, trimmed=True)
    assert written == [tmp_path / name / f"{CHAPTER}.ipynb" for name in students]
    book = read(BOOK / f"{CHAPTER}.ipynb")
    solutions = [ex.solutions[0] for ex in exercises(book)]
    stubs = [c.source for c in book.cells if STUB in tags(c)]
    for path, solved in zip(written, (2, 1, 0)):
        handed_in = read(path)
        assert [c.source for c in handed_in.cells if STUB in tags(c)] == (
            solutions[:solved] + stubs[solved:]
        )
        assert not any(SOLUTION in tags(c) for c in handed_in.cells)
        assert handed_in.cells[0].cell_type == "code"  # trimmed: the setup cell comes first
    with pytest.raises(ValueError, match="unknown kind 'copied'"):
        hand_in(BOOK, tmp_path, {"dan": "copied"}, CHAPTER)


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
        (chapter, ex.id, ex.text.splitlines()[0].removeprefix("### Exercise: "), 1)
        for chapter in CHAPTERS
        for ex in exercises(read(BOOK / f"{chapter}.ipynb"))
    ]
    assert exercise_table().rows == expected


# The chapter that teaches each track task's function.
TASK_CHAPTERS = {
    "task_scatter": "scatter",
    "task_gather": "gather",
    "task_broadcast": "replicate",
    "task_worker": "parallel_apply",
}
NUMBERS = {6: "Six", 7: "Seven", 8: "Eight", 9: "Nine", 10: "Ten", 11: "Eleven", 12: "Twelve"}


def test_the_course_plan_covers_every_chapter_and_exercise_once_in_order():
    """The teaching page's week-by-week plan is written by hand: it must name every chapter
    with exercises once, in the book's order, each week with exactly its chapters' exercises,
    and each track task in the week of the chapter that teaches its function."""
    from learn_parallel.classroom import CHAPTERS

    cell = next(c for c in read(BOOK / "teaching.ipynb").cells if "## A course plan" in c.source)
    header, rule, *rows = [
        [field.strip() for field in line.strip().strip("|").split("|")]
        for line in cell.source.splitlines()
        if line.startswith("|")
    ]
    assert header == ["week", "chapters", "exercises", "track tasks"] and set(rule) == {"---"}

    def names(field: str) -> list[str]:
        return [name.strip().strip("`") for name in field.split(",") if name.strip()]

    weeks = [int(week) for week, *_ in rows]
    assert weeks == list(range(1, len(rows) + 1))
    assert f"{NUMBERS[len(weeks)]} weeks, one session a week" in cell.source
    assert [chapter for _, chapters, *_ in rows for chapter in names(chapters)] == list(CHAPTERS)
    assert set(TASK_CHAPTERS) == {t.name for t in TASKS}
    planned_tasks = []
    for week, chapters, ids, tasks in rows:
        expected = [ex.id for c in names(chapters) for ex in exercises(read(BOOK / f"{c}.ipynb"))]
        assert names(ids) == expected, f"week {week}"
        for task in names(tasks):
            assert TASK_CHAPTERS[task] in names(chapters), f"week {week}: {task}"
            planned_tasks.append(task)
    assert sorted(planned_tasks) == sorted(TASK_CHAPTERS)


def test_the_guide_names_the_chapters_that_go_on_after_their_exercises():
    """The guide's first paragraph says where each chapter's exercises are: the DDP chapter
    sets them beside its code, the chapters it names go on after their last solution, and
    every other chapter ends with it."""
    import re

    from learn_parallel.classroom import CHAPTERS

    intro = " ".join(read(BOOK / "teaching.ipynb").cells[0].source.split())
    named = re.search(r"; the ([\w, ]+) chapters go on after theirs", intro).group(1)
    assert "The DDP chapter sets each beside the code it asks about" in intro
    go_on = []
    for chapter in CHAPTERS:
        cells = read(BOOK / f"{chapter}.ipynb").cells
        last = max(i for i, c in enumerate(cells) if SOLUTION in tags(c))
        if last < len(cells) - 1 and chapter != "distributed":
            go_on.append(chapter)
    assert re.split(r", | and ", named) == go_on


def html_tables(html: str) -> list[list[list[str]]]:
    """Every ``<table>`` in ``html``, as rows of cell texts (header row included).

    For the built teaching page: ``html_tables(page)`` holds a table whose first row is
    ``["chapter", "exercise", "title", "points"]``."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tables: list[list[list[str]]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.tables.append([])
            elif tag == "tr" and self.tables:
                self.tables[-1].append([])
            elif tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self.cell is not None and self.tables:
                self.tables[-1][-1].append("".join(self.cell).strip())
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    parser = Tables()
    parser.feed(html)
    return parser.tables


def test_the_exercise_table_is_an_html_table_in_jupyter_and_nbconvert():
    """The teaching page shows ``exercise_table()``: an HTML table (a ``text/markdown``
    output would reach the built site as raw ``| chapter |`` text), readable as plain text."""
    from IPython.core.formatters import DisplayFormatter
    from nbconvert import HTMLExporter

    from learn_parallel.classroom import exercise_table

    table = exercise_table()
    data, _ = DisplayFormatter().format(table)
    assert set(data) == {"text/html", "text/plain"}
    header, *rows = html_tables(data["text/html"])[0]
    assert header == ["chapter", "exercise", "title", "points"]
    assert rows == [[c, i, t, str(p)] for c, i, t, p in table.rows]
    plain = data["text/plain"].splitlines()
    assert plain[0].split() == header and len(plain) == 1 + len(rows)
    assert "|" not in data["text/plain"]
    assert all(line.split()[:2] == row[:2] for line, row in zip(plain[1:], rows))

    cell = nbformat.v4.new_code_cell("exercise_table()")
    cell.outputs = [nbformat.v4.new_output("execute_result", data, execution_count=1)]
    page, _ = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[cell]))
    assert [t[0] for t in html_tables(page)] == [header] and "| chapter |" not in page
    teaching = read(BOOK / "teaching.ipynb")
    shown = [c for c in teaching.cells if "exercise_table()" in c.source]
    assert shown and shown[0].source.strip().endswith("exercise_table()")


def test_a_failing_check_names_the_misplaced_piece_in_one_line():
    """A piece left on the wrong device is named in the check's words (not torch's
    device-mixing error), and IPython shows just that line: no frame of the check's file
    (the student's code returned a wrong value; no line of it is to blame)."""
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
    assert "3-row batch, piece 1: 'x' is on sim:0, expected sim:1" in str(failure.value)
    assert failure.value._render_traceback_() == [f"CheckFailed: {failure.value}"]


def test_an_answer_that_raises_is_pointed_at_in_the_students_code():
    from learn_parallel.classroom import CheckFailed, check

    def chunk_sizes(rows, devices):
        return [rows // devices][devices]  # an IndexError on this line

    line = chunk_sizes.__code__.co_firstlineno + 1
    with pytest.raises(CheckFailed) as failure:
        check("scatter-sizes", chunk_sizes)
    assert str(failure.value).startswith("scatter-sizes: your answer raised IndexError: ")
    shown = failure.value._render_traceback_()
    assert shown == [
        f"CheckFailed: {failure.value}",
        f"  (test_classroom.py, line {line}, in chunk_sizes)",
    ]


def test_the_teaching_chapter_names_every_check_that_judges_a_probes_report():
    """The threat model lists the checks whose verdict rests on a report made in the
    student's kernel (`observe`): every such check, and no other."""
    import inspect
    import re

    from learn_parallel.classroom import _CHECKS, _load_all

    _load_all()
    probed = {i for i, check in _CHECKS.items() if "observe(" in inspect.getsource(check)}
    assert len(probed) >= 10
    text = "\n".join(c.source for c in read(BOOK / "teaching.ipynb").cells)
    lead = "a probe runs there (`observe`)"
    start = text.index(lead) + len(lead)
    named = re.findall(r"`([a-z-]+)`", text[start : text.index(". The grader", start)])
    assert sorted(named) == sorted(probed)
