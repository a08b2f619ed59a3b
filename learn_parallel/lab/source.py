"""Show the package's real source in a notebook cell's output.

The chapters put the code they explain beside the prose by *reading it from the package
at run time*, never by pasting it. The output renders wherever the notebook is opened:
HTML with inline colours (Jupyter, JupyterLab, Colab, nbconvert and the built site),
Markdown and plain text, each naming the file and the lines it came from.
"""

from __future__ import annotations

import html
import importlib
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # .../learn_parallel


@dataclass(frozen=True)
class Source:
    """A stretch of one file of the package: what a chapter shows."""

    path: str  # relative to the repository root, e.g. "learn_parallel/scatter_gather.py"
    first_line: int
    text: str

    @property
    def last_line(self) -> int:
        return self.first_line + self.text.count("\n") - (1 if self.text.endswith("\n") else 0)

    @property
    def title(self) -> str:
        return f"{self.path}, lines {self.first_line}-{self.last_line}"

    def __repr__(self) -> str:
        return f"# {self.title}\n{self.text.rstrip()}"

    def _repr_markdown_(self) -> str:
        return f"`{self.title}`\n\n```python\n{self.text.rstrip()}\n```\n"

    def _repr_html_(self) -> str:
        formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default")
        code = highlight(self.text, PythonLexer(), formatter)
        # pre-wrap: long lines wrap inside the box instead of widening the page.
        return (
            '<div class="learn-parallel-source" style="margin:0.4em 0">'
            '<div style="font-family:monospace;font-size:85%;color:#555;'
            f'padding:2px 0">{html.escape(self.title)}</div>'
            '<pre style="white-space:pre-wrap;word-break:break-word;margin:0;'
            "padding:0.6em;background:#f8f8f8;border:1px solid #ddd;border-radius:4px;"
            f'line-height:1.35;font-size:85%">{code}</pre></div>'
        )


def _relative(path: Path) -> str:
    """``learn_parallel/...`` for the package's files, in a checkout or installed."""
    try:
        return str(path.resolve().relative_to(PACKAGE_ROOT.parent))
    except ValueError:
        return str(path)


def resolve(name: str) -> Any:
    """The module, class, function or method a dotted name names: the longest importable
    prefix is the module, the rest attributes (so ``"learn_parallel.replicate.copy_to_devices"``
    works although the package attribute ``learn_parallel.replicate`` is a function)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise ValueError(f"{name!r} names no module, class or function that can be imported.")


def _module_file(module: ModuleType | str) -> Path:
    module = importlib.import_module(module) if isinstance(module, str) else module
    return Path(inspect.getsourcefile(module) or "")


def source_of(obj: Any, marker: str | None = None) -> Source:
    """The source of a function, class or method (``source_of(Scatter)``); or, with ``marker``,
    the lines between a module's two ``# [marker]`` comments (``source_of(module, "name")``).

    ``obj`` may be a dotted name (``"learn_parallel.replicate.copy_to_devices"``). A method
    or a region inside a class is shown dedented; the line numbers stay those of the file.
    """
    if marker is None:
        # unwrap: a decorated function's file is where its `def` is, not the decorator's.
        obj = inspect.unwrap(resolve(obj) if isinstance(obj, str) else obj)
        lines, first = inspect.getsourcelines(obj)
        path = Path(inspect.getsourcefile(obj) or "")
        return Source(_relative(path), first, textwrap.dedent("".join(lines)))
    path = _module_file(obj)
    lines = path.read_text().splitlines(keepends=True)
    tag = f"# [{marker}]"
    found = [i for i, line in enumerate(lines) if line.strip() == tag]
    if len(found) != 2:
        raise ValueError(
            f"{_relative(path)} has {len(found)} lines reading {tag!r}; a region is marked by "
            f"exactly two (one before it, one after it)."
        )
    start, end = found
    body = lines[start + 1 : end]
    while body and not body[-1].strip():  # the blank lines before the closing marker
        body.pop()
    return Source(_relative(path), start + 2, textwrap.dedent("".join(body)))


show_source = source_of  # for the last line of a notebook cell: the `Source` displays itself


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def shorten_traceback(entries: list[str], last: int = 2) -> list[str]:
    """An IPython traceback whose frames are the reader's cells (``Cell In[..]``) and the
    ``last`` frames before the message; one line counts the library frames left out."""
    plain = [_ANSI.sub("", e) for e in entries]
    frames = [i for i, text in enumerate(plain) if text.startswith(("Cell In[", "File "))]
    cut = {i for i in frames[:-last] if not plain[i].startswith("Cell In[")}
    if not cut:
        return entries
    note = f"... {len(cut)} frame{'s' if len(cut) > 1 else ''} of library code ..."
    kept = [e for i, e in enumerate(entries) if i not in cut]
    return kept[: min(cut)] + [note] + kept[min(cut) :]


def short_tracebacks() -> None:
    """Make a running IPython shell show errors as `shorten_traceback` does."""
    ipython = sys.modules.get("IPython")  # loaded wherever a shell runs; not loaded for it
    printer = getattr(ipython and ipython.get_ipython(), "InteractiveTB", None)
    if printer is None or getattr(printer.structured_traceback, "shortened", False):
        return
    original = printer.structured_traceback

    def structured_traceback(*args: Any, **kwargs: Any) -> list[str]:
        return shorten_traceback(original(*args, **kwargs))

    structured_traceback.shortened = True  # type: ignore[attr-defined]
    printer.structured_traceback = structured_traceback
