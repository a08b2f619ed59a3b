"""Find a chapter's exercises in its notebook, by cell tags.

Reading needs only the standard library (a GPU box may have no Jupyter), so the
checks can be tested there too. An exercise is four kinds of cells (see the
teacher's guide, ``book/teaching.ipynb``): ``exercise-text`` (Markdown), ``exercise-stub`` (the code
the student replaces), ``exercise-check`` (``check("id", answer)``) and
``solution``: a Markdown cell whose collapsed ``<details>`` block (summary "Solution")
holds the code in a ``python`` fence, so it stays hidden until clicked in the built site,
JupyterLab, classic Notebook and Colab alike. The id is read from the check cell's call.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TEXT, STUB, CHECK, SOLUTION = "exercise-text", "exercise-stub", "exercise-check", "solution"


@dataclass
class Exercise:
    id: str
    check: str  # the check cell's source
    stubs: list[str] = field(default_factory=list)
    solutions: list[str] = field(default_factory=list)
    text: str = ""


class Node(dict):
    """A notebook or cell read as JSON, with attribute access like nbformat's nodes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _node(value: Any) -> Any:
    if isinstance(value, dict):
        node = Node({k: _node(v) for k, v in value.items()})
        if isinstance(node.get("source"), list):
            node["source"] = "".join(node["source"])
        return node
    if isinstance(value, list):
        return [_node(v) for v in value]
    return value


def tags(cell: dict) -> list[str]:
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


SUMMARY = "<summary>Solution</summary>"


def solution_markdown(code: str) -> str:
    """The solution cell's Markdown: ``code`` in a collapsed block labelled *Solution*."""
    fence = "````" if "```" in code else "```"
    return f"<details>\n{SUMMARY}\n\n{fence}python\n{code.strip()}\n{fence}\n\n</details>"


def solution_code(source: str) -> str:
    """The code inside a solution cell (the fenced block of `solution_markdown`)."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip("`") == "python"), None)
    if start is None:
        raise ValueError(f"No ```python block in this solution cell:\n{source}")
    fence = lines[start][: len(lines[start]) - len("python")]
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == fence)
    return "\n".join(lines[start + 1 : end]) + "\n"


def read(path: str | Path) -> Node:
    """A notebook file (nbformat 4) with every cell's source joined into one string."""
    return _node(json.loads(Path(path).read_text(encoding="utf-8")))


def exercises(notebook: Any) -> list[Exercise]:
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
            code = cell.source if cell.cell_type == "code" else solution_code(cell.source)
            found[-1].solutions.append(code)
    return found


def setup_source(notebook: Any) -> str:
    """The chapter's first code cell: the imports and devices every exercise may use."""
    return next(c.source for c in notebook.cells if c.cell_type == "code")


class _NoShell:
    """Stands in for IPython outside a kernel: a setup cell's magics (``%pip``,
    ``%matplotlib``) prepare a notebook session and have nothing to do here."""

    def run_line_magic(self, *args: object, **kwargs: object) -> None:
        return None

    run_cell_magic = system = run_line_magic


def namespace(notebook: Any) -> dict:
    """A fresh namespace as the notebook's setup cell leaves it (its printing discarded),
    with ``check`` imported, ready to run an exercise's cells in."""
    import contextlib
    import io

    from learn_parallel.classroom import check

    names: dict = {"__name__": "__exercise__", "check": check, "get_ipython": _NoShell}
    source = setup_source(notebook)
    try:  # turn magics into calls of get_ipython(), if IPython is here
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:
        pass
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, "<setup cell>", "exec"), names)
    return names
