"""Warnings raised through the simulator, shown at the user's line as on GPUs.

A warning that torch raises for a simulated tensor (``F.mse_loss`` with a target of another
size, a resized ``out=`` tensor) is issued while `SimTensor`'s ``__torch_function__`` or
``__torch_dispatch__`` runs, so Python attributes it to a line of this package; with
Python's default filter the same warning from two lines of the user's then shows once.
`install` (part of the simulator's first use) puts `show` in front of ``warnings``' display
hook: a warning attributed to the simulator is issued again at the frame torch meant
(filters, ``-W`` options and "once per line" then apply there), and the simulator's line
forgets it, so that the next one comes through too.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType
from typing import Any

import torch.overrides

_SIMULATOR = os.path.dirname(__file__) + os.sep  # as the simulator's code objects name it
_HANDING_OVER = torch.overrides.__file__  # handle_torch_function, which calls __torch_function__
_ORIGINAL: list[Any] = []  # warnings._showwarnmsg before install


def _in_file(filename: str) -> bool:
    return filename.startswith(_SIMULATOR)


def _in_simulator(frame: FrameType) -> bool:
    return _in_file(frame.f_code.co_filename)


def _handing_over(frame: FrameType) -> bool:
    return frame.f_code.co_filename == _HANDING_OVER


def frames(filename: str, lineno: int) -> tuple[FrameType, FrameType] | None:
    """The simulator's frame a warning is attributed to, and the frame it belongs to.

    Outside the simulator's frames, torch's ``handle_torch_function`` is skipped, and then
    one more frame where it runs the same code as a frame inside them: a function of
    torch's that handed itself to ``__torch_function__`` (``F.mse_loss``), whose inner
    call raised the warning, as its one call does on GPUs.
    """
    frame = sys._getframe(2)  # the caller of show()
    inside = set()
    while frame is not None and (frame.f_code.co_filename, frame.f_lineno) != (filename, lineno):
        inside.add(frame.f_code)
        frame = frame.f_back
    if frame is None or not _in_simulator(frame):
        return None
    attributed = frame
    while frame is not None and (_in_simulator(frame) or _handing_over(frame)):
        frame = frame.f_back
    if frame is not None and frame.f_code in inside:
        frame = frame.f_back
    return None if frame is None else (attributed, frame)


def show(message: warnings.WarningMessage) -> None:
    """``warnings._showwarnmsg`` with the simulator's frames taken out of the location."""
    found = frames(message.filename, message.lineno) if _in_file(message.filename) else None
    if found is None:
        _ORIGINAL[0](message)
        return
    attributed, user = found
    # Forget it at the simulator's line, or "once per line" would hide the next one there.
    registry = attributed.f_globals.get("__warningregistry__", {})
    text = str(message.message)
    for key in ((text, message.category, message.lineno), (text, message.category, 0)):
        registry.pop(key, None)
    scope = user.f_globals
    warnings.warn_explicit(
        message.message,
        message.category,
        user.f_code.co_filename,
        user.f_lineno,
        module=scope.get("__name__", "<string>"),
        registry=scope.setdefault("__warningregistry__", {}),
        source=message.source,
    )


def install() -> None:
    """Put `show` in front of ``warnings``' display hook (once)."""
    if not _ORIGINAL:
        _ORIGINAL.append(warnings._showwarnmsg)
        show.__wrapped__ = _ORIGINAL[0]  # type: ignore[attr-defined]
        warnings._showwarnmsg = show
