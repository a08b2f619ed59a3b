"""Find a chapter's exercises in its notebook, by cell tags.

An exercise is four kinds of cells (see the exercise format in the README's
"Teaching with it"): ``exercise-text`` (Markdown), ``exercise-stub`` (the code
the student replaces), ``exercise-check`` (``check("id", answer)``) and
``solution``. The id is read from the check cell's call.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

TEXT, STUB, CHECK, SOLUTION = "exercise-text", "exercise-stub", "exercise-check", "solution"


@dataclass
class Exercise:
    id: str
    check: str  # the check cell's source
    stubs: list[str] = field(default_factory=list)
    solutions: list[str] = field(default_factory=list)
    text: str = ""


def tags(cell: nbformat.NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def check_call_id(source: str) -> str:
    """The exercise id in a check cell: the first argument of its ``check(...)`` call."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "check"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            return node.args[0].value
    raise ValueError(f"No check('<id>', ...) call in this check cell:\n{source}")


def read(path: str | Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def exercises(notebook: nbformat.NotebookNode) -> list[Exercise]:
    """The notebook's exercises in order. Stub, text and solution cells belong to the
    exercise whose check cell is nearest before (solutions) or after (text, stubs)."""
    found: list[Exercise] = []
    pending_text, pending_stubs = "", []
    for cell in notebook.cells:
        cell_tags = tags(cell)
        if TEXT in cell_tags:
            pending_text = cell.source
        elif STUB in cell_tags:
            pending_stubs.append(cell.source)
        elif CHECK in cell_tags:
            found.append(
                Exercise(check_call_id(cell.source), cell.source, pending_stubs, [], pending_text)
            )
            pending_text, pending_stubs = "", []
        elif SOLUTION in cell_tags:
            if not found:
                raise ValueError("A solution cell comes before any check cell.")
            found[-1].solutions.append(cell.source)
    return found


def setup_source(notebook: nbformat.NotebookNode) -> str:
    """The chapter's first code cell: the imports and devices every exercise may use."""
    return next(c.source for c in notebook.cells if c.cell_type == "code")


def namespace(notebook: nbformat.NotebookNode) -> dict:
    """A fresh namespace as the notebook's setup cell leaves it (its printing discarded),
    with ``check`` imported, ready to run an exercise's cells in."""
    import contextlib
    import io

    from learn_parallel.classroom import check

    names: dict = {"__name__": "__exercise__", "check": check}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(setup_source(notebook), "<setup cell>", "exec"), names)
    return names
