"""Every file readable in one sitting: short files and module docstrings, region markers only
where a chapter shows the region, no `# fmt: skip`, and parallel_apply.py read top-down.

Region markers and `# fmt: skip` are checked in every folder of the package; the 300-line
limit and module docstrings of at most 15 lines in every folder of the package and in
``experiments/``. Files still being split are named in `BEING_SPLIT`, as expected failures
that must fail: once one is short, its entry has to go.
"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "learn_parallel"
FOLDERS = sorted({p.parent for p in PACKAGE.rglob("*.py")})
EXPERIMENTS = ROOT / "experiments"
BEING_SPLIT: set[str] = set()  # over 300 lines today; each is being split (issue 43)
MARKER = re.compile(r"^\s*# \[([\w-]+)\]\s*$")
SHOWN = re.compile(r"""show_source\(\s*(?:"([\w.]+)"|([\w.]+))\s*,\s*"([\w-]+)"\s*\)""")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _chapter_regions() -> set[tuple[str | None, str]]:
    """(module, marker) of every ``show_source(obj, "marker")`` in a chapter's code cells;
    module None where ``obj`` is not a dotted string (then any module's marker matches)."""
    shown = set()
    for chapter in (ROOT / "book").glob("*.ipynb"):
        for cell in json.loads(chapter.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for module, _, marker in SHOWN.findall("".join(cell["source"])):
                    shown.add((module or None, marker))
    return shown


def _files(folders=FOLDERS):
    return sorted(path for folder in folders for path in folder.glob("*.py"))


def test_every_region_marker_is_shown_by_a_chapter():
    shown = _chapter_regions()
    unshown = []
    for path in _files():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = MARKER.match(line)
            if found and not {(module, found[1]), (None, found[1])} & shown:
                unshown.append(f"{_name(path)}:{number} # [{found[1]}]")
    assert unshown == [], "markers no chapter shows (remove them, or show the region)"


def test_no_fmt_skip():
    skipped = [_name(p) for p in _files() if "fmt: skip" in p.read_text()]
    assert skipped == [], "let ruff format these lines"


def _short_file_cases():
    for path in _files([*FOLDERS, EXPERIMENTS]):
        split = pytest.mark.xfail(strict=True, reason="being split")
        yield pytest.param(
            path, id=_name(path), marks=[split] if _name(path) in BEING_SPLIT else []
        )


@pytest.mark.parametrize("path", list(_short_file_cases()))
def test_files_are_short(path):
    lines = path.read_text().splitlines()
    assert len(lines) <= 300, f"{len(lines)} lines: split the file"


def test_the_files_being_split_exist():
    assert all((ROOT / name).is_file() for name in BEING_SPLIT)


@pytest.mark.parametrize("path", _files([*FOLDERS, EXPERIMENTS]), ids=_name)
def test_module_docstrings_are_short(path):
    tree = ast.parse(path.read_text())
    if not ast.get_docstring(tree):
        return
    docstring = tree.body[0]
    length = docstring.end_lineno - docstring.lineno + 1
    assert length <= 15, f"a {length}-line module docstring: say the rest in the chapter"


def _names_used(node: ast.AST) -> set[str]:
    """Names a definition's code uses, leaving out annotations (strings at run time here)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        children = [*node.decorator_list, *node.args.defaults, *node.body]
    elif isinstance(node, ast.AnnAssign):
        children = [node.value] if node.value else []
    else:
        children = list(ast.iter_child_nodes(node))
    used = {node.id} if isinstance(node, ast.Name) else set()
    for child in children:
        if not isinstance(child, ast.arg):
            used |= _names_used(child)
    return used


def test_parallel_apply_reads_top_down():
    """The public function comes first, and no definition uses one written above it."""
    tree = ast.parse((PACKAGE / "parallel_apply.py").read_text())
    definitions = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)]
    assert definitions[0].name == "parallel_apply"
    backwards = []
    for position, definition in enumerate(definitions):
        above = {d.name for d in definitions[:position]}
        backwards += [f"{definition.name} uses {name}" for name in _names_used(definition) & above]
    assert backwards == [], "written bottom-up: move the callee below its caller"
