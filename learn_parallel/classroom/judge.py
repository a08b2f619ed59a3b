"""Grading a check in two processes: the student's kernel records, the grader judges.

The student's code can patch anything in its kernel (``check``, the checks, ``print``,
``torch.equal``), so every check runs twice, from the same seed:

1. In the kernel (`recorder`), on the student's real answer: each call of the answer (and
   each `observe` probe) is recorded as plain data (`plain`), or as the exception it raised.
   The kernel's verdict can only *fail* an exercise: it is where the spies on *how* an
   answer works (`tools.forbid`, `placement.Moves`, `tools.spy`) watch the student's code.
2. In the grader (`judge`), the same check runs again on *replayed* answers: each call
   returns the next recorded value, and every comparison with the values the check computes
   from the package happens here, where no student code ever ran. The transcript is read
   with ``torch.load(weights_only=True)`` and every node checked to be plain data.
The teaching chapter (``book/teaching.ipynb``) says what this guarantees and what not.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from learn_parallel.classroom.plain import UngradableAnswer, decode, encode
from learn_parallel.classroom.role import JUDGE, KERNEL, acting_as, role
from learn_parallel.classroom.submissions import Refused, read_regular
from learn_parallel.classroom.tools import ForbiddenCall, machine


class _State:  # one per process (answers may run in threads): the transcript in use
    outcomes: list = []
    replay: _Replay | None = None


_state = _State()
_MAX_OUTCOMES = 100_000  # a transcript longer than any check's: an answer that loops
MAX_TRANSCRIPT_BYTES = 256 * 2**20


# --------------------------------------------------------------------------
# The kernel's side: record every call of the answer
# --------------------------------------------------------------------------


class Recorded:
    """The student's function, recording what each call returns or raises."""

    def __init__(self, function: Callable) -> None:
        self.function = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _record(_state.outcomes, self.function, args, kwargs)


_lock = threading.Lock()


def _record(outcomes: list, function: Callable, args: tuple, kwargs: dict) -> Any:
    try:
        result = function(*args, **kwargs)
    except Exception as error:
        from learn_parallel.classroom import _where

        entry = {"raised": type(error).__name__, "message": str(error), "where": _where(error)}
        with _lock:
            outcomes.append(entry)
        raise
    try:
        entry = {"value": encode(result)}
    except UngradableAnswer as error:
        entry = {"raised": "UngradableAnswer", "message": str(error)}
    with _lock:
        outcomes.append(entry)
    if len(outcomes) > _MAX_OUTCOMES:
        raise UngradableAnswer("the check called the answer more often than any check does")
    return result


def _is_function(value: Any) -> bool:
    return callable(value) and not isinstance(value, type | nn.Module)


def recorder(path: str | Path) -> Callable[..., None]:
    """``check`` for a grading cell in the kernel: run the check on the answer, recording
    every call, and save the transcript at ``path`` (for `judge`)."""

    def record(exercise_id: str, *answer: Any) -> None:
        from learn_parallel.classroom import _CHECKS, GRADING_ENV, _load_all, check_message

        _load_all()
        outcomes: list = []
        args, described = [], []
        for value in answer:
            if _is_function(value):
                args.append(Recorded(value))
                described.append({"call": True})
                continue
            args.append(value)
            try:
                described.append({"data": encode(value)})
            except UngradableAnswer:
                described.append({"opaque": type(value).__name__})
        verdict = None
        _seed()
        os.environ[GRADING_ENV] = "1"  # the same hidden cases as the judge's run
        _state.outcomes = outcomes
        try:
            with acting_as(KERNEL), _quiet():  # an answer that prints megabytes costs nothing
                _CHECKS[exercise_id](*args)
        except Exception as failure:
            verdict = check_message(exercise_id, failure)
        transcript = {
            "args": described,
            "outcomes": outcomes,
            "kernel": verdict,
            "devices": _devices_here(),
        }
        torch.save(transcript, str(path))

    return record


def observe(probe: Callable, *args: Any) -> Any:
    """``probe(*args)`` run where the student's code is, its plain-data result replayed in
    the grader. For checks that need the answer's effects (a gradient, a mutated argument)
    or an object the grader cannot receive (a class, a module): the probe turns them into
    data. In a notebook it is just ``probe(*args)``."""
    if role() == JUDGE:
        return _state.replay.next()
    raw = [a.function if isinstance(a, Recorded) else a for a in args]
    if role() == KERNEL:
        return _record(_state.outcomes, probe, tuple(raw), {})
    return probe(*raw)


class _Opaque:
    """Stands in the grader for an answer only a probe may use (a class, a module): the
    object stays in the kernel."""


# --------------------------------------------------------------------------
# The grader's side: replay the transcript, judge the values here
# --------------------------------------------------------------------------


class _Replay:
    def __init__(self, outcomes: list) -> None:
        self.outcomes, self.position = outcomes, 0

    def next(self) -> Any:
        if self.position >= len(self.outcomes):
            raise UngradableAnswer("the answer's kernel recorded fewer calls than the check made")
        entry = self.outcomes[self.position]
        self.position += 1
        if type(entry) is not dict:
            raise UngradableAnswer("the transcript is not one the grader wrote")
        if "raised" in entry:
            error = _exception(str(entry["raised"]), str(entry.get("message", "")))
            error.where = str(entry.get("where") or "")  # the student's line, as they saw it
            raise error
        return decode(entry["value"])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.next()


def _exception(name: str, message: str) -> BaseException:
    known = {"ForbiddenCall": ForbiddenCall, "UngradableAnswer": UngradableAnswer}
    kind = known.get(name) or getattr(builtins, name, None)
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = RuntimeError
        message = f"{name}: {message}"
    return kind(message)


def _devices_here() -> list[str]:
    return [str(d) for d in machine().devices]


def _seed() -> None:
    torch.manual_seed(0)
    random.seed(0)


def judge(exercise_id: str, path: str | Path) -> tuple[bool, str]:
    """Replay the transcript at ``path`` through the check of ``exercise_id``, here."""
    from learn_parallel.classroom import _CHECKS, GRADING_ENV, _load_all, check_message

    _load_all()
    try:
        data = read_regular(Path(path), MAX_TRANSCRIPT_BYTES)  # a regular file, not a link
        transcript = torch.load(io.BytesIO(data), weights_only=True)
        outcomes = transcript["outcomes"]
        replay = _Replay(outcomes if type(outcomes) is list else [])
        args = []
        for described in transcript["args"]:
            if type(described) is not dict:
                raise UngradableAnswer("the transcript is not one the grader wrote")
            if "call" in described:
                args.append(replay)
            elif "data" in described:
                args.append(decode(described["data"]))
            else:
                args.append(_Opaque())
        kernel, devices = transcript.get("kernel"), transcript.get("devices")
    except Refused as refusal:
        return False, f"no answer could be read back from the kernel: the transcript is {refusal}"
    except Exception as error:  # a missing, truncated or forged transcript
        return False, f"no answer could be read back from the kernel ({type(error).__name__})"
    if devices != _devices_here():  # the cases depend on the devices: both runs need the same
        return False, (
            f"the notebook's kernel saw the devices {devices}, the grader {_devices_here()}: "
            "grade with the devices the notebook uses (LEARN_PARALLEL_SIMULATED_DEVICES)"
        )
    _seed()
    _state.replay = replay
    previous = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"  # the hidden cases, as in the kernel
    try:
        with acting_as(JUDGE), _quiet():
            _CHECKS[exercise_id](*args)
    except Exception as failure:
        where = getattr(failure, "where", "")
        return False, check_message(exercise_id, failure) + (f" ({where})" if where else "")
    finally:
        _state.replay = None
        if previous is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = previous
    if kernel is not None:  # the values are right, but a spy in the kernel objected
        return False, str(kernel)
    return True, ""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with (
        open(os.devnull, "w") as sink,
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        yield
