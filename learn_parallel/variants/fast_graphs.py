"""FastDataParallel's CUDA graphs: each replica's forward and backward captured once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from learn_parallel.devices import Device


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


class GraphCapture:
    """The capture method of `FastDataParallel` (a mixin: it reads the wrapper's state)."""

    def _graph_replicas(self, inputs: Sequence[tuple], kwargs: Sequence[dict]) -> None:
        """Capture every replica's forward and backward once; refuse a change of shapes."""
        if self._graph_error is not None:
            raise RuntimeError(
                f"cuda_graphs=True: capturing the replicas' CUDA graphs failed "
                f"({self._graph_error}), so this wrapper refuses to train. Build a new "
                f"FastDataParallel with cuda_graphs=False, in a new process: a failed capture "
                f"can leave CUDA's random number generator in capture mode."
            )
        shapes = [tuple(getattr(a, "shape", None) for a in args) for args in inputs]
        if self._graph_shapes is not None:
            if shapes != self._graph_shapes:
                raise ValueError(
                    f"cuda_graphs=True replays graphs captured for input shapes "
                    f"{self._graph_shapes}, but this step's are {shapes}. Keep every batch "
                    f"the same size (DataLoader(drop_last=True)), or pass cuda_graphs=False."
                )
            return
        if any(kwargs) or not all(isinstance(a, torch.Tensor) for args in inputs for a in args):
            raise ValueError(
                "cuda_graphs=True can capture forward(*tensors) only: pass every input as a "
                "positional tensor, or pass cuda_graphs=False."
            )
        self._copy_training_flags(len(inputs))  # graphs capture the modes they see
        try:
            with restored_cuda_streams(self.devices):
                # In CUDA's default ("global") capture mode an unsafe call from any thread
                # breaks a capture: finish what the caller queued, then capture one replica
                # at a time from this thread, before any worker runs.
                for device in self.devices:
                    torch.cuda.synchronize(device.index)
                for replica, args, device in zip(self._replicas, inputs, self.devices):
                    # The sample inputs become the graph's input buffers, which every replay
                    # overwrites: give it copies, never the caller's tensors.
                    sample = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
                    with torch.cuda.device(device.index), capture_stream_on(device.index):
                        torch.cuda.make_graphed_callables(replica, sample, allow_unused_input=True)
        except Exception as error:
            for replica in self._replicas:  # back to the eager forward: eval still works
                replica.__dict__.pop("forward", None)
            self._graph_error = f"{type(error).__name__}: {error}"[:400]
            raise
        self._graph_shapes = shapes
