"""Every place that installs the package for a chapter installs what that chapter imports.

Outside a clone the package asks only for torch; the rest comes from the extras each
installer names. Checked against the modules really imported here:

* every chapter's first cell, where learn_parallel is missing (Colab, a fresh environment):
  its extras provide what the shared setup (``learn_parallel.lab.chapter``) loads;
* the teacher's guide: also what it and the classroom package import;
* the Classroom workflow that grades students' pushes, and the students' README: their pip
  lines provide what every chapter's setup loads, so a correct answer is not graded in a
  kernel whose first cell failed.
"""

import ast
import json
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
Requirement = pytest.importorskip("packaging.requirements").Requirement
canonicalize_name = pytest.importorskip("packaging.utils").canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))


def _imported(source: str) -> set[str]:
    """The top-level modules ``source`` imports, without the standard library's."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names)


def _with_dependencies(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, as installed here (canonical names)."""
    todo, seen = [canonicalize_name(n) for n in names], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            required = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in map(Requirement, required):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def _provided(extras: set[str], others: set[str] = frozenset()) -> set[str]:
    """What installing the package with ``extras``, and ``others`` beside it, brings."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    asked = {Requirement(r).name for r in project["dependencies"]} | set(others)
    asked |= {Requirement(r).name for e in extras for r in project["optional-dependencies"][e]}
    return _with_dependencies(asked)


def _missing(modules: set[str], provided: set[str]) -> list[str]:
    """The installed third-party modules among ``modules`` that ``provided`` does not bring."""
    distributions = metadata.packages_distributions()
    missing = []
    for module in sorted(modules - {"learn_parallel"} - set(sys.stdlib_module_names)):
        names = {canonicalize_name(d) for d in distributions.get(module, [])}
        if names and not names & provided:  # not installed here: nothing to compare with
            missing.append(module)
    return missing


@pytest.fixture(scope="module")
def setup_modules() -> set[str]:
    """The top-level modules that importing the chapters' shared setup loads."""
    code = "import sys, learn_parallel.lab.chapter; print(' '.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    return {name.split(".")[0] for name in loaded.stdout.split()}


def _first_cell(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return next("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def _pip_line(text: str) -> tuple[set[str], set[str]]:
    """The extras and other packages of the one pip line in ``text`` that installs the package."""
    (line,) = [x for x in text.splitlines() if "pip install" in x and "./_package" in x]
    words = shlex.split(line.split("pip install", 1)[1])
    (package,) = [w for w in words if w.startswith("./_package")]
    extras = Requirement(f"p{package.removeprefix('./_package')}").extras
    return set(extras), {w for w in words if w != package and not w.startswith("-")}


@pytest.mark.parametrize("chapter", [p for p in CHAPTERS if p.stem != "glossary"], ids=str)
def test_each_chapters_first_cell_installs_what_its_setup_imports(chapter, setup_modules):
    cell = _first_cell(chapter)
    install = re.search(r'"(learn-parallel\[[\w,]+\]) @ \{REPO\}"', cell)
    assert install, f"{chapter.name}'s first cell installs learn_parallel without its extras"
    extras = set(Requirement(install.group(1)).extras)
    modules = _imported(cell)
    if chapter.stem == "teaching":
        for path in (ROOT / "learn_parallel" / "classroom").rglob("*.py"):
            modules |= _imported(path.read_text())
    else:
        modules |= setup_modules
    assert not _missing(modules, _provided(extras)), f"{chapter.name}: extras {sorted(extras)}"


@pytest.mark.parametrize("where", ["workflow", "student README"])
def test_the_grader_and_the_students_install_what_every_chapters_setup_imports(
    where, setup_modules
):
    if where == "workflow":
        text = (ROOT / ".github" / "classroom" / "autograde.yml").read_text()
    else:
        pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
        from learn_parallel.classroom.handouts import STUDENT_README as text
    extras, others = _pip_line(text)
    assert not _missing(setup_modules, _provided(extras, others)), f"{where}: {extras} {others}"


def test_the_check_can_fail(setup_modules):
    assert "matplotlib" in _missing(setup_modules, _provided(set()))
    assert not _missing(setup_modules, _provided({"plots"}))
