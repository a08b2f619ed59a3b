"""Issue 28: run torch's own nn.DataParallel live beside ours (intro, source_device, pitfalls),
and say in the devices chapter how that works and what simulated devices refuse.

Idempotent: each new cell carries an id ending in "-torchdp28-N" and is inserted once, after
the cell whose source contains the anchor text. Only sources are written; outputs are left
for the re-execution. Run from the repository root: python book/_edits/torchdp28.py
"""

from __future__ import annotations

import json
from pathlib import Path

BOOK = Path(__file__).resolve().parent.parent

INTRO_MD = """\
PyTorch's own `torch.nn.DataParallel` runs on the same devices, simulated ones
included ([how](devices.ipynb#what-simulated-devices-do-not-model)), so the two
can be compared cell by cell. The same batch through both:"""

INTRO_CODE = """\
torch.manual_seed(0)
linear = nn.Linear(3, 2).to(SOURCE)
theirs, ours = torch.nn.DataParallel(linear)(x), lp.DataParallel(linear)(x)
print("torch's:", tuple(theirs.shape), "on", theirs.device)
print("same as ours:", torch.allclose(theirs, ours))"""

SOURCE_MD = """\
Once this package's simulated devices are switched on, PyTorch's own
`DataParallel` finds them as it finds GPUs, so its check runs here beside ours.
The same misplaced layer, in both:"""

SOURCE_CODE = """\
misplaced = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(SOURCE)
misplaced[2].to("meta")
for wrapper in (torch.nn.DataParallel, lp.DataParallel):
    try:
        wrapper(misplaced)(x)
    except RuntimeError as error:
        print(f"{wrapper.__module__}: {error}\\n")"""

PITFALLS_MD = """\
PyTorch's own `DataParallel`, run live on the same devices, does exactly the same:
the same outputs, and the running statistics of the first slice alone."""

PITFALLS_CODE = """\
bn_torch = copy.deepcopy(fresh)
out_torch = torch.nn.DataParallel(bn_torch)(x)
print("outputs equal to ours:", torch.allclose(out_torch, out_parallel))
print(
    f"running_mean: torch {bn_torch.running_mean.item():.4f}, "
    f"ours {bn_parallel.running_mean.item():.4f}"
)"""

DEVICES_MD = """\
Two more things simulated devices do differently:

- **PyTorch's own `DataParallel` runs here too.** `learn_parallel.simulated_comm` gives
  the collectives it calls (`torch.nn.parallel.comm`: scatter, gather,
  broadcast_coalesced) a Python path that splits, copies and joins as CUDA's C++ does,
  installed only when simulated devices are switched on; it does not model NCCL (a
  reduction adds the copies in device order, torch's path without NCCL), copy streams
  or bandwidth, and `torch.cuda.nccl` itself refuses simulated tensors.
- **Moving weights a live graph saved.** `module.to(...)` between a forward pass and
  its `backward()` works on GPUs (the old graph keeps the old storage); here it is
  refused with an error that says to call `backward()` or `del` the output first."""

# chapter -> [(anchor text, [(cell type, source), ...] inserted after the anchor's cell)]
INSERTS = {
    "intro": [
        (
            "print(torch.allclose(out, model(x, torch.arange(10, device=SOURCE))))",
            [("markdown", INTRO_MD), ("code", INTRO_CODE)],
        )
    ],
    "source_device": [
        (
            "For comparison, PyTorch's own `torch.nn.DataParallel` has the same check",
            [("markdown", SOURCE_MD), ("code", SOURCE_CODE)],
        )
    ],
    "pitfalls": [
        (
            "print(torch.allclose(lp.DataParallel(bn_parallel)(x), bn_parallel(x)))",
            [("markdown", PITFALLS_MD), ("code", PITFALLS_CODE)],
        )
    ],
    "devices": [("small = torch.ones(16)", [("markdown", DEVICES_MD)])],
}


def _cell(kind: str, source: str, cell_id: str) -> dict:
    cell = {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source}
    if kind == "code":
        cell |= {"execution_count": None, "outputs": []}
    cell["source"] = source.splitlines(keepends=True)
    return cell


def edit(name: str) -> int:
    path = BOOK / f"{name}.ipynb"
    notebook = json.loads(path.read_text())
    cells = notebook["cells"]
    added = 0
    for number, (anchor, new) in enumerate(INSERTS[name]):
        ids = [f"{name}-torchdp28-{number}-{i}" for i in range(len(new))]
        if any(c.get("id") in ids for c in cells):
            continue  # already inserted
        matches = [i for i, c in enumerate(cells) if anchor in "".join(c["source"])]
        if len(matches) != 1:
            raise SystemExit(f"{name}: anchor found {len(matches)} times: {anchor!r}")
        at = matches[0] + 1
        cells[at:at] = [_cell(k, s, cid) for (k, s), cid in zip(new, ids)]
        added += len(new)
    if added:
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return added


if __name__ == "__main__":
    for chapter in INSERTS:
        print(chapter, edit(chapter), "cells added")
