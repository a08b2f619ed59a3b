"""Paths in a notebook's tracebacks relative to where Python found the file.

A chapter's stored outputs are made on one machine and read on others: a traceback that
names ``/home/someone/checkout/learn_parallel/replicate.py`` or a runner's
``.../site-packages/torch/nn/modules/module.py`` shows the build machine, not the code.
`short_path` cuts a file's path down to what an import names (``learn_parallel/...``,
``torch/...``, ``threading.py``); `relative_traceback_paths` makes IPython's tracebacks
use it. IPython asks its compiler for the label of each file in a traceback
(``format_code_name``, how cells become ``Cell In[3]``); we answer for files under an
import root. `learn_parallel.lab.source` turns it on when a chapter imports it.
"""

from __future__ import annotations

import site
import sys
import sysconfig
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # holds learn_parallel/


@cache
def _roots() -> tuple[str, ...]:
    """Folders Python imports from, longest first, each ending in a separator."""
    found = {str(PACKAGE_PARENT)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        found.add(sysconfig.get_paths().get(key, ""))
    found.update(getattr(site, "getsitepackages", list)())
    found.add(site.getusersitepackages() or "")
    found.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    roots = {str(Path(r).resolve()) for r in found if r}
    return tuple(sorted((r.rstrip("/") + "/" for r in roots if r != "/"), key=len, reverse=True))


def short_path(path: str | Path) -> str:
    """``path`` relative to the import root that holds it (``torch/nn/functional.py``);
    a path under none of them is returned unchanged."""
    text = str(path)
    if not text.startswith("/"):
        return text
    for root in _roots():
        for candidate in (text, str(Path(text).resolve())):
            if candidate.startswith(root):
                return candidate[len(root) :]
    return text


def relative_traceback_paths(shell: Any = None) -> bool:
    """Make ``shell``'s tracebacks (the running IPython's by default) name files by
    `short_path`. Returns False where there is no IPython or it has no such hook."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    compiler = getattr(shell, "compile", None)
    original = getattr(compiler, "format_code_name", None)
    if original is None:
        return False
    if getattr(original, "_short_paths", False):  # already on
        return True

    def format_code_name(name: str) -> tuple[str, str] | None:
        label = original(name)
        if label is None and name and short_path(name) != name:
            return "File", short_path(name)
        return label

    format_code_name._short_paths = True  # type: ignore[attr-defined]
    compiler.format_code_name = format_code_name
    return True
