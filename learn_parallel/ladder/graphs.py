"""The ladder's CUDA graphs: kept replicas' forward and backward, or a replica's whole step.

`ReplicaGraphs` (`FastDataParallel(cuda_graphs=True)`) captures each replica's forward
and backward with ``torch.cuda.make_graphed_callables``. `StepGraphs`
(`ReplicatedStep(cuda_graphs=True)`) captures, per device, the step from zeroed
gradients to the backward, and the optimizer step; the all-reduce between them stays
eager. Both capture one graph at a time from the calling thread (the ladder chapter
says why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from learn_parallel.devices import Device, warn_at_user
from learn_parallel.ladder.kept_replicas import KeptReplicas
from learn_parallel.phases import phase

# Only the capturing thread's calls must be capture-safe. In CUDA's default ("global") mode
# an unsafe call from any thread of the process ends a capture; in an earlier run (on another
# host, its log not kept) the first captures of a process were refused so ("operation failed
# due to a previous error during capture") while the warm-up's NCCL communicators were new.
THREAD_LOCAL = {"capture_error_mode": "thread_local"}


@contextmanager
def restored_cuda_streams(devices: Sequence[Device]) -> Iterator[None]:
    """Give back the caller's current device and streams however the body ends.

    ``torch.cuda.graph`` leaves its capture stream current when ending the
    capture raises, and every later step on that device would then run on it.
    """
    device = torch.cuda.current_device()
    streams = [torch.cuda.current_stream(d.index) for d in devices]
    try:
        yield
    finally:
        for stream in streams:
            torch.cuda.set_stream(stream)  # also makes the stream's device current
        torch.cuda.set_device(device)


@contextmanager
def capture_stream_on(index: int) -> Iterator[None]:
    """Make ``torch.cuda.graph`` capture on a stream of device ``index``.

    ``make_graphed_callables`` passes no stream to ``torch.cuda.graph``, which
    then uses one class-wide capture stream created on whichever device was
    current at the first capture. Capturing a replica on another device with it
    puts the replica's kernels on that device's default stream instead, and the
    capture fails (``operation not permitted when stream is capturing``).
    """
    previous = torch.cuda.graph.default_capture_stream
    torch.cuda.graph.default_capture_stream = torch.cuda.Stream(index)
    try:
        yield
    finally:
        torch.cuda.graph.default_capture_stream = previous


class ReplicaGraphs:
    """Every kept replica's forward and backward, captured once and then replayed."""

    def __init__(self, kept: KeptReplicas, devices: Sequence[Device]) -> None:
        self.kept, self.devices = kept, devices
        self.shapes: list[tuple] | None = None
        self.error: str | None = None  # why capturing failed, once it has

    def ensure_captured(self, inputs: Sequence[tuple], kwargs: Sequence[dict]) -> None:
        """Capture every replica's forward and backward once; refuse a change of shapes."""
        if self.error is not None:
            raise RuntimeError(
                f"cuda_graphs=True: capturing the replicas' CUDA graphs failed "
                f"({self.error}), so this wrapper refuses to train. Build a new "
                f"FastDataParallel with cuda_graphs=False, in a new process: a failed capture "
                f"can leave CUDA's random number generator in capture mode."
            )
        shapes = [tuple(getattr(a, "shape", None) for a in args) for args in inputs]
        if self.shapes is not None:
            if shapes != self.shapes:
                raise ValueError(
                    f"cuda_graphs=True replays graphs captured for input shapes "
                    f"{self.shapes}, but this step's are {shapes}. Keep every batch "
                    f"the same size (DataLoader(drop_last=True)), or pass cuda_graphs=False."
                )
            return
        if any(kwargs) or not all(isinstance(a, torch.Tensor) for args in inputs for a in args):
            raise ValueError(
                "cuda_graphs=True can capture forward(*tensors) only: pass every input as a "
                "positional tensor, or pass cuda_graphs=False."
            )
        self.kept.copy_training_flags(len(inputs))  # graphs capture the modes they see
        try:
            with restored_cuda_streams(self.devices):
                # In CUDA's default ("global") capture mode an unsafe call from any thread
                # breaks a capture: finish what the caller queued, then capture one replica
                # at a time from this thread, before any worker runs.
                for device in self.devices:
                    torch.cuda.synchronize(device.index)
                for replica, args, device in zip(self.kept.replicas, inputs, self.devices):
                    # The sample inputs become the graph's input buffers, which every replay
                    # overwrites: give it copies, never the caller's tensors.
                    sample = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
                    with torch.cuda.device(device.index), capture_stream_on(device.index):
                        torch.cuda.make_graphed_callables(replica, sample, allow_unused_input=True)
        except Exception as error:
            for replica in self.kept.replicas:  # back to the eager forward: eval still works
                replica.__dict__.pop("forward", None)
            self.error = f"{type(error).__name__}: {error}"[:400]
            raise
        self.shapes = shapes


class StepGraphs:
    """Per device, two CUDA graphs of one training step, replayed from this one thread.

    ``backward(k, piece)`` runs device k's part up to its backward (gradients zeroed,
    forward, loss, backward) and returns its loss; ``optimizer(k)`` runs its optimizer
    step. The first ``warmup`` calls run ``eager(pieces)`` on streams of its own (they
    create the optimizer's state and each library's handles for the streams the capture
    uses); the next captures both graphs of every device, one capture at a time, then
    replays them. A replay does only what the GPUs need (the ladder chapter counts it).
    Where a capture is refused, one warning line says why and every step runs eagerly.
    """

    def __init__(
        self,
        devices: Sequence[Device],
        eager: Callable[[Sequence[Any]], tuple[torch.Tensor, ...]],
        backward: Callable[[int, tuple[torch.Tensor, ...]], torch.Tensor],
        optimizer: Callable[[int], None],
        warmup: int = 3,
    ) -> None:
        self.devices, self.eager = devices, eager
        self.backward, self.optimizer = backward, optimizer
        self.warmup, self.calls, self.replays = warmup, 0, 0
        self.streams = [torch.cuda.Stream(d.index) for d in devices]
        self.refused: str | None = None  # why a capture failed, once one has
        self.graphs: list[tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph]] = []
        self.inputs: list[tuple[torch.Tensor, ...]] = []  # the tensors the graphs read
        self.losses: tuple[torch.Tensor, ...] = ()  # the tensors the graphs write

    def __call__(
        self, pieces: Sequence[tuple], between: Callable[[], None], buffers: Callable[[], None]
    ) -> tuple[torch.Tensor, ...]:
        """One step; the losses, per device. ``between()`` runs between the two graphs of
        every device (the all-reduce), ``buffers()`` after them (replica 0's buffers)."""
        if self.graphs:
            return self._replay(pieces, between, buffers)
        self.calls += 1
        with torch.enable_grad():
            if self.refused is None and self.calls > self.warmup:
                with self._own_streams():  # captured where the warm-up steps ran
                    captured = self._capture(pieces)
                if captured:
                    buffers()  # the eager steps left each replica its own statistics
                    return self._replay(pieces, between, buffers)
            with self._own_streams():
                return self.eager(pieces)

    # [step-replay]
    def _replay(
        self, pieces: Sequence[tuple], between: Callable[[], None], buffers: Callable[[], None]
    ) -> tuple[torch.Tensor, ...]:
        """On the caller's streams: new inputs copied in, the graphs, the collectives."""
        with phase("scatter"):
            for own, piece in zip(self.inputs, pieces):
                for tensor, new in zip(own, piece):
                    if new is not tensor:  # the captured tensors themselves: nothing to copy
                        self._check_shape(tensor, new)
                        tensor.copy_(new, non_blocking=True)
        for device, (backward, _) in zip(self.devices, self.graphs):
            with phase("forward+backward graph", device):
                backward.replay()  # on the current stream of the graph's own device
        between()
        for device, (_, step) in zip(self.devices, self.graphs):
            with phase("optimizer graph", device):
                step.replay()
        buffers()  # what DDP sends before the next forward
        self.replays += 1
        return self.losses  # overwritten by the next replay, as every graph output is

    # [step-replay]

    def _capture(self, pieces: Sequence[tuple]) -> bool:
        """Both graphs of every device, reading this step's tensors; nothing runs meanwhile."""
        if not all(isinstance(t, torch.Tensor) for piece in pieces for t in piece):
            raise ValueError(
                "cuda_graphs=True captures tensors only: pass (input, target) tensors."
            )
        # The graphs read the tensors they were captured with: the caller's own where they
        # already sit on the device (a later step with other tensors is copied into them,
        # as torch.cuda.make_graphed_callables does with its sample arguments).
        inputs = [
            tuple(t if t.device == d.torch_device else t.to(d.torch_device, copy=True) for t in p)
            for p, d in zip(pieces, self.devices)
        ]
        graphs, losses, device = [], [], self.devices[0]
        try:
            with restored_cuda_streams(self.devices):
                for d in self.devices:  # nothing queued may still run while a capture is underway
                    torch.cuda.synchronize(d.index)
                for k, (device, stream) in enumerate(zip(self.devices, self.streams)):
                    backward, step = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
                    with torch.cuda.device(device.index):
                        with torch.cuda.graph(backward, stream=stream, **THREAD_LOCAL):
                            losses.append(self.backward(k, inputs[k]))
                        with torch.cuda.graph(step, backward.pool(), stream, **THREAD_LOCAL):
                            self.optimizer(k)
                    graphs.append((backward, step))
        except Exception as error:  # noqa: BLE001 - any refusal falls back to eager steps
            self.refused = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            warn_at_user(
                f"ReplicatedStep(cuda_graphs=True): capturing the step on {device} was refused "
                f"({self.refused}); every step runs eagerly from now on (a failed capture can "
                f"leave CUDA's random number generator in capture mode: with dropout, start a "
                f"new process).",
                RuntimeWarning,
            )
            return False
        self.graphs, self.inputs = graphs, inputs
        self.losses = tuple(loss.detach() for loss in losses)  # the graphs write them
        return True

    @contextmanager
    def _own_streams(self) -> Iterator[None]:
        """Run the body on this object's streams, ordered after the caller's and before."""
        callers = [torch.cuda.current_stream(d.index) for d in self.devices]
        with ExitStack() as current:
            for own, caller in zip(self.streams, callers):
                own.wait_stream(caller)
                current.enter_context(torch.cuda.stream(own))
            yield
        for own, caller in zip(self.streams, callers):
            caller.wait_stream(own)

    def _check_shape(self, captured: torch.Tensor, new: torch.Tensor) -> None:
        if new.shape != captured.shape:  # copy_ would broadcast a smaller batch silently
            shapes = [tuple(t.shape for t in p) for p in self.inputs]
            raise ValueError(
                f"cuda_graphs=True replays a step captured for input shapes {shapes}, but this "
                f"step has a tensor of shape {tuple(new.shape)} where the capture had "
                f"{tuple(captured.shape)}. Keep every batch the same size "
                f"(DataLoader(drop_last=True))."
            )
