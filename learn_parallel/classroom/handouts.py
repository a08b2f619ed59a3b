"""Student copies of the chapters: solutions removed, stubs and checks kept, outputs cleared.

nbconvert does the work: its ``TagRemovePreprocessor`` drops every cell tagged
``solution`` and its ``ClearOutputPreprocessor`` clears outputs and execution counts,
so the handouts are made from the very notebooks the book is built from. The chapters'
text about the solutions ("click the folded line labelled Solution") would be false in a
copy without them: `without_solution_text` rewrites or drops it.
"""

from __future__ import annotations

import io
import re
import shutil
import tokenize
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearOutputPreprocessor, TagRemovePreprocessor

from learn_parallel.classroom import files
from learn_parallel.classroom.notebooks import SOLUTION, exercises
from learn_parallel.classroom.workflows import classroom_workflow

STUDENT_README = """# learn-parallel exercises

Each chapter notebook has exercises, most of them at its end: replace the stub cell with your
answer, then run the check cell below it; it says what is wrong, or `check passed`. The
grader runs the same checks outside your notebook's kernel, on the values your functions
return.

    python -m pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.*"
    python -m pip install "./_package[plots]" jupyterlab
    jupyter lab

Without GPUs the chapters run on simulated devices on the CPU. Every push is graded by
`.github/workflows/autograde.yml`: one point per exercise whose check passes. To see the
same table yourself: `python -m learn_parallel.classroom grade . --reference . --sandbox none`
(your own code, on your own machine: no sandbox needed). It grades on Linux and, untested,
on macOS; on Windows, in WSL.
"""


# What a chapter says about a solution that a handout no longer has: a parenthesis that
# mentions it goes, "after the solution" is after the check (the solution came right after
# it), and any other sentence that mentions a solution is dropped.
_PARENTHESIS = re.compile(r"\s*\([^()]*\bsolutions?\b[^()]*\)", re.IGNORECASE)
_AFTER_THE_SOLUTION = re.compile(r"\bafter(\s+)the(\s+)solution\b")
MENTIONS_A_SOLUTION = re.compile(r"\bsolutions?\b", re.IGNORECASE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])(\s+)(?=[A-Z*`_(\[])")


def _rewritten(text: str) -> str:
    text = _PARENTHESIS.sub("", text)
    return _AFTER_THE_SOLUTION.sub(r"after\1the\2check", text)


def _markdown_without_solutions(text: str) -> str:
    paragraphs = []
    for paragraph in _rewritten(text).split("\n\n"):
        # re.split keeps each break: [sentence, break, sentence, break, ...]
        parts = _SENTENCE_BREAK.split(paragraph)
        kept = ""
        for i in range(0, len(parts), 2):
            if not MENTIONS_A_SOLUTION.search(parts[i]):
                kept += (parts[i - 1] if kept else "") + parts[i]
        if kept.strip():
            paragraphs.append(kept)
    return "\n\n".join(paragraphs)


def _is_text(token: tokenize.TokenInfo) -> bool:
    """A comment, or a string literal other than an f-string (whose braces hold code; on
    Python 3.12 and later an f-string is not one STRING token but several)."""
    if token.type == tokenize.COMMENT:
        return True
    prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))]
    return token.type == tokenize.STRING and "f" not in prefix.lower()


def _code_without_solutions(source: str) -> str:
    """Rewrite only the comments and strings of ``source``, on one line or several, f-strings
    excepted (its code stays as it is)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    offsets = [0]  # where each line starts, lines as tokenize numbers them (split at "\n")
    for line in io.StringIO(source).readlines():
        offsets.append(offsets[-1] + len(line))
    for token in reversed(tokens):  # from the end: earlier tokens' offsets stay right
        if _is_text(token):
            start = offsets[token.start[0] - 1] + token.start[1]
            end = offsets[token.end[0] - 1] + token.end[1]
            source = source[:start] + _rewritten(token.string) + source[end:]
    return source


def without_solution_text(source: str, cell_type: str) -> str:
    """A non-solution cell's source as a handout shows it: nothing in it points at a
    solution (a Markdown cell loses such sentences, a code cell such parentheses)."""
    if cell_type == "markdown":
        return _markdown_without_solutions(source)
    return _code_without_solutions(source)


def student_copy(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without its solutions, its text about them, and its outputs."""
    copy = nbformat.from_dict(notebook)
    resources: dict = {}
    remove = TagRemovePreprocessor(remove_cell_tags={SOLUTION}, enabled=True)
    copy, resources = remove.preprocess(copy, resources)
    copy, resources = ClearOutputPreprocessor(enabled=True).preprocess(copy, resources)
    for cell in copy.cells:
        cell.metadata.pop("execution", None)
        if MENTIONS_A_SOLUTION.search(cell.source):
            cell.source = without_solution_text(cell.source, cell.cell_type)
    copy.cells = [c for c in copy.cells if c.source.strip() or c.cell_type == "code"]
    return copy


def make_handouts(book: Path, out: Path, package: bool = True) -> list[Path]:
    """Write a student copy of every chapter of ``book`` that has exercises into ``out``.

    With ``package``, also copy the package's source (``_package/``) and the GitHub
    Classroom workflow (``.github/workflows/autograde.yml``), so ``out`` can be pushed
    as an assignment repository that grades itself.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(Path(book).glob("*.ipynb")):
        notebook = nbformat.read(str(path), as_version=4)
        if not exercises(notebook):
            continue
        target = out / path.name
        nbformat.write(student_copy(notebook), str(target))
        written.append(target)
    if not written:
        raise ValueError(f"No notebook with exercises in {book}.")
    if package:
        shutil.copytree(
            files.PACKAGE,
            out / "_package" / "learn_parallel",
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", files.SHIPPED.name),
        )
        shutil.copy(files.pyproject(), out / "_package" / "pyproject.toml")
        (out / "_package" / "README.md").write_text(
            "The learn-parallel package these chapters use (installed by the grading workflow).\n"
        )
        (out / "README.md").write_text(STUDENT_README)
        workflow = files.workflow()
        if workflow.exists():
            ids = [e.id for p in written for e in exercises(nbformat.read(str(p), as_version=4))]
            workflows = out / ".github" / "workflows"
            workflows.mkdir(parents=True, exist_ok=True)
            (workflows / workflow.name).write_text(classroom_workflow(workflow.read_text(), ids))
    return written
