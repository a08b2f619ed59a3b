"""Placement: which piece sits on which device, and was a tensor really sent there?

`same_places` names the first piece on the wrong device, in the check's words, before any
comparison mixes devices and fails with torch's error instead. `Moves` records every
``Tensor.to`` call while it is active; while the grader replays recorded answers
(`role.judging`) there is nothing to record, and `Moves.sent` lets the replay through.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch import nn

from learn_parallel.classroom.role import judging


def same_places(got: Any, expected: list[torch.Tensor], what: str = "piece") -> None:
    """Say which piece is on the wrong device (``piece 1 is on sim:0, expected sim:1``)
    before any comparison mixes devices and fails with torch's error instead."""
    assert isinstance(got, list | tuple), f"expected a list of {len(expected)}, got {got!r:.80}"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert isinstance(g, torch.Tensor), f"{what} {i} is a {type(g).__name__}, not a tensor"
        assert g.device == e.device, f"{what} {i} is on {g.device}, expected {e.device}"


# --------------------------------------------------------------------------
# Placement: was this tensor (or module) really sent to its device?
# --------------------------------------------------------------------------


def _target_of(args: tuple, kwargs: dict) -> torch.device | None:
    candidate = kwargs.get("device")
    if candidate is None and args:
        candidate = args[0]
    if isinstance(candidate, torch.Tensor):
        return candidate.device
    if isinstance(candidate, str | int | torch.device):
        try:
            return torch.device(candidate)
        except (RuntimeError, TypeError):
            return None
    return None


class Moves:
    """Records every ``Tensor.to`` call made while it is active.

    ``tensor.device`` says where a tensor is, on GPUs and simulated devices alike;
    the record says what was copied (`sent`, `moved_non_scalars_with_grad`).
    """

    def __init__(self) -> None:
        self.moved_shapes: list[tuple[torch.Size, bool]] = []
        self.sources: dict[int, tuple[torch.Tensor, list[torch.device]]] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Moves:
        self._tensor_to = torch.Tensor.to
        moves = self

        def tensor_to(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            result = moves._tensor_to(tensor, *args, **kwargs)
            target = _target_of(args, kwargs)
            if target is not None:
                with moves._lock:
                    moves.moved_shapes.append((tensor.shape, tensor.requires_grad))
                    moves.sources.setdefault(id(tensor), (tensor, []))[1].append(target)
            return result

        torch.Tensor.to = tensor_to
        return self

    def __exit__(self, *exc: object) -> None:
        torch.Tensor.to = self._tensor_to

    def placed(self, tensor: torch.Tensor, device: torch.device) -> bool:
        """Is ``tensor`` on ``device``?"""
        return tensor.device == device

    def sent(self, tensor: torch.Tensor, device: torch.device) -> bool:
        """Is ``tensor`` on ``device``, or was it copied there with ``.to()``?"""
        if judging() or tensor.device == device:
            return True
        entry = self.sources.get(id(tensor))
        return entry is not None and entry[0] is tensor and device in entry[1]

    def module_sent_to(self, module: nn.Module, device: torch.device) -> bool:
        return all(p.device == device for p in module.parameters())

    def moved_non_scalars_with_grad(self) -> list[torch.Size]:
        """Shapes of tensors that take part in autograd and were copied whole."""
        return [shape for shape, grad in self.moved_shapes if grad and shape.numel() > 1]
