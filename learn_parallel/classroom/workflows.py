"""The GitHub Classroom workflows: the handouts' (from the repository's template) and the track's.

Both have two jobs. ``grade`` runs the student's code (no sandbox: the runner is the
student's own) with a token that can only read the repository, which checkout does not keep
in ``.git/config``, and passes one result per exercise or task on as the job's outputs.
``run-autograding-tests`` runs no student code: it hands those results to GitHub Classroom's
reporter, which adds up the points and writes them into the check run of that job's name.
"""

from __future__ import annotations

import json

TRACK_TEMPLATE = """\
# GitHub Classroom autograding for the build-it-yourself track, written by
# `python -m learn_parallel.classroom track OUT`. On every student push the `grade` job
# installs the CPU build of torch and pytest, and runs each task's tests from tests/ on
# simulated devices, one runner (one point) per task; the run-autograding-tests job, which
# runs no student code, reports the points to GitHub Classroom.
name: Autograding Tests
"on":
  - push
  - repository_dispatch
permissions:
  contents: read
jobs:
  grade:
    runs-on: ubuntu-latest
    timeout-minutes: 20
    if: github.actor != 'github-classroom[bot]'
    outputs:
      # @OUTPUTS@
    steps:
      - name: Checkout code
        uses: actions/checkout@v4
        with:
          persist-credentials: false
      - name: Set up Python
        uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - name: Install what the tests need (CPU torch, pytest)
        env:
          PIP_RETRIES: "0"
        run: |
          python -m pip install --index-url https://download.pytorch.org/whl/cpu torch
          python -m pip install pytest
      # @STEPS@
  run-autograding-tests:
    needs: grade
    runs-on: ubuntu-latest
    timeout-minutes: 5
    permissions:
      checks: write
      actions: read
      contents: read
    steps:
      - name: Autograding Reporter
        uses: classroom-resources/autograding-grading-reporter@v1
        env:
          # @REPORT@
        with:
          runners: "@RUNNERS@"
"""


def pytest_arguments(task: str) -> list[str]:
    """Python's arguments that run one task's tests, as `track.run_task` and the track's GitHub
    Classroom workflow run them (nbval, where installed, would import Jupyter's stack into
    every run, seconds, for tests that hold no notebook)."""
    return ["-m", "pytest", "-m", task, "-x", "-p", "no:cacheprovider", "-p", "no:nbval"]


def _at(template: str, marker: str, lines: list[str]) -> str:
    """``template`` with the line ``# marker`` replaced by ``lines``, at its indentation."""
    line = next(line for line in template.splitlines() if line.strip() == f"# {marker}")
    indent = line[: len(line) - len(line.lstrip())]
    return template.replace(line, "\n".join(indent + text for text in lines))


def _with_runners(template: str, results: dict[str, str]) -> str:
    """``template`` with one GitHub Classroom runner per entry of ``results`` (runner id:
    the grade job's expression for its result): a job output, and the reporter's
    ``<RUNNER>_RESULTS`` variable (the reporter reads that name) and ``runners``."""
    outputs = [f'{i}: "${{{{ {result} }}}}"' for i, result in results.items()]
    report = [f"{i.upper()}_RESULTS: \"${{{{ needs.grade.outputs['{i}'] }}}}\"" for i in results]
    text = _at(_at(template, "@OUTPUTS@", outputs), "@REPORT@", report)
    return text.replace('"@RUNNERS@"', ",".join(results))


def classroom_workflow(template: str, exercise_ids: list[str]) -> str:
    """The handouts' workflow: the template with one runner (one point) per exercise, whose
    result the grade step writes as its output of that id."""
    return _with_runners(template, {i: f"steps.grade.outputs['{i}']" for i in exercise_ids})


def track_workflow(tasks: list[str]) -> str:
    """The track's workflow: one runner (one point) per task, GitHub Classroom's command
    grader running that task's tests as `track.run_task` does (it passes a command only
    PATH and HOME of the environment: the command sets the simulated devices itself)."""
    steps = []
    for task in tasks:
        command = " ".join(["LEARN_PARALLEL_SIMULATE=1 python", *pytest_arguments(task)])
        steps += [f"- name: Tests of {task}", f"  id: {task}"]
        steps += ["  uses: classroom-resources/autograding-command-grader@v1", "  with:"]
        steps += [f"    test-name: {task}", f"    command: {json.dumps(command)}"]
        steps += ["    timeout: 5", "    max-score: 1"]
    text = _at(TRACK_TEMPLATE, "@STEPS@", steps)
    return _with_runners(text, {t: f"steps.{t}.outputs.result" for t in tasks})
