"""Execute chapters in place, the way the book's tests expect their stored outputs.

    python book/execute_chapters.py                  # every chapter, two at a time
    python book/execute_chapters.py scatter gather   # some of them
    python book/execute_chapters.py --jobs 1 scatter

Each chapter runs in a kernel of its own, on the default four simulated devices
(``LEARN_PARALLEL_SIMULATE=1``, as nbval runs them in ``tests/book/test_book.py``), with
this repository first on the kernel's path and tracebacks naming files as imports do
(``book/_ext/short_tracebacks.py``) and talking to this script over an encrypted channel
(``book/_ext/kernel_encryption.py``), and is written back with its outputs. Run it after a
change to the package or a chapter; nbval then checks that a fresh run reproduces them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
EXTENSIONS = BOOK / "_ext"


def execute(path: Path) -> str:
    """Execute ``path`` and write it back; one line saying how it went."""
    import nbformat
    from nbclient import NotebookClient

    sys.path.insert(0, str(EXTENSIONS))
    from kernel_encryption import encrypt_kernel_channels
    from short_tracebacks import KERNEL_ARGUMENT

    encrypt_kernel_channels()  # as the book's build does: no warning about plain TCP

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    env["LEARN_PARALLEL_SIMULATE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(EXTENSIONS), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        extra_arguments=[KERNEL_ARGUMENT],
        resources={"metadata": {"path": str(BOOK)}},
    )
    start = time.perf_counter()
    with client.setup_kernel(env=env):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)  # raises unless the cell is tagged raises-exception
    # Written beside it, then renamed: a chapter that reads others (teaching) never sees a
    # half-written one.
    partial = path.with_name(f".{path.name}.partial")
    nbformat.write(nb, partial)
    partial.replace(path)
    return f"{path.name}: executed in {time.perf_counter() - start:.0f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter names (default: every chapter)")
    parser.add_argument("--jobs", type=int, default=2, help="chapters at a time (default 2)")
    args = parser.parse_args(argv)
    names = args.chapters or sorted(p.stem for p in BOOK.glob("*.ipynb"))
    paths = [BOOK / f"{name.removesuffix('.ipynb')}.ipynb" for name in names]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such chapter: {', '.join(missing)}")
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        for line in pool.map(execute, paths):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
