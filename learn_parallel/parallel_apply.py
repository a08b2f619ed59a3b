"""Run every replica's forward at the same time, one persistent thread per device.

With two or more replicas, PyTorch's DataParallel starts a fresh thread per replica
on every step. Its worker sets grad mode and the autocast flag as the caller had
them, the replica's device, and the caller's stream there; the rest of what PyTorch
keeps per thread (autocast's dtype, inference mode, saved-tensor hooks, mode stacks,
per-thread caches) starts from its defaults each step. Here each device keeps one
worker thread, and each job carries the caller's settings. The file reads in the
order a job travels: `parallel_apply`, the caller's state bound to the job, the
worker pool, and how a replica's error comes home (the parallel_apply chapter,
``book/parallel_apply.ipynb``; the performance chapter measures the workers).
"""

from __future__ import annotations

import functools
import queue
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, NoReturn

import torch
from torch import nn

from learn_parallel.devices import Device, DeviceLike, resolve_devices, warn_at_user
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
    Replicas may share a device.
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
    if not modules:
        return []
    devices = resolve_devices(devices, shared=True)
    jobs = [
        _Job(_bind(module, args, kwargs, device))
        for module, args, kwargs, device in zip(modules, inputs, kwargs_tup, devices)
    ]
    if len(jobs) == 1:  # one replica runs right here, as in torch
        jobs[0].run()
    else:
        taken: set[Device] = set()  # a device's second replica runs beside its first
        for job, device in zip(jobs, devices):
            _start(job, device, beside=device in taken)
            taken.add(device)
    for job in jobs:
        job.done.wait()

    for replica, job in enumerate(jobs):
        if job.failure is not None:
            _raise_from_replica(jobs, replica, devices[replica])
    return [job.result for job in jobs]


def _infer_device(module: nn.Module, position: int) -> DeviceLike:
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.device.type in ("cuda", "sim"):  # a GPU or a simulated device
            return tensor.device
    return position


# [caller-state]
def _bind(module: nn.Module, args: Any, kwargs: dict[str, Any], device: Device) -> Callable:
    """The job's call: ``module(*args, **kwargs)`` on ``device``, in the caller's state.

    Grad mode, inference mode, autocast (on or off, and its dtype), the current
    stream and saved-tensor hooks are per thread in PyTorch: read here, in the
    caller's thread, and entered again in the worker's. The hooks are read with
    ``torch._C._autograd._top_saved_tensors_default_hooks(False)``, as torch 2.11 and 2.13
    have it; a torch without it carries no hooks (a warning says so once).
    """
    args = args if isinstance(args, list | tuple) else (args,)
    kind = device.torch_device.type
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    autocast = (kind, torch.get_autocast_dtype(kind), torch.is_autocast_enabled(kind))
    stream = None if device.is_simulated else torch.cuda.current_stream(device.index)
    # The innermost saved_tensors_hooks (save_on_cpu ...) of this thread, if any.
    top_hooks = _saved_tensor_hooks_reader()
    hooks = None if top_hooks is None else top_hooks(False)

    def call() -> Any:
        with ExitStack() as state:
            state.enter_context(torch.inference_mode(inference))
            state.enter_context(torch.set_grad_enabled(grad))
            # The replica's device is current in its worker, on GPUs and simulated devices.
            state.enter_context(torch.get_device_module(kind).device(device.index))
            if stream is not None:
                state.enter_context(torch.cuda.stream(stream))
            state.enter_context(torch.autocast(*autocast))
            if hooks is not None:  # or save_on_cpu() would leave activations on the device
                state.enter_context(torch.autograd.graph.saved_tensors_hooks(*hooks))
            with phase("forward", device):
                return module(*args, **kwargs)

    return call


@functools.cache  # once per process: the answer depends only on the torch installed
def _saved_tensor_hooks_reader() -> Callable[[bool], Any] | None:
    reader = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if reader is None:
        warn_at_user(
            f"torch {torch.__version__} cannot read the saved-tensor hooks of a thread (torch "
            f"2.8 can), so hooks such as save_on_cpu() set around a call stay in the calling "
            f"thread and do not reach the replicas' workers, as in torch's DataParallel. "
            f"Upgrade torch to 2.8 or newer to have them carried."
        )
    return reader


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
            # The worker's frames would keep the forward's locals, activations included,
            # alive as long as the exception: keep their lines, not their variables (the
            # replicas and inputs stay held by the caller's frames it is raised through).
            # This frame, still running, cannot be cleared and holds the job: leave it out.
            error.__traceback__ = error.__traceback__.tb_next
            traceback.clear_frames(error.__traceback__)
            self.failure = error
        self.call = None  # drop the replica and its inputs as soon as possible

    def run(self) -> None:
        """Execute, then wake the caller (for jobs run outside a worker)."""
        self.execute()
        self.done.set()


_workers: dict[Device, _Worker] = {}


def _start(job: _Job, device: Device, beside: bool = False) -> None:
    """Run ``job`` on ``device``'s worker, or on a thread of its own if the worker is busy
    (or, ``beside``, has a replica of this same call).

    A busy worker may be running a replica that waits for this very call (a nested
    DataParallel, or a replica's helper thread calling one): queueing behind it could
    wait forever. Two threads starting a device's first worker at the same moment may
    both start one; the one not kept runs its job, then idles: a spare thread, no lost job.
    """
    worker = _workers.get(device)
    if worker is None or not worker.thread.is_alive():  # first use, or a forked child
        worker = _workers[device] = _Worker(device)
    if not beside and worker.idle.acquire(blocking=False):
        worker.jobs.put(job)
    else:
        extra = threading.Thread(target=job.run, name=f"learn_parallel extra {device}", daemon=True)
        extra.start()


class _Worker:
    """One device's thread for the life of the process; ``idle`` is held from the hand-over of
    a job until the worker has run it."""

    def __init__(self, device: Device) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.idle = threading.Lock()
        name = f"learn_parallel worker {device}"
        # A daemon: an idle worker never holds up the end of the process.
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            job.execute()
            self.idle.release()  # idle before the caller wakes and submits again
            job.done.set()
            del job  # hold nothing from the last step while idle


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
        f"{device.describe()}; in the traceback, the frames after 'raise error' are "
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
