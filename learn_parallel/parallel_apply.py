"""Run every replica's forward at the same time, one persistent thread per device.

PyTorch's DataParallel starts a fresh Python thread for each replica on every
step. Thread-local state dies with those threads: cuDNN's autotuned plans,
cuBLAS handles, the current stream. The pool below keeps exactly one worker
thread per device for the life of the process and hands it each step's job,
so that state is built once and reused.

A worker inherits the *caller's* per-thread settings for each job: grad mode,
inference mode, autocast (enabled and dtype), the current device and stream.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from learn_parallel.devices import Device, DeviceLike, to_device
from learn_parallel.phases import phase


# [caller-state]
@dataclass(frozen=True)
class CallerState:
    """The caller's thread-local settings that a worker must adopt for one job."""

    grad_enabled: bool
    inference_mode: bool
    autocast_enabled: bool
    autocast_dtype: torch.dtype
    stream: torch.cuda.Stream | None

    @classmethod
    def capture(cls, device: Device) -> CallerState:
        kind = device.torch_device.type
        return cls(
            grad_enabled=torch.is_grad_enabled(),
            inference_mode=torch.is_inference_mode_enabled(),
            autocast_enabled=torch.is_autocast_enabled(kind),
            autocast_dtype=torch.get_autocast_dtype(kind),
            stream=None if device.is_simulated else torch.cuda.current_stream(device.index),
        )

    def applied(self, device: Device) -> ExitStack:
        """A context that puts this thread in the caller's state, on ``device``."""
        stack = ExitStack()
        stack.enter_context(torch.inference_mode(self.inference_mode))
        stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
        if not device.is_simulated:
            stack.enter_context(torch.cuda.device(device.index))
            stack.enter_context(torch.cuda.stream(self.stream))
        stack.enter_context(
            torch.autocast(
                device.torch_device.type,
                dtype=self.autocast_dtype,
                enabled=self.autocast_enabled,
            )
        )
        return stack


# [caller-state]


# [replica-error]
class _Verbatim(str):
    """Keeps KeyError from printing the message as a quoted, escaped repr."""

    def __repr__(self) -> str:
        return str(self)


@dataclass
class ReplicaFailure:
    """An exception caught in a worker, to be raised again in the caller."""

    error_type: type[BaseException]
    replica: int
    device: Device
    original_traceback: str

    def reraise(self) -> None:
        message = (
            f"Caught {self.error_type.__name__} in replica {self.replica} on device "
            f"{self.device.describe()}.\nOriginal traceback (from the worker thread):\n"
            f"{self.original_traceback}"
        )
        if self.error_type is KeyError:
            message = _Verbatim(message)
        try:
            error = self.error_type(message)
        except Exception:  # an exception type whose constructor wants other arguments
            error = RuntimeError(message)
        raise error


# [replica-error]


# [worker-pool]
_STOP = object()
_local = threading.local()  # marks worker threads, see parallel_apply()
_workers: dict[Device, queue.SimpleQueue] = {}
_workers_lock = threading.Lock()


class _Job:
    """One replica's forward: the call, and a slot for its result or failure."""

    def __init__(self, call: Callable[[], Any]):
        self.call = call
        self.done = threading.Event()
        self.result: Any = None
        self.failure: tuple[type[BaseException], str] | None = None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as error:  # reported to the caller, never kills the worker
            # Keep the text, not the exception: its traceback would hold this
            # frame, and so this job, in a reference cycle.
            self.failure = (type(error), "".join(traceback.format_exception(error)))
        finally:
            self.call = None  # drop the replica and its inputs as soon as possible
            self.done.set()


def _worker_loop(jobs: queue.SimpleQueue) -> None:
    _local.is_worker = True
    while True:
        job = jobs.get()
        if job is _STOP:
            return
        job.run()
        del job  # hold nothing from the last step while idle


def _queue_for(device: Device) -> queue.SimpleQueue:
    """The job queue of ``device``'s worker, starting the worker on first use."""
    with _workers_lock:
        jobs = _workers.get(device)
        if jobs is None:
            jobs = _workers[device] = queue.SimpleQueue()
            threading.Thread(
                target=_worker_loop,
                args=(jobs,),
                name=f"learn_parallel worker {device}",
                daemon=True,
            ).start()
        return jobs


def worker_threads() -> list[threading.Thread]:
    """The live worker threads (at most one per device ever used)."""
    return [t for t in threading.enumerate() if t.name.startswith("learn_parallel worker")]


def shutdown_workers(timeout: float = 5.0) -> None:
    """Stop every worker; the pool starts new ones if it is used again."""
    with _workers_lock:
        queues = list(_workers.values())
        _workers.clear()
    for jobs in queues:
        jobs.put(_STOP)
    for thread in worker_threads():
        thread.join(timeout)


atexit.register(shutdown_workers)
# A forked child (e.g. a DataLoader worker) has none of the parent's threads.
os.register_at_fork(after_in_child=_workers.clear)
# [worker-pool]


def _infer_device(module: nn.Module, position: int) -> Device:
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.device.type in ("cuda", "sim"):  # a GPU or a simulated device
            return to_device(tensor.device)
    return to_device(position)


# [parallel-apply]
def parallel_apply(
    modules: Sequence[nn.Module],
    inputs: Sequence[Any],
    kwargs_tup: Sequence[dict[str, Any]] | None = None,
    devices: Sequence[DeviceLike] | None = None,
) -> list[Any]:
    """Call ``modules[i](*inputs[i], **kwargs_tup[i])`` on ``devices[i]``, all at once.

    Returns the outputs in replica order. If any replica raised, the one with
    the lowest index is raised again here, after every replica has finished.
    """
    if len(modules) != len(inputs):
        raise ValueError(
            f"parallel_apply got {len(modules)} modules but {len(inputs)} inputs; "
            f"pass exactly one input (a tuple of arguments) per module."
        )
    if kwargs_tup is None:
        kwargs_tup = ({},) * len(modules)
    if devices is None:
        devices = [_infer_device(m, i) for i, m in enumerate(modules)]
    if not len(modules) == len(kwargs_tup) == len(devices):
        raise ValueError(
            f"parallel_apply got {len(modules)} modules, {len(kwargs_tup)} kwargs "
            f"and {len(devices)} devices; they must all have the same length."
        )
    devices = [to_device(d) for d in devices]
    calls = []
    for module, args, kwargs, device in zip(modules, inputs, kwargs_tup, devices):
        args = args if isinstance(args, list | tuple) else (args,)
        calls.append(_bind(module, args, kwargs, device, CallerState.capture(device)))

    # One replica, or a nested DataParallel inside a worker: run right here.
    # (A worker waiting on its own queue would wait forever.)
    jobs = [_Job(call) for call in calls]
    if len(jobs) == 1 or getattr(_local, "is_worker", False):
        for job in jobs:
            job.run()
    else:
        for job, device in zip(jobs, devices):
            _queue_for(device).put(job)
    for job in jobs:
        job.done.wait()

    for replica, (job, device) in enumerate(zip(jobs, devices)):
        if job.failure is not None:
            error_type, original_traceback = job.failure
            ReplicaFailure(error_type, replica, device, original_traceback).reraise()
    return [job.result for job in jobs]


# [parallel-apply]


def _bind(module: nn.Module, args, kwargs, device: Device, state: CallerState):
    def call():
        with state.applied(device), phase("forward", device):
            return module(*args, **kwargs)

    return call
