"""Execute one chapter unchanged with nbclient, as record_gpu_runs.sh's ``notebooks`` part does.

    python book/data/run_chapter.py CHAPTER.ipynb OUTDIR

Writes the executed copy to OUTDIR and prints one status line, then the lines the chapter
printed about its devices and recordings (what ran live, what came from a recording).
Exits 1 when a cell raised that is not tagged ``raises-exception``.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

WORDS = ["devices:", "Simulated devices", "GPUs:", "baselines", "recorded", "ranks", "CPU timings"]


def printed(nb: nbformat.NotebookNode) -> list[str]:
    """The printed lines of the executed chapter that contain one of `WORDS`: only from cells
    this run executed (a chapter that stopped keeps its stored outputs below the failure)."""
    lines = []
    for cell in nb.cells:
        if not cell.get("metadata", {}).get("execution"):
            continue  # not run here: nbclient stamps each cell it executes
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            lines += [f"    {line}" for line in text.splitlines() if any(w in line for w in WORDS)]
    return lines


def main(path: Path, out: Path) -> int:
    # Kernels on an encrypted channel, as the book build and execute_chapters.py start them.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
    from kernel_encryption import encrypt_kernel_channels

    encrypt_kernel_channels()
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # the stored run's stamps: only this run's are to be read after
        cell.get("metadata", {}).pop("execution", None)
    start, failed = time.perf_counter(), False
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3").execute()
        status = "ok"
    except Exception as error:  # report the chapter, then fail
        status, failed = f"FAILED: {type(error).__name__}: {str(error)[-600:]}", True
    nbformat.write(nb, out / path.name)
    print(f"{path.name}: {status} ({time.perf_counter() - start:.1f} s)", flush=True)
    for line in printed(nb):
        print(line[:160], flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
