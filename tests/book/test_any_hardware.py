"""Every chapter runs, unchanged, on fewer simulated devices than nbval's four: two, or one
for a chapter without the shared setup. No cell may raise except those tagged
``raises-exception``, which show an error on purpose.

Which runs prove what, so that no chapter is executed more often than it needs:

* 4 devices, the default, is what nbval executes (``test_book.py``): more than two devices, and
  the uneven splits the chapters show on purpose (10 rows on 4 devices: 3, 3, 3, 1).
* 2 is the fewest a lesson runs on (also what a laptop set to 1 gets): a chapter that indexes a
  third device fails here. The measurements that sweep device counts (1, 2, 4 up to the
  devices there are) run their 2-device case in the 4-device run as well.
* 1 is raised to 2 by the shared setup cell (``lab.chapter``), so for a chapter that opens
  with that cell a run with 1 is the run with 2: the setup's message is checked once in
  ``test_chapter_plan.py``, and each such chapter's first code cell is checked here. The one
  page without the shared setup, the teacher's guide, runs with 1 (nothing raises its own
  count; its check-timing cell runs every chapter's setup, 1 raised to 2, and every exercise's
  solution and check) in ``test_standalone.py``, from the wheel: one run proves both.
* The glossary has no code.

The one-GPU case is tests/gpu/test_gpu_one.py plus `book/data/record_gpu_runs.sh`
(PARTS=notebooks) on a one-GPU machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _book import BOOK, ROOT

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (Jupyter)")

SHARED_SETUP = "from learn_parallel.lab.chapter import *"


def _first_code(path) -> str | None:
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    return code[0].source if code else None


CHAPTERS = [p for p in sorted(BOOK.glob("*.ipynb")) if _first_code(p) is not None]
WITH_SETUP = [p for p in CHAPTERS if SHARED_SETUP in _first_code(p)]
RUNS = [(p, 2) for p in WITH_SETUP]  # the teacher's guide: test_standalone.py, with 1


class Kernel:
    """One kernel with ``count`` simulated devices, for every chapter a test worker runs at
    that count: starting a kernel and importing torch again for each chapter cost more than
    most chapters' own cells on a 2-core machine. Between chapters the kernel forgets every
    name (``%reset -f``), closes its figures, returns to ``book/`` and imports the shared
    setup afresh; other modules stay imported, as after a chapter's own setup cell."""

    def __init__(self, count: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
        env.update(
            LEARN_PARALLEL_SIMULATE="1",
            LEARN_PARALLEL_SIMULATED_DEVICES=str(count),
            PYTHONPATH=str(ROOT),
        )
        blank = nbformat.v4.new_notebook()
        self.client = nbclient.NotebookClient(
            blank, timeout=600, resources={"metadata": {"path": str(BOOK)}}
        )
        self.client.km = self.client.create_kernel_manager()
        self.client.start_new_kernel(env=env)
        self.client.start_new_kernel_client()

    def run(self, nb) -> None:
        # nbclient stores an executed cell back at its index: the reset runs in a notebook
        # of its own, so the chapter's cells keep theirs
        fresh = nbformat.v4.new_code_cell(RESET.format(book=str(BOOK)))
        self.client.nb = nbformat.v4.new_notebook(cells=[fresh])
        self.client.execute_cell(fresh, 0)
        self.client.nb = nb
        for index, cell in enumerate(nb.cells):
            self.client.execute_cell(cell, index)  # raises unless tagged raises-exception

    def close(self) -> None:
        self.client._cleanup_kernel()


# The shared setup works at its module's import (the device plan, seeds, threads): that
# module is imported afresh, as in a new kernel.
RESET = """%reset -f
__spec__ = None  # as in a new kernel (%reset removes it; multiprocessing's spawn reads it)
import os, sys, matplotlib.pyplot
matplotlib.pyplot.close("all")
os.chdir({book!r})
sys.modules.pop("learn_parallel.lab.chapter", None)
del os, sys, matplotlib"""


@pytest.fixture(scope="module")
def kernels():
    started: dict[int, Kernel] = {}
    yield started
    for kernel in started.values():
        kernel.close()


def execute(path, count: int, kernels: dict) -> list[str]:
    """Run ``path`` with ``count`` simulated devices; the setup cell's printed lines."""
    nb = nbformat.read(path, as_version=4)
    if count not in kernels:
        kernels[count] = Kernel(count)
    kernels[count].run(nb)
    first = next(c for c in nb.cells if c.cell_type == "code").outputs
    return [o.get("text", "") for o in first if o.output_type == "stream"]


def test_only_the_teachers_guide_runs_elsewhere():
    """Every page with code runs here, but the guide, whose one-device run is the wheel's."""
    assert [p.stem for p in CHAPTERS if p not in WITH_SETUP] == ["teaching"]
    standalone = (Path(__file__).parent / "test_standalone.py").read_text()
    assert 'LEARN_PARALLEL_SIMULATED_DEVICES="1"' in standalone


def test_chapters_open_with_the_shared_setup():
    """The device plan, and with it the raising of 1 device to 2, lives in one cell."""
    assert len(WITH_SETUP) >= len(CHAPTERS) - 1, [p.stem for p in CHAPTERS if p not in WITH_SETUP]
    for path in WITH_SETUP:
        assert _first_code(path).count("import *") == 1, path.name


@pytest.mark.parametrize(("chapter", "count"), RUNS, ids=lambda v: getattr(v, "stem", v))
def test_chapter_runs_with_this_many_simulated_devices(chapter, count, kernels):
    printed = "".join(execute(chapter, count, kernels))
    assert printed.startswith(f"{count} devices: sim:0 (simulated on the CPU)"), printed
