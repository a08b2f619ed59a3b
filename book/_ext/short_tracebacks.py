"""Sphinx extension of this book: tracebacks in the executed chapters name files as imports do.

The chapters' stored outputs are this build's executed notebooks, made on one machine and
read on others: a traceback that names ``/home/someone/checkout/learn_parallel/replicate.py``
or a runner's ``.../site-packages/torch/nn/modules/module.py`` shows the build machine, not
the code. `short_path` cuts a file's path down to what an import names (``learn_parallel/...``,
``torch/...``, ``threading.py``). IPython asks its compiler for the label of each file in a
traceback (``format_code_name``, how cells become ``Cell In[3]``); `load_ipython_extension`
answers for files under an import root. `setup` makes every kernel this build starts load
this module as an IPython extension: jupyter-book executes through nbclient, which passes its
``NotebookClient.extra_arguments`` to the kernel and has no setting in jupyter-book, so this
sets that trait's default and puts this folder on the kernels' ``PYTHONPATH``. A reader's own
Jupyter is left alone: there the paths are the reader's.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]  # holds learn_parallel/
KERNEL_ARGUMENT = f"--InteractiveShellApp.extensions={Path(__file__).stem}"


@cache
def _roots() -> tuple[str, ...]:
    """Folders Python imports from, longest first, each ending in a separator."""
    found = {str(CHECKOUT)}
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


def load_ipython_extension(shell: Any) -> None:
    """Make ``shell``'s tracebacks name files by `short_path` (``%load_ext short_tracebacks``)."""
    compiler = getattr(shell, "compile", None)
    original = getattr(compiler, "format_code_name", None)
    if original is None or getattr(original, "_short_paths", False):
        return  # an IPython without the hook, or already on

    def format_code_name(name: str) -> tuple[str, str] | None:
        label = original(name)
        if label is None and name and short_path(name) != name:
            return "File", short_path(name)
        return label

    format_code_name._short_paths = True  # type: ignore[attr-defined]
    compiler.format_code_name = format_code_name


def setup(app: Any) -> dict[str, Any]:
    from nbclient import NotebookClient

    paths = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)  # the kernels inherit the build's env
    trait = NotebookClient.class_traits()["extra_arguments"]
    trait.default_value = [KERNEL_ARGUMENT]
    return {"parallel_read_safe": True, "parallel_write_safe": True}
