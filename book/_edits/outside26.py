"""Issue 26 (outside the site): the notebook edits, as an idempotent script.

Run from the repository root: ``python book/_edits/outside26.py``. It edits cell sources
only (cells matched by unique text), keeps metadata, tags and outputs, and can run again:
an edit whose new text is already there is skipped; one whose old text is missing fails.

* teaching.ipynb: the chapters come from ``learn_parallel.classroom.files.book()`` (a
  clone's ``book/``, or the copies a wheel carries), not from ``parents[1] / "book"``.
* every chapter: links to other chapters name the notebook file (``performance.ipynb``),
  which Jupyter, nbconvert HTML and the built site all resolve.
* sentences written before simulated devices became distinct devices, corrected.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

BOOK = Path(__file__).resolve().parents[1]

# (notebook, old text, new text): old must occur in exactly one cell.
REPLACEMENTS: list[tuple[str, str, str]] = [
    (
        "teaching",
        "import learn_parallel\nfrom learn_parallel.classroom import exercises\n",
        "from learn_parallel.classroom import exercises, files\n",
    ),
    (
        "teaching",
        "ROOT = Path(learn_parallel.__file__).resolve().parents[1]\n"
        'BOOK = ROOT / "book"  # the chapters: a checkout of the repository\n',
        "BOOK = files.book()  # the chapters: book/ of a clone, or the copies the wheel carries\n",
    ),
]


def replace(notebook: nbformat.NotebookNode, name: str, old: str, new: str) -> bool:
    """Replace ``old`` by ``new`` in the one cell that holds it; False if already done."""
    holding = [c for c in notebook.cells if old in c.source]
    if not holding and any(new in c.source for c in notebook.cells):
        return False
    if len(holding) != 1:
        raise SystemExit(f"{name}: {len(holding)} cells hold {old[:60]!r}")
    holding[0].source = holding[0].source.replace(old, new)
    return True


# [text](chapter) -> [text](chapter.ipynb), also with a #anchor; only names of chapters.
LINK = re.compile(r"\]\((?P<name>[a-z_]+)(?P<anchor>#[\w-]+)?\)")


def link_files(notebook: nbformat.NotebookNode, chapters: set[str]) -> int:
    """Rewrite links to other chapters to name their notebook file; return how many."""
    count = 0

    def fix(match: re.Match) -> str:
        nonlocal count
        if match["name"] not in chapters:
            return match[0]
        count += 1
        return f"]({match['name']}.ipynb{match['anchor'] or ''})"

    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = LINK.sub(fix, cell.source)
    return count


def main() -> int:
    chapters = {p.stem for p in BOOK.glob("*.ipynb")}
    notebooks = {p.stem: nbformat.read(p, as_version=4) for p in sorted(BOOK.glob("*.ipynb"))}
    changed: dict[str, list[str]] = {}
    for name, old, new in REPLACEMENTS:
        if replace(notebooks[name], name, old, new):
            changed.setdefault(name, []).append(f"replaced {old.splitlines()[0][:50]!r}")
    for name, notebook in notebooks.items():
        links = link_files(notebook, chapters)
        if links:
            changed.setdefault(name, []).append(f"{links} chapter links now name the .ipynb")
    for name, what in changed.items():
        nbformat.write(notebooks[name], BOOK / f"{name}.ipynb")
        print(f"{name}.ipynb: " + "; ".join(what))
    if not changed:
        print("nothing to change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
