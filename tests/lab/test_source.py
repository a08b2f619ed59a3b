"""``show_source`` names the file that holds what it shows.

* ``test_the_title_names_the_file_of_the_def``: for every decorated function of the package
  (``@measured`` and the like) and a few plain ones, the file and lines in the title hold the
  shown text, and the ``def`` is in that file, not in the decorator's.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from learn_parallel.lab.source import source_of

ROOT = Path(__file__).resolve().parents[2]


def _decorated_functions() -> list[str]:
    """Dotted names of the package's module-level functions that carry a decorator."""
    names = []
    for path in sorted((ROOT / "learn_parallel").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.decorator_list:
                names.append(f"{module}.{node.name}")
    return names


DECORATED = _decorated_functions()


def test_some_functions_are_decorated_with_measured():
    """The test below would prove nothing if the package had no wrapped functions."""
    assert "learn_parallel.lab.measure_pieces.scatter_copy" in DECORATED


@pytest.mark.parametrize(
    "name", [*DECORATED, "learn_parallel.scatter_gather.scatter", "learn_parallel.DataParallel"]
)
def test_the_title_names_the_file_of_the_def(name):
    source = source_of(name)
    lines = (ROOT / source.path).read_text().splitlines(keepends=True)
    held = textwrap.dedent("".join(lines[source.first_line - 1 : source.last_line]))
    assert held == source.text, f"{source.title} does not hold {name}"
    object_name = name.rsplit(".", 1)[1]
    assert f"def {object_name}(" in held or f"class {object_name}" in held, source.title
