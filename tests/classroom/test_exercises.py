"""Every exercise check fails on its stub, passes on its solution, and rejects every
known wrong answer.

The stub, check and solution come from the chapter notebooks' tagged cells (one
source); the wrong answers from ``tests/classroom/exercise_wrong_answers/<chapter>.py``. Each
runs in a namespace made by the chapter's first (setup) code cell, as in the notebook.
New chapters and new wrong-answer modules are picked up automatically.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from functools import cache
from pathlib import Path

import pytest

from learn_parallel.classroom import exercises as registered_exercises
from learn_parallel.classroom.notebooks import exercises, namespace, read
from learn_parallel.devices import device_count, device_type

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
WRONG = Path(__file__).resolve().parent / "exercise_wrong_answers"


def _chapters() -> list[Path]:
    return sorted(p for p in BOOK.glob("*.ipynb") if exercises(read(p)))


@cache
def _setup_namespace(chapter: str, kind: str) -> dict:
    return namespace(read(BOOK / f"{chapter}.ipynb"))


def _wrong_answers(chapter: str) -> dict[str, dict[str, str]]:
    path = WRONG / f"{chapter}.py"
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"wrong_{chapter}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WRONG_ANSWERS


def _cases() -> list:
    cases = []
    for path in _chapters():
        wrong = _wrong_answers(path.stem)
        for ex in exercises(read(path)):
            cases.append(pytest.param(path.stem, ex, "stub", None, id=f"{ex.id}-stub"))
            cases.append(pytest.param(path.stem, ex, "solution", None, id=f"{ex.id}-solution"))
            for label, answer in wrong.get(ex.id, {}).items():
                cases.append(pytest.param(path.stem, ex, "wrong", answer, id=f"{ex.id}-{label}"))
    return cases


def _run(chapter: str, cells: list[str]) -> str:
    names = dict(
        _setup_namespace(chapter, device_type())
    )  # `check` included, as after the check cell
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for source in cells:
            exec(compile(source, f"<{chapter} exercise cell>", "exec"), names)
    return out.getvalue()


@pytest.mark.parametrize(("chapter", "ex", "kind", "wrong_source"), _cases())
def test_check(chapter, ex, kind, wrong_source):
    run_case(chapter, ex, kind, wrong_source)


def run_case(chapter, ex, kind, wrong_source):
    """Stub and wrong answers fail the check with its message; the solution passes."""
    if kind == "solution":
        # The solution cell ends with the check; run the check cell once more, too.
        printed = _run(chapter, [*ex.stubs, *ex.solutions, ex.check])
        assert printed.count(f"check passed: {ex.id}") == 2, printed
        return
    if isinstance(wrong_source, dict):  # wrong only where there are enough devices
        if device_count() < wrong_source["min_devices"]:
            pytest.skip(
                f"right on {device_count()} devices; wrong from {wrong_source['min_devices']}"
            )
        wrong_source = wrong_source["source"]
    answer = ex.stubs if kind == "stub" else [wrong_source]
    with pytest.raises(AssertionError, match=f"^{ex.id}: ") as failure:
        _run(chapter, [*answer, ex.check])
    assert str(failure.value).strip() != f"{ex.id}:", "a check must say what is wrong"


def test_every_exercise_is_complete_and_has_wrong_answers():
    """Each chapter has two exercises or more; each has text, stub, check, solution,
    a registered check and at least one wrong answer; every registered check is used."""
    in_notebooks = set()
    for path in _chapters():
        found = exercises(read(path))
        assert len(found) >= 2, f"{path.name}: fewer than two exercises"
        wrong = _wrong_answers(path.stem)
        for ex in found:
            in_notebooks.add(ex.id)
            assert ex.text.startswith("### Exercise: ") and f"`{ex.id}`" in ex.text, ex.id
            assert ex.stubs and ex.solutions, f"{ex.id}: needs a stub and a solution cell"
            assert wrong.get(ex.id), f"{ex.id}: list a wrong answer in {WRONG.name}/{path.stem}.py"
            last_line = ex.solutions[-1].strip().splitlines()[-1]
            assert last_line == ex.check.strip().splitlines()[-1], (
                f"{ex.id}: the solution cell must end with the check cell's call"
            )
    assert in_notebooks == set(registered_exercises()), (
        "checks without an exercise, or exercises without a check: "
        f"{sorted(in_notebooks ^ set(registered_exercises()))}"
    )
