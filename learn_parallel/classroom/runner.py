"""One submission's job, run inside its sandbox: a notebook's cells, or a track copy's tests.

The grader writes the job folder (``job.json`` and the cells to run) and starts this file by
its path, so it imports neither torch nor the package. It sets the job's memory and process
limits, runs the work, and writes what happened under ``out/``; the grader reads that back as
untrusted data. A cell that runs past its time limit or kills its kernel is left out when
the kernel restarts (a check that does so fails with that reason), so one cell that ignores
interrupts cannot make every later cell wait. The runner is the subreaper of what it starts:
a process that double-forks away from the kernel is still ended with the job.
"""

import contextlib
import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # run by path: the classroom's files are not top-level modules

# nbformat imports jsonschema, which imports rfc3987_syntax (if installed, as jupyterlab's
# dependencies install it) for a URI format no notebook here uses; it builds a grammar on
# import that costs 1.5 s of CPU per job. Refused: jsonschema then skips that format.
sys.modules.setdefault("rfc3987_syntax", None)
_CHILD_SUBREAPER = 36  # prctl(PR_SET_CHILD_SUBREAPER): orphans of the job come back here
_PARENT_DEATH_SIGNAL = 1  # prctl(PR_SET_PDEATHSIG)


def _limit(limits: dict) -> None:
    memory, processes = limits.get("memory"), limits.get("processes")
    if memory:
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(_PARENT_DEATH_SIGNAL, signal.SIGTERM, 0, 0, 0)  # ends with the grader
    signal.signal(signal.SIGTERM, _stop)


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
        for child in children:
            found += [child, *_descendants(child)]
    return found


def _end_descendants() -> None:
    for _ in range(3):  # a process may fork while the others are being ended
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _stop(*_) -> None:
    """The grader died (or the job was told to stop): end everything the job started."""
    _end_descendants()
    os._exit(1)


def _save(path: Path, data: object) -> None:
    temporary = path.with_suffix(".partial")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def _error(cell) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename', '')}: {output.get('evalue', '')}".strip()
    return "the check did not run"


def _client_class():
    from nbclient import NotebookClient

    class Client(NotebookClient):
        """Keeps only error outputs: a cell that prints gigabytes costs no memory here."""

        def output(self, outs, msg, display_id, cell_index):
            if msg["msg_type"] != "error":
                return None
            return super().output(outs, msg, display_id, cell_index)

    return Client


def _encrypted_channel() -> None:
    """Kernels on an encrypted channel where pyzmq can (as the book build does), so ipykernel
    has no unencrypted-TCP warning to print."""
    import zmq
    from jupyter_client.manager import KernelManager

    trait = KernelManager.class_traits().get("transport_encryption")
    if trait is not None and zmq.has("curve"):
        trait.default_value = "auto"


def run_notebook(job: Path, spec: dict) -> None:
    """Run the student's cells, then one grading cell per exercise, restarting the kernel
    without any cell that ran over time or killed it; ``out/messages.json`` says why each
    exercise that left no transcript has none."""
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    _encrypted_channel()
    cells = nbformat.read(str(job / "cells.ipynb"), as_version=4).cells
    first_check, timeout = spec["student_cells"], spec["timeout"]
    messages: dict[str, str] = {}
    skipped: set[int] = set()
    Client = _client_class()
    for attempt in range(len(cells) + 1):  # each restart leaves one more cell out
        run = [
            i
            for i in range(len(cells))
            if i not in skipped and (i < first_check or str(i - first_check) not in messages)
        ]
        notebook = nbformat.v4.new_notebook(cells=[cells[i] for i in run])
        workdir = job / "work" / str(attempt)  # the student's code runs here
        workdir.mkdir(parents=True)
        client = Client(
            notebook,
            timeout=timeout,
            allow_errors=True,
            interrupt_on_timeout=False,
            shutdown_kernel="immediate",
            kernel_name=spec["kernel"],
            resources={"metadata": {"path": str(workdir)}},
        )
        stopped = None
        try:
            with client.setup_kernel(env=dict(os.environ)):
                for position, index in enumerate(run):
                    cell = notebook.cells[position]
                    if cell.cell_type != "code":
                        continue
                    try:
                        client.execute_cell(cell, position)
                    except (CellTimeoutError, DeadKernelError) as error:
                        stopped = (index, isinstance(error, CellTimeoutError))
                        break
                    exercise = index - first_check
                    if exercise >= 0 and not (job / "out" / f"{exercise}.pt").exists():
                        messages[str(exercise)] = _error(cell)
                        _save(job / "out" / "messages.json", messages)
        except Exception as error:  # the kernel did not start, or its channel broke
            reason = f"the kernel failed: {type(error).__name__}: {error}"
            for index in run:
                if index >= first_check:
                    messages.setdefault(str(index - first_check), reason)
            _save(job / "out" / "messages.json", messages)
            return
        _end_descendants()  # what the cells left running (the kernel is gone already)
        if stopped is None:
            return
        index, timed_out = stopped
        if index < first_check:
            skipped.add(index)
            continue
        message = (
            f"Timeout: the check ran for more than {timeout} s"
            if timed_out
            else "the kernel died in the check"
        )
        messages[str(index - first_check)] = message
        _save(job / "out" / "messages.json", messages)


def run_tests(job: Path, spec: dict) -> None:
    """Run the teacher's tests of every task (never the student's file) in one pytest
    process; ``out/tasks.json`` holds each task's verdict from pytest's report: passed if
    at least one of its tests ran and none failed. An answer that ends the process early
    leaves no report, and fails every task."""
    env = dict(os.environ, LEARN_PARALLEL_SIMULATE="1")  # the track runs on simulated devices
    env.pop("LEARN_PARALLEL_SIMULATED_DEVICES", None)
    log, report = job / "out" / "tests.log", job / "out" / "tests.xml"
    command = [sys.executable, "-m", "pytest", "-m", " or ".join(spec["tasks"])]
    # no nbval: it would import Jupyter's stack (seconds) for tests that hold no notebook
    command += ["-p", "no:cacheprovider", "-p", "no:nbval", "--noconftest", f"--junitxml={report}"]
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command,
            cwd=job,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=spec["timeout"])
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)  # what the tests left running
        process.wait()
    _end_descendants()
    _save(job / "out" / "tasks.json", _verdicts(job, report, log, spec))


def _verdicts(job: Path, report: Path, log: Path, spec: dict) -> dict:
    import ast
    import xml.etree.ElementTree as ElementTree

    task_of = {}  # test function -> its task, read from the marks in the teacher's file
    for node in ast.walk(ast.parse((job / "tests" / "test_tasks.py").read_text())):
        if isinstance(node, ast.FunctionDef):
            for mark in node.decorator_list:
                if isinstance(mark, ast.Attribute) and mark.attr in spec["tasks"]:
                    task_of[node.name] = mark.attr
    try:
        cases = list(ElementTree.parse(report).getroot().iter("testcase"))
    except Exception:  # no report: pytest did not finish
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        reason = f"the tests did not finish within {spec['timeout']} s, or ended early"
        return {t: {"passed": False, "summary": " | ".join([reason, *tail])} for t in spec["tasks"]}
    verdicts = {t: {"passed": False, "summary": "none of its tests ran"} for t in spec["tasks"]}
    ran: set[str] = set()
    for case in cases:
        task = task_of.get(case.get("name", "").partition("[")[0])
        if task is None:
            continue
        failed = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if failed is not None:
            message = f"{case.get('name')}: {failed.get('message', failed.tag)}"
            verdicts[task] = {"passed": False, "summary": f"FAILED {message}"}
        elif task not in ran or verdicts[task]["passed"]:
            verdicts[task] = {"passed": True, "summary": ""}
        ran.add(task)
    return verdicts


def main(job: Path) -> None:
    spec = json.loads((job / "job.json").read_text())
    os.umask(0o077)
    for name in ("HOME", "TMPDIR", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR"):
        Path(os.environ[name]).mkdir(parents=True, exist_ok=True)
    _limit(spec["limits"])
    (job / "out").mkdir(exist_ok=True)
    try:
        (run_notebook if spec["kind"] == "notebook" else run_tests)(job, spec)
    finally:
        _end_descendants()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
