"""Solutions become a labelled reveal (issue 26, item 3); idempotent, edits sources only.

Run from the repository root: ``python book/_edits/grade25.py``. For every chapter:

* each code cell tagged ``solution`` becomes a Markdown cell holding the same code in a
  collapsed ``<details>`` block whose summary reads *Solution*
  (`learn_parallel.classroom.notebooks.solution_markdown`): collapsed in the built site,
  JupyterLab, classic Notebook, Colab and nbconvert's HTML alike. Its id, its ``solution``
  tag and its other metadata stay; ``hide-input`` and ``jupyter.source_hidden`` go (nothing
  to hide: the block is closed until clicked); it has no outputs;
* the sentence that tells readers where the solutions are says what to click;
* the performance chapter's two cells that used the solution's functions use the
  reader's own, once it passes its check (the solution no longer runs in the chapter).

Running it again changes nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from learn_parallel.classroom.notebooks import solution_markdown  # noqa: E402

WHERE_SOLUTIONS_ARE = (
    "In the book a collapsed solution follows each check (click to show it); the student "
    "copies leave the solutions out."
)
CLICK = (
    "Under each check cell, a folded line labelled **Solution** holds the reference answer: "
    "click it to open the code (in the site, Jupyter and Colab alike), paste it into the stub "
    "cell and run the check. The student copies leave the solutions out."
)
INTRO_OLD = "  on the hidden solution: open the *Solution* box only after trying."
INTRO_NEW = (
    "  on the reference solution, folded under the check in a line labelled **Solution**:\n"
    "  click it to open the code, only after trying."
)

EFFICIENCY_CELL = """from learn_parallel.classroom import passes

resnet = RECORDED.bench_results("conv-cudnn-benchmark-off") if RECORDED else []
if not passes("perf-efficiency", efficiency):
    print("Write efficiency above (or paste its solution) and run this cell again.")
elif resnet:
    for impl in ("learn_parallel", "torch_dp", "ddp"):
        print(impl, {n: round(e, 2) for n, e in efficiency(resnet, impl).items()})"""
EFFICIENCY_MARK = "print(impl, {n: round(e, 2) for n, e in efficiency(resnet, impl).items()})"
SHARE_CELL = """if not passes("perf-forward-share", forward_share):
    print("Write forward_share above (or paste its solution) and run this cell again.")
elif RECORDED:
    print(f"cuda:0 spends {forward_share(timeline, 'cuda:0'):.0%} of the step in forward")"""
SHARE_MARK = "forward_share(timeline, 'cuda:0'):.0%} of the step in forward"


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def _set_source(cell: dict, text: str) -> None:
    cell["source"] = text.splitlines(keepends=True)


def _solution_cell(cell: dict) -> dict:
    metadata = dict(cell.get("metadata", {}))
    metadata["tags"] = [t for t in metadata.get("tags", []) if t != "hide-input"]
    jupyter = {k: v for k, v in metadata.pop("jupyter", {}).items() if k != "source_hidden"}
    if jupyter:
        metadata["jupyter"] = jupyter
    metadata.pop("execution", None)
    new = {"cell_type": "markdown", "metadata": metadata, "source": []}
    if "id" in cell:
        new["id"] = cell["id"]
    _set_source(new, solution_markdown(_source(cell)))
    return new


def convert(notebook: dict) -> bool:
    """Edit ``notebook`` in place; True if anything changed."""
    changed = False
    for index, cell in enumerate(notebook["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        text = _source(cell)
        if cell["cell_type"] == "code" and "solution" in tags:
            notebook["cells"][index] = _solution_cell(cell)
            changed = True
        elif cell["cell_type"] == "markdown" and WHERE_SOLUTIONS_ARE in text:
            _set_source(cell, text.replace(WHERE_SOLUTIONS_ARE, CLICK))
            changed = True
        elif cell["cell_type"] == "markdown" and INTRO_OLD in text:
            _set_source(cell, text.replace(INTRO_OLD, INTRO_NEW))
            changed = True
        elif cell["cell_type"] == "code" and "passes(" not in text:
            for mark, replacement in ((EFFICIENCY_MARK, EFFICIENCY_CELL), (SHARE_MARK, SHARE_CELL)):
                if mark in text:
                    _set_source(cell, replacement)
                    changed = True
    return changed


def main() -> None:
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        if convert(notebook):
            text = json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True)
            path.write_text(text + "\n", encoding="utf-8")
            print(f"converted {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
