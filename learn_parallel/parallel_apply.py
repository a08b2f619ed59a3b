"""Run every replica's forward at the same time, one persistent thread per device.

With two or more replicas, PyTorch's DataParallel starts a fresh thread per replica
on every step, so what PyTorch keeps per thread (current device and stream, grad and
autocast mode, per-thread caches; not the cuBLAS and cuDNN handles, which a pool
hands on) starts from its defaults each step. Here each device keeps one worker
thread for the life of the process, and each job carries the caller's settings. The
file reads in the order a job travels: `parallel_apply`, the caller's state bound to
the job, the worker pool, and how a replica's error comes home (the parallel_apply
chapter, ``book/parallel_apply.ipynb``; the performance chapter measures the workers).
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
from typing import Any, NoReturn

import torch
from torch import nn

from learn_parallel.devices import Device, DeviceLike, resolve_devices
from learn_parallel.phases import phase


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
    devices = resolve_devices(devices)
    jobs = [
        _Job(_bind(module, args, kwargs, device))
        for module, args, kwargs, device in zip(modules, inputs, kwargs_tup, devices)
    ]

    # One replica, or a nested DataParallel inside a worker (which would wait on its
    # own queue forever): run right here.
    if len(jobs) == 1 or getattr(_local, "is_worker", False):
        for job in jobs:
            job.run()
    else:
        for job, device in zip(jobs, devices):
            _start(job, device)
    for job in jobs:
        job.done.wait()

    for replica, job in enumerate(jobs):
        if job.failure is not None:
            _raise_from_replica(jobs, replica, devices[replica])
    return [job.result for job in jobs]


def _infer_device(module: nn.Module, position: int) -> Device:
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.device.type in ("cuda", "sim"):  # a GPU or a simulated device
            return resolve_devices([tensor.device])[0]
    return resolve_devices([position])[0]


# [caller-state]
def _bind(module: nn.Module, args: Any, kwargs: dict[str, Any], device: Device) -> Callable:
    """The job's call: ``module(*args, **kwargs)`` in the caller's state, on ``device``."""
    args = args if isinstance(args, list | tuple) else (args,)
    state = CallerState.capture(device)  # now, in the caller's thread

    def call() -> Any:
        with state.applied(device), phase("forward", device):
            return module(*args, **kwargs)

    return call


@dataclass(frozen=True)
class CallerState:
    """The caller's thread-local settings that a worker must adopt for one job."""

    grad_enabled: bool
    inference_mode: bool
    autocast_enabled: bool
    autocast_dtype: torch.dtype
    stream: torch.cuda.Stream | None
    saved_tensors_hooks: tuple[Callable, Callable] | None

    @classmethod
    def capture(cls, device: Device) -> CallerState:
        kind = device.torch_device.type
        # The innermost saved_tensors_hooks (save_on_cpu ...) of this thread, if any.
        top_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
        return cls(
            grad_enabled=torch.is_grad_enabled(),
            inference_mode=torch.is_inference_mode_enabled(),
            autocast_enabled=torch.is_autocast_enabled(kind),
            autocast_dtype=torch.get_autocast_dtype(kind),
            stream=None if device.is_simulated else torch.cuda.current_stream(device.index),
            saved_tensors_hooks=None if top_hooks is None else top_hooks(False),
        )

    def applied(self, device: Device) -> ExitStack:
        """A context that puts this thread in the caller's state, on ``device``."""
        stack = ExitStack()
        stack.enter_context(torch.inference_mode(self.inference_mode))
        stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
        if device.is_simulated:  # the replica's device is current in its worker, as on GPUs
            stack.enter_context(torch.get_device_module(device.type).device(device.index))
        else:
            stack.enter_context(torch.cuda.device(device.index))
            stack.enter_context(torch.cuda.stream(self.stream))
        kind = device.torch_device.type
        stack.enter_context(torch.autocast(kind, self.autocast_dtype, self.autocast_enabled))
        if self.saved_tensors_hooks is not None:
            # The hooks stack is per thread too: without this, save_on_cpu() around a
            # DataParallel step would keep every replica's activations on its device.
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(*self.saved_tensors_hooks))
        return stack


# [caller-state]


# [worker-pool]
class _Job:
    """One replica's forward: the call, and a slot for its result or failure."""

    def __init__(self, call: Callable[[], Any]):
        self.call = call
        self.done = threading.Event()
        self.result: Any = None
        self.failure: BaseException | None = None

    def execute(self) -> None:
        try:
            self.result = self.call()
        except BaseException as error:  # reported to the caller, never kills the worker
            # The traceback's frames would keep the replica, its inputs and activations
            # alive as long as the exception: keep its lines, not its variables. This
            # frame, still running, cannot be cleared and holds the job: leave it out.
            error.__traceback__ = error.__traceback__.tb_next
            traceback.clear_frames(error.__traceback__)
            self.failure = error
        self.call = None  # drop the replica and its inputs as soon as possible

    def run(self) -> None:
        """Execute, then wake the caller (for jobs run outside a worker)."""
        self.execute()
        self.done.set()


def _start(job: _Job, device: Device) -> None:
    """Run ``job`` on ``device``'s worker, or on a thread of its own if the worker is busy."""
    if not _worker_for(device).submit(job):
        threading.Thread(target=job.run, name=f"learn_parallel extra {device}", daemon=True).start()


_STOP = object()
_local = threading.local()  # marks worker threads, see parallel_apply()
_workers: dict[Device, _Worker] = {}
_workers_lock = threading.Lock()


def _worker_for(device: Device) -> _Worker:
    """``device``'s worker, started on first use."""
    with _workers_lock:
        worker = _workers.get(device)
        if worker is None:
            worker = _workers[device] = _Worker(device)
        return worker


class _Worker:
    """One device's persistent thread, taking one job at a time, and only while idle.

    A busy worker may be waiting, inside a replica, for the very call that wants it
    (a replica's helper thread calling DataParallel): queueing behind it could wait
    forever, so the caller runs such a job on a thread of its own instead.
    """

    def __init__(self, device: Device) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.busy = False
        self.stopped = False
        self.thread = threading.Thread(
            target=self._loop, name=f"learn_parallel worker {device}", daemon=True
        )
        self.thread.start()

    def submit(self, job: _Job) -> bool:
        with self.lock:
            if self.busy or self.stopped:
                return False
            self.busy = True
            self.jobs.put(job)
            return True

    def stop(self) -> None:
        with self.lock:
            self.stopped = True  # no job is accepted after the stop signal
            self.jobs.put(_STOP)

    def _loop(self) -> None:
        _local.is_worker = True
        while True:
            job = self.jobs.get()
            if job is _STOP:
                return
            job.execute()
            with self.lock:
                self.busy = False  # idle before the caller wakes and submits again
            job.done.set()
            del job  # hold nothing from the last step while idle


def worker_threads() -> list[threading.Thread]:
    """The live worker threads (at most one per device ever used)."""
    return [t for t in threading.enumerate() if t.name.startswith("learn_parallel worker")]


def shutdown_workers(timeout: float = 5.0) -> None:
    """Stop every worker; the pool starts new ones if it is used again."""
    with _workers_lock:
        workers = list(_workers.values())
        _workers.clear()
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.thread.join(timeout)


def _after_fork_in_child() -> None:
    # A forked child (a DataLoader worker, say) has none of the parent's threads, and a
    # lock that another thread held at the fork stays locked forever: start afresh.
    # Torch promises less: the CPU build can hang in a forked child's first matrix
    # product if the parent used its intra-op pool, and CUDA cannot be used in a child
    # forked after the parent initialised it: where a child must compute, use "spawn".
    global _workers_lock
    _workers.clear()
    _workers_lock = threading.Lock()


atexit.register(shutdown_workers)
os.register_at_fork(after_in_child=_after_fork_in_child)
# [worker-pool]


# [replica-error]
def _raise_from_replica(jobs: Sequence[_Job], replica: int, device: Device) -> NoReturn:
    """Raise the replica's own exception again in the caller, saying where it came from.

    The very same object goes up (type, attributes, ``__cause__``, the worker's
    traceback), so ``except MyError`` still catches it; a note names the replica.
    """
    error = jobs[replica].failure
    for job in jobs:  # the caller's frame (in the traceback) must not hold the error: a cycle
        job.failure = job.result = None
    note = (
        f"Caught {type(error).__name__} in replica {replica} on device "
        f"{device.describe()}; the traceback above the learn_parallel frames is "
        f"the worker thread's."
    )
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10 prints no notes; keep it where 3.11+ and pytest look for it
        error.__notes__ = [*getattr(error, "__notes__", []), note]
    try:
        raise error
    finally:
        del error  # a frame in the traceback that held its own exception would be a cycle


# [replica-error]
