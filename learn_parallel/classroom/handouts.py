"""Student copies of the chapters: solutions removed, stubs and checks kept, outputs cleared.

nbconvert does the work: its ``TagRemovePreprocessor`` drops every cell tagged
``solution`` and its ``ClearOutputPreprocessor`` clears outputs and execution counts,
so the handouts are made from the very notebooks the book is built from.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearOutputPreprocessor, TagRemovePreprocessor

from learn_parallel.classroom import files
from learn_parallel.classroom.notebooks import SOLUTION, exercises

STUDENT_README = """# learn-parallel exercises

Each chapter notebook ends with exercises: replace the stub cell with your answer, then run
the check cell below it; it says what is wrong, or `check passed`. The grader runs the same
checks outside your notebook's kernel, on the values your functions return.

    python -m pip install --index-url https://download.pytorch.org/whl/cpu torch
    python -m pip install ./_package jupyterlab
    jupyter lab

Without GPUs the chapters run on simulated devices on the CPU. Every push is graded by
`.github/workflows/autograde.yml`: one point per exercise whose check passes. To see the
same table yourself: `python -m learn_parallel.classroom grade . --reference .`
"""


def student_copy(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without its solutions and outputs."""
    copy = nbformat.from_dict(notebook)
    resources: dict = {}
    remove = TagRemovePreprocessor(remove_cell_tags={SOLUTION}, enabled=True)
    copy, resources = remove.preprocess(copy, resources)
    copy, resources = ClearOutputPreprocessor(enabled=True).preprocess(copy, resources)
    for cell in copy.cells:
        cell.metadata.pop("execution", None)
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


def classroom_workflow(template: str, exercise_ids: list[str]) -> str:
    """The workflow template with one GitHub Classroom runner (one point) per exercise: the
    grade step writes each exercise's result as a step output, the reporter reads them."""
    line = next(line for line in template.splitlines() if line.strip() == "# @REPORT@")
    indent = line[: len(line) - len(line.lstrip())]
    output = "${{{{ steps.grade.outputs['{}'] }}}}"  # the grade step's output of that id
    report = [f'{indent}{i.upper()}_RESULTS: "{output.format(i)}"' for i in exercise_ids]
    text = template.replace(line, "\n".join(report))
    return text.replace('"@RUNNERS@"', ",".join(exercise_ids))
