"""The lab holds only what a chapter imports, and stays small enough to read.

The chapters run after a plain ``pip install`` (Colab), so what they import stays in the
package; the command lines and drivers that record runs live in ``experiments/``.

* no lab module imports ``argparse`` (command lines belong to ``experiments/``);
* every lab module is used by a chapter, a test or another lab module: the failure
  message lists each module with who uses it;
* the lab's size: ``learn_parallel/lab/*.py`` stays within 5,125 lines; issue 35 set 3,800,
  then came issue 46's one-thread reference step (~130), issue 48's `floors` (~290), issue
  47's profiled pass with each GPU's clock anchors, profiler rule, clocks named by their
  timers, recordings found from the data and the headers of `measure` split by chapter
  (~570), issue 44's plots naming where each row ran (~25) and `timing` split from
  `timeline` (~35), issue 47's code digests that ignore comments and docstrings (~30), and
  its last review's fixes: one table of the ladder's floor names for the chapter and the
  bridges, and messages and comments in measured code (~10); issue 48's every-row GPU work
  of a copy phase beside its floor (~8); issue 47's next two reviews: no ladder verdict from
  fewer than five rounds and the timing text of a run without timelines or DDP rows (~20),
  the floors' verdict on a collective from its GPU work (~5), and provenance's digests of two
  files that two recordings ran without hashing (~35); issue 47's nineteenth review: the DDP
  chapter's wrap-time buffers and torn-down peer, run on CPU ranks (~60), and ladder phases
  under a tenth of a millisecond printed in µs (~10); its thirty-first: a collective's strip
  drawn apart from the computation's (~12), with `plot_measurement` moved to a file of its own
  to keep `plots` short (~15). The count per file is printed with ``-s``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "learn_parallel" / "lab"
MODULES = sorted(p.stem for p in LAB.glob("*.py") if p.stem != "__init__")
LIMIT = 5125


def _imports_of(tree: ast.AST) -> set[str]:
    """Every module name an import statement in ``tree`` names (inside functions too)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _lab_modules_in(text: str, chapter: bool = False) -> set[str]:
    """The lab modules a piece of Python imports; in a chapter also those it names as
    ``learn_parallel.lab.x`` (``show_source("learn_parallel.lab.measure.matmul")``)."""
    named = set()
    for cell in text.split("\n# -- cell --\n"):
        try:
            named |= _imports_of(ast.parse(cell))
        except SyntaxError:  # a cell with IPython syntax (%magic): its names, read as text
            named |= set(re.findall(r"^from (learn_parallel\.lab\.\w+) import", cell, re.M))
    if chapter:
        named |= set(re.findall(r"learn_parallel\.lab\.\w+", text))
    return {m for m in MODULES if f"learn_parallel.lab.{m}" in named}


def _chapter_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n# -- cell --\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def users() -> dict[str, list[str]]:
    """Lab module -> the chapters, tests and other lab modules that use it."""
    found: dict[str, list[str]] = {m: [] for m in MODULES}
    chapters = [(p, _chapter_code(p), True) for p in sorted(ROOT.glob("book/*.ipynb"))]
    tests = [p for p in sorted(ROOT.glob("tests/**/*.py")) if p != Path(__file__)]
    code = [(p, p.read_text(), False) for p in [*tests, *sorted(LAB.glob("*.py"))]]
    for path, text, chapter in chapters + code:
        where = path.relative_to(ROOT)
        for module in _lab_modules_in(text, chapter):
            if where != Path("learn_parallel/lab") / f"{module}.py":  # itself does not count
                found[module].append(str(where))
    return found


def test_the_lab_imports_no_argparse():
    offenders = [
        p.name for p in LAB.glob("*.py") if "argparse" in _imports_of(ast.parse(p.read_text()))
    ]
    assert offenders == [], f"command lines belong in experiments/: {offenders}"


def test_every_lab_module_is_used_by_a_chapter_a_test_or_another_lab_module():
    found = users()
    table = "\n".join(
        f"{m}: {', '.join(u[:4])}{' ...' if len(u) > 4 else ''}" for m, u in found.items()
    )
    assert all(found.values()), f"unused: {[m for m, u in found.items() if not u]}\n{table}"
    print(table)


def test_the_finder_sees_a_chapter_import_and_ignores_a_module_naming_itself():
    assert _lab_modules_in("from learn_parallel.lab import steps, measure") == {"steps", "measure"}
    shown = 'show_source("learn_parallel.lab.steps.train_step")'
    assert _lab_modules_in(shown, chapter=True) == {"steps"} and not _lab_modules_in(shown)
    magic = "%matplotlib inline\nfrom learn_parallel.lab.plots import x"
    assert _lab_modules_in(magic, chapter=True) == {"plots"}
    assert "learn_parallel/lab/steps.py" not in users()["steps"]


def test_the_lab_stays_within_its_lines():
    lines = {p.stem: len(p.read_text().splitlines()) for p in LAB.glob("*.py")}
    total = sum(lines.values())
    print(f"learn_parallel/lab/*.py: {total} lines", sorted(lines.items(), key=lambda kv: -kv[1]))
    assert total <= LIMIT, (total, sorted(lines.items(), key=lambda kv: -kv[1]))
