"""What ``torch.nn.parallel.gather`` really does with outputs it was not written for.

Calls it (and ``learn_parallel.gather`` beside it) on per-replica strings, ints, a
dataclass holding a tensor and a tuple of a string and a tensor, and says what came back
or was raised. The tuple case needs CUDA tensors (torch's ``Gather`` refuses CPU ones) and
runs only on GPUs. The pitfalls chapter runs `probe` live, beside the run recorded on GPUs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

import learn_parallel as lp


@dataclasses.dataclass
class Prediction:
    """A model output that is neither a tensor, a dict nor a (named) tuple."""

    logits: torch.Tensor


def cases(device: torch.device | None) -> dict[str, list[Any]]:
    """Per-replica outputs (two replicas); those with tensors only when ``device`` is given."""
    # torch's gather fails on a dataclass before it looks at the tensor inside, so
    # that case runs on CPU tensors too; a tuple's tensor reaches Gather: GPUs only.
    t = [torch.ones(2, 3, device=device), torch.ones(2, 3, device=device)]
    found: dict[str, list[Any]] = {
        "strings of equal length": ["ab", "cd"],
        "strings of different lengths": ["ab", "cde"],
        "ints": [1, 2],
        "dataclass holding a tensor": [Prediction(t[0]), Prediction(t[1])],
    }
    if device is not None:
        found["tuple of a string and a tensor"] = [("a", t[0]), ("b", t[1])]
    return found


def outcome(gather: Callable[[list[Any], Any], Any], outputs: list[Any], target: Any) -> dict:
    """What ``gather(outputs, target)`` returned (type and repr) or raised (type and message)."""
    try:
        value = gather(outputs, target)
    except Exception as error:  # noqa: BLE001 - what it raises is the finding
        return {"raised": type(error).__name__, "message": str(error).splitlines()[0][:200]}
    text = " ".join(repr(value).split())
    if " at 0x" in text:  # memory addresses differ from run to run
        text = text.split(" at 0x")[0] + " at 0x...>" + ("'" if text.endswith("'") else "")
    return {"returned": type(value).__name__, "repr": text[:200]}


def probe() -> dict[str, dict[str, dict]]:
    """``{case: {"torch": outcome, "learn_parallel": outcome}}``, every case that runs here."""
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= 2
    device = torch.device("cuda", 0) if gpu else None
    result = {}
    for name, outputs in cases(device).items():
        target = 0 if gpu else "cpu"
        result[name] = {
            "torch": outcome(torch.nn.parallel.gather, outputs, target),
            "learn_parallel": outcome(lp.gather, outputs, target if gpu else lp.Device("sim", 0)),
        }
    return result
