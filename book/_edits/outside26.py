"""Issue 26 (outside the site): the notebook edits, as an idempotent script.

Run from the repository root: ``python book/_edits/outside26.py``. It edits cell sources
only (cells matched by unique text), keeps metadata, tags and outputs, and can run again:
an edit whose new text is already there is skipped; one whose old text is missing fails.

* teaching.ipynb: the chapters come from ``learn_parallel.classroom.files.book()`` (a
  clone's ``book/``, or the copies a wheel carries), not from ``parents[1] / "book"``; on
  Colab the setup cell installs the package, as every chapter's does.
* every chapter: links to other chapters name the notebook file (``performance.ipynb``),
  which Jupyter, nbconvert HTML and the built site all resolve.
* sentences written before simulated devices became distinct devices, corrected.
* data_parallel.ipynb: the list of deliberate differences from PyTorch, moved from the README,
  as a new Markdown cell before "## Exercises".
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
    (  # opened on Colab, the guide installs the package as every chapter does
        "teaching",
        "import contextlib\nimport io\nimport subprocess\nimport sys\nimport tempfile\n"
        "import time\nfrom pathlib import Path\n\nimport matplotlib.pyplot as plt\n",
        "import contextlib\nimport importlib.util\nimport io\nimport subprocess\nimport sys\n"
        "import tempfile\nimport time\nfrom pathlib import Path\n\n"
        'if importlib.util.find_spec("learn_parallel") is None:  # e.g. on Colab: install the '
        "package\n"
        '    REPO = "git+https://github.com/learn-parallel/learn-parallel"\n'
        '    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", REPO])\n\n'
        "import matplotlib.pyplot as plt\n",
    ),
    # -- sentences from before simulated devices were distinct devices ------------------------
    (
        "scatter",
        "On simulated devices every slice already lives in host memory and\n"
        "`.to()` returns the same tensor, so the left bars show only Python overhead: a reminder "
        "that\na laptop measures host costs, not transfers.",
        "On simulated devices the first slice is already on `sim:0`, so its `.to()` returns the\n"
        "same tensor and its bar is Python overhead alone; every other slice is copied to its\n"
        "device inside host memory, so those bars are a memory "
        "copy, not a transfer over a link: a\n"
        "reminder that a laptop measures host costs, not transfers.",
    ),
    (
        "gather",
        "On simulated devices every bar is a concatenation in host memory.",
        "On simulated devices every bar is a copy, inside host memory, of each piece that is not\n"
        "on the target yet, then a concatenation.",
    ),
    (
        "tuple_parallel",
        "Each output stays where it was computed. On simulated devices every tensor really lives "
        "on the\nCPU, so `out.device` prints `cpu`; on a GPU machine the same cell prints "
        "`cuda:0`, `cuda:1`,\nand so on.",
        "Each output stays where it was computed: `out.device` prints `sim:0`, `sim:1`, and so on\n"
        "on simulated devices, and `cuda:0`, `cuda:1`, and so on on a GPU machine.",
    ),
    (
        "tuple_parallel",
        "On a GPU machine the usual mistake is a piece still sitting on the first GPU. Simulated\n"
        "devices cannot show that mistake, because all of them are backed by the CPU, so the check "
        "can\nonly compare backing torch devices. As in the source-device chapter, the `meta` "
        'device stands\nin for "somewhere else":',
        "The usual mistake is a piece still sitting on the "
        "first device. Simulated devices show it\n"
        "as GPUs do, since each of them is a device of its "
        "own (with a single device, a piece left\n"
        "on the host stands in):",
    ),
    (
        "tuple_parallel",
        'misplaced[-1] = misplaced[-1].to("meta")',
        'misplaced[-1] = misplaced[-1].to(DEVICES[0].torch_device if len(DEVICES) > 1 else "cpu")',
    ),
    (
        "options",
        "On GPUs, leaving the last\npiece on the first GPU is the natural mistake. Simulated "
        "devices all keep their tensors in\nhost memory, so no CPU tensor can be on the *wrong* "
        "one; there a tensor on PyTorch's `meta`\ndevice (which has no data and belongs to no "
        "device) stands in for the misplaced piece.",
        "Leaving the last\npiece on the first device is the natural mistake, and simulated "
        "devices show it as GPUs do,\nsince each of them is a device of its own (with a single "
        "device, a piece left on the host\nstands in).",
    ),
    (
        "options",
        'if KIND == "cuda" and len(DEVICES) > 1:\n'
        "    wrong_place = DEVICES[0].torch_device  # a real GPU, only not the last piece's\n"
        "else:\n"
        '    wrong_place = torch.device("meta")\n',
        "# The first device: a real one, only not the last piece's.\n"
        'wrong_place = DEVICES[0].torch_device if len(DEVICES) > 1 else torch.device("cpu")\n',
    ),
    (
        "options",
        "On simulated devices nothing crosses between devices (every piece is already in host\n"
        "memory), so the left panel shows only what the regathered chain adds on the host: a\n"
        "concatenation of the feature map forward and a split of its gradient backward.",
        "On simulated devices a move between devices is a copy inside host memory, not a transfer\n"
        "over a link, so the left panel shows what the regathered chain adds on the host: copying\n"
        "the feature map's pieces to the source device, joining them and splitting them out again\n"
        "forward, and the same for its gradient backward.",
    ),
    (
        "source_device",
        "On a GPU machine the classic mistake is a model left "
        "on the CPU. On simulated devices the\n"
        "CPU *is* where device memory lives, so we need another wrong place. PyTorch's `meta` "
        "device\nworks on every machine: a tensor there has a shape but no data. Here is a model "
        "whose last\nlayer was (by mistake) moved there:",
        "The classic mistake is a model, or part of one, left on the CPU. The CPU is a device of\n"
        "its own beside simulated devices, as it is beside "
        "GPUs, so the mistake fails the same way\n"
        "on every machine. Here is a model whose last layer was (by mistake) left there:",
    ),
    (
        "source_device",
        'model[2].to("meta")  # the mistake: one layer ends up somewhere else',
        'model[2].to("cpu")  # the mistake: one layer stays on the host',
    ),
    (
        "source_device",
        'bn_model[1].running_mean = torch.zeros(8, device="meta")',
        "bn_model[1].running_mean = torch.zeros(8)  # a buffer made on the host",
    ),
    (
        "source_device",
        "`dp.to(...)` moves the wrapped module with it (`to_empty` allocates memory for the meta\n"
        "tensors, then we initialise them again):",
        "`dp.to(...)` moves the wrapped module with it:",
    ),
    (
        "source_device",
        "dp.to_empty(device=SOURCE)\n"
        "torch.manual_seed(0)\n"
        "for layer in dp.module:\n"
        '    if hasattr(layer, "reset_parameters"):\n'
        "        layer.reset_parameters()\n",
        "dp.to(SOURCE)\n",
    ),
    (
        "source_device",
        'stray[1].to("meta")',
        'stray[1].to("cpu")',
    ),
]


DIFFERENCES = """## Where it differs from `torch.nn.DataParallel`

The signatures are PyTorch's, so a program can swap one `DataParallel` for the other. The
behaviour differs on purpose in a few places, each of them tested:

- bad `device_ids` (empty, duplicated, out of range) get errors that name the fix;
- the forward-pass device check names the offending parameter or buffer;
- tensors of different sizes along the batch dimension in one call raise instead of
  silently pairing rows that do not belong together, a `PackedSequence` is refused
  with the padded alternative, and keyword arguments stay aligned with positional
  ones on batches smaller than the number of devices;
- a replica's exception is raised again as the very same object (type, attributes,
  cause and traceback), with the replica and device added as a note;
- `parallel_apply` keeps one worker thread per device for the life of the process
  (so thread-local caches such as cuDNN's survive between steps: the
  [performance chapter](performance.ipynb) measures it), and workers adopt the caller's
  autocast dtype, not only whether autocast is on, and its saved-tensor hooks
  (`save_on_cpu`);
- replicas expose their parameter copies through `replica.parameters()`;
- non-tensor outputs are gathered into a list with one value per replica."""

# (notebook, first line of the cell to insert before, new Markdown cell): moved from the README.
INSERTIONS: list[tuple[str, str, str]] = [("data_parallel", "## Exercises", DIFFERENCES)]


def insert_before(notebook: nbformat.NotebookNode, name: str, heading: str, text: str) -> bool:
    """Insert a Markdown cell before the one cell that starts with ``heading``; False if a
    cell with the new cell's first line is already there."""
    first = text.splitlines()[0]
    if any(c.source.startswith(first) for c in notebook.cells):
        return False
    at = [i for i, c in enumerate(notebook.cells) if c.source.startswith(heading)]
    if len(at) != 1:
        raise SystemExit(f"{name}: {len(at)} cells start with {heading!r}")
    notebook.cells.insert(at[0], nbformat.v4.new_markdown_cell(text))
    return True


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
    for name, heading, text in INSERTIONS:
        if insert_before(notebooks[name], name, heading, text):
            changed.setdefault(name, []).append(f"inserted {text.splitlines()[0]!r}")
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
