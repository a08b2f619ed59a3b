"""The "build it yourself" track: a student copy of the package with the core bodies
to write, per-task tests (``pytest -m task_scatter``) that the autograder runs, and a
GitHub Classroom workflow that runs them too (`workflows`).

The reference package stays the source of truth and carries no markers: each task
names a function by file and qualified name, and the generator replaces that
function's body (after its docstring) with ``raise NotImplementedError``. The task
tests come from the repository (a wheel carries a copy, see `files`) and run unchanged
against the reference (where they pass) and the student copy (where they pass once the
task is done). The teaching chapter (``book/teaching.ipynb``) makes a track copy.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from learn_parallel.classroom import files
from learn_parallel.classroom.workflows import pytest_arguments, track_workflow


@dataclass(frozen=True)
class Task:
    name: str  # also the pytest marker
    module: str  # file inside learn_parallel/
    qualname: str
    hint: str


TASKS = [
    Task(
        "task_scatter",
        "scatter_gather.py",
        "Scatter.forward",
        "split `tensor` along `dim` (chunk, or split by `sizes`) and send piece i to "
        "devices[i] (a torch.device); remember what backward needs in ctx",
    ),
    Task(
        "task_gather",
        "scatter_gather.py",
        "Gather.forward",
        "copy every tensor to `target` and concatenate them along `dim`; remember the "
        "devices and sizes backward needs in ctx",
    ),
    Task(
        "task_broadcast",
        "replicate.py",
        "Broadcast.forward",
        "every tensor on each device (copy_to_devices: copies, the first device's the tensors "
        "themselves), flattened device by "
        "device; copies of tensors that need no gradient are marked non-differentiable",
    ),
    Task(
        "task_worker",
        "parallel_apply.py",
        "_Job.execute",
        "run self.call() and keep its result, or the exception it raised (never raise: "
        "the worker thread would die), with traceback.clear_frames on its traceback so "
        "the failed call's locals are freed; always drop self.call, whatever happens",
    ),
]


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = tree.body
    node = None
    for part in qualname.split("."):
        node = next(
            n for n in scope if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == part
        )
        scope = node.body
    assert isinstance(node, ast.FunctionDef)
    return node


def stub_source(source: str, task: Task) -> str:
    """``source`` with the body of ``task``'s function replaced by a NotImplementedError."""
    function = _function(ast.parse(source), task.qualname)
    body = function.body
    has_doc = isinstance(body[0], ast.Expr) and isinstance(
        getattr(body[0], "value", None), ast.Constant
    )
    first = body[1] if has_doc and len(body) > 1 else body[0]
    lines = source.splitlines(keepends=True)
    start = first.lineno - 1
    # Comments just above the first statement belong to the body too.
    indent = " " * first.col_offset
    while start > function.body[0].end_lineno and lines[start - 1].strip().startswith("#"):
        start -= 1
    end = body[-1].end_lineno
    hint = textwrap.wrap(f"{task.name}: {task.hint}.", 88 - len(indent))
    stub = "".join(f"{indent}# {line}\n" for line in hint) + (
        f'{indent}raise NotImplementedError("{task.name}: write {task.qualname}")\n'
    )
    return "".join(lines[:start]) + stub + "".join(lines[end:])


def make_track(out: Path, tasks: list[str] | None = None) -> list[Task]:
    """Write the student copy of the package, the task tests, a pytest config and (if any
    task is chosen) a GitHub Classroom workflow with one runner per task to ``out``."""
    chosen = [t for t in TASKS if tasks is None or t.name in tasks]
    if tasks is not None and len(chosen) != len(set(tasks)):
        unknown = sorted(set(tasks) - {t.name for t in TASKS})
        raise ValueError(f"Unknown tasks {unknown}; choose from {[t.name for t in TASKS]}.")
    files.track_tests()  # first: outside a clone it may be missing
    out.mkdir(parents=True, exist_ok=True)
    target = out / "learn_parallel"
    ignore = shutil.ignore_patterns("__pycache__", files.SHIPPED.name)
    shutil.copytree(files.PACKAGE, target, dirs_exist_ok=True, ignore=ignore)
    for task in chosen:
        path = target / task.module
        path.write_text(stub_source(path.read_text(), task))
    write_tests(out)
    lines = [
        f"- `{t.name}`: `{t.qualname}` in `learn_parallel/{t.module}`: {t.hint}." for t in chosen
    ]
    (out / "TASKS.md").write_text(
        "# Build DataParallel yourself\n\n"
        "Each task is a function body that raises `NotImplementedError`. Write it, then run "
        "its tests with `python -m pytest -m <task>` (all of them: `python -m pytest`). "
        "In a GitHub Classroom repository every push is graded by "
        "`.github/workflows/autograde.yml`: one point per task whose tests pass.\n\n"
        + "\n".join(lines)
        + "\n"
    )
    if chosen:
        workflows = out / ".github" / "workflows"
        workflows.mkdir(parents=True, exist_ok=True)
        (workflows / "autograde.yml").write_text(track_workflow([t.name for t in chosen]))
    return chosen


def write_tests(out: Path) -> None:
    """The teacher's task tests and pytest settings, into a track copy at ``out`` (the
    grader writes them over whatever a student's copy holds)."""
    (out / "tests").mkdir(exist_ok=True)
    (out / "tests" / "test_tasks.py").write_bytes(files.track_tests().read_bytes())
    markers = "\n".join(f"    {t.name}: {t.hint}" for t in TASKS)
    (out / "pytest.ini").write_text(
        "[pytest]\n"
        "# The package in this folder (with your code) comes before any installed copy.\n"
        "pythonpath = .\n"
        "testpaths = tests\n"
        "addopts = -q --strict-markers\n"
        f"markers =\n{markers}\n"
    )


def run_task(folder: Path, task: str, timeout: int = 300) -> tuple[bool, str]:
    """Run one task's tests in ``folder`` (a track copy) on simulated devices; return
    (passed, output tail). What the tests leave running is ended with them."""
    env = dict(os.environ, LEARN_PARALLEL_SIMULATE="1")
    env.pop("LEARN_PARALLEL_SIMULATED_DEVICES", None)
    command = [sys.executable, *pytest_arguments(task)]
    with tempfile.TemporaryFile() as log:  # a file, not a pipe a leftover process could hold
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            status = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = None
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.seek(0)
        output = log.read().decode(errors="replace").strip().splitlines()
    if status is None:
        return False, f"the tests ran for more than {timeout} s"
    failures = [line for line in output if line.startswith(("E ", "FAILED"))]
    summary = failures[:3] + output[-1:] if failures else output[-1:]
    return status == 0, " | ".join(line.strip() for line in summary)
