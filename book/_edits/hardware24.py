"""Issue 24's chapter edits: the devices chapter explains the device plan and, on a one-GPU
machine, uses the GPU for the copy simulated devices cannot time. Idempotent."""

import json
import sys
from pathlib import Path

BOOK = Path(sys.argv[1] if len(sys.argv) > 1 else "book")

PLAN_TEXT = """## Which devices the chapters use

Every chapter starts with the same setup (`learn_parallel/lab/chapter.py`), which decides once
what this machine runs the lessons on. With two or more GPUs, they run on the GPUs. With one
GPU (Colab's) or none, a lesson about splitting a batch cannot run on one device, so they run
on simulated devices, at least two of them, and the setup says so in one printed line; a lone
GPU is then `GPU`, used where one device is enough. Cells that need several real GPUs (NCCL
between processes, per-GPU CUDA-event timings) show the run recorded on H200s and say why."""

PLAN_CODE = """show_source("learn_parallel.devices.simulate_for_lessons")"""

COPY_TEXT = """One thing a lone GPU shows that simulated devices cannot: what a copy to a
device costs. On simulated devices a copy is a memory copy inside host RAM; to a GPU it
crosses the PCIe bus (timed with CUDA events on that GPU). Without a GPU, only the first
line prints."""

COPY_CODE = """block = torch.randn(2**22)  # 16 MiB of float32 in host memory
to_sim = time_ms(lambda: block.to(DEVICES[1].torch_device), DEVICES[1])
print(f"16 MiB host -> {DEVICES[1]}: {to_sim:.2f} ms (host clock, {DEVICES[1].describe()})")
if GPU is not None:  # one real GPU beside the simulated devices
    to_gpu = time_ms(lambda: block.to(GPU), Device("cuda", GPU.index))
    name = torch.cuda.get_device_name(GPU)
    print(f"16 MiB host -> {GPU}: {to_gpu:.2f} ms (CUDA events, {name})")"""


def cell(kind: str, text: str, tags: list[str] | None = None) -> dict:
    c = {
        "cell_type": kind,
        "metadata": {"tags": tags} if tags else {},
        "source": text.splitlines(True),
    }
    if kind == "code":
        c.update(execution_count=None, outputs=[])
    return c


def insert_after(cells: list, marker: str, new: list) -> None:
    if any("".join(c["source"]) == "".join(new[0]["source"]) for c in cells):
        return  # already applied
    hits = [i for i, c in enumerate(cells) if marker in "".join(c["source"])]
    assert len(hits) == 1, (marker, hits)
    cells[hits[0] + 1 : hits[0] + 1] = new


path = BOOK / "devices.ipynb"
nb = json.loads(path.read_text())
insert_after(
    nb["cells"],
    'show_source("learn_parallel.devices.device_count")',
    [cell("markdown", PLAN_TEXT), cell("code", PLAN_CODE, ["remove-input"])],
)
insert_after(
    nb["cells"],
    "del block",
    [cell("markdown", COPY_TEXT), cell("code", COPY_CODE, ["nbval-ignore-output"])],
)
for i, c in enumerate(nb["cells"]):
    c.setdefault("id", f"devices-{i:02d}-h24")
path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
print("edited", path)
