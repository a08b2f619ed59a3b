"""Every chapter runs, unchanged, with 1, 2 and 3 simulated devices (the default 4 is what the
book build and nbval execute). No cell may raise except those tagged ``raises-exception``,
which show an error on purpose. With 1 the setup raises the count to 2 and says so.

The one-GPU case is tests/gpu/test_gpu_one.py plus `book/data/record_gpu_runs.sh` (PARTS=notebooks)
on a one-GPU machine: learn_parallel/lab/recorded/h100-x1/notebooks.log.
"""

from __future__ import annotations

import os

import pytest
from _book import BOOK, ROOT

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

CHAPTERS = sorted(BOOK.glob("*.ipynb"))


def execute(path, count: int) -> list[str]:
    """Run ``path`` with ``count`` simulated devices; the setup cell's printed lines."""
    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    env.update(
        LEARN_PARALLEL_SIMULATE="1",
        LEARN_PARALLEL_SIMULATED_DEVICES=str(count),
        PYTHONPATH=str(ROOT),
    )
    client = nbclient.NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(BOOK)}})
    with client.setup_kernel(env=env):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)  # raises unless the cell is tagged raises-exception
    code = [c for c in nb.cells if c.cell_type == "code"]
    first = code[0].outputs if code else []  # the glossary has no code
    return [o.get("text", "") for o in first if o.output_type == "stream"]


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_runs_with_this_many_simulated_devices(chapter, count):
    printed = "".join(execute(chapter, count))
    if chapter.stem in ("teaching", "glossary"):
        return  # no device plan printed: the guide and the glossary
    devices = max(count, 2)
    assert printed.startswith(f"{devices} devices: sim:0 (simulated on the CPU)"), printed
    if count == 1:
        assert "LEARN_PARALLEL_SIMULATED_DEVICES=1 raised to 2" in printed, printed
