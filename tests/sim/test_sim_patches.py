"""The table of the simulator's changes to torch (`learn_parallel.sim.patches`) against torch.

The tests start seven fresh processes (30 s of CPU in all): two record every attribute
of torch before ``import learn_parallel``, after it and after the first use of a
simulated device (``_torch_snapshot.py``); two run CPU-only code with and without the
import (``_cpu_only_probe.py``); three try what the table says of the first use.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from learn_parallel.sim.patches import FIRST_USE, IMPORT, PATCHES, markdown

HERE = Path(__file__).resolve().parent


def run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LEARN_PARALLEL_SIMULATE"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU machine, where the import registers sim
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def owner_of(dotted: str) -> object:
    """The module or class a dotted path names (its longest importable part, then attributes:
    ``torch.nn.parallel.data_parallel`` is the module, not the function it exports)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            owner = getattr(owner, part)
        return owner
    raise ImportError(dotted)


def key(path: str) -> str:
    """A table's dotted path as the snapshot names it: where the attribute is defined."""
    owner_path, _, name = path.rpartition(".")
    owner = owner_of(owner_path)
    if isinstance(owner, types.ModuleType):
        return f"{owner.__name__}.{name}"
    return f"{owner.__module__}.{owner.__qualname__}.{name}"


def listed(when: str) -> list[str]:
    return [key(path) for patch in PATCHES if patch.when == when for path in patch.attributes]


@pytest.fixture(scope="module")
def changes() -> dict:
    # The torch modules the package and its first use import, imported before the snapshot.
    code = (
        "import sys, torch, learn_parallel\ntorch.nn.Linear(2, 2).to('sim:1')\nprint(*sys.modules)"
    )
    modules = [m for m in run("-c", code).split() if m.startswith("torch") and m != "torch.sim"]
    return json.loads(run(str(HERE / "_torch_snapshot.py"), *modules))


@pytest.mark.parametrize("when", [IMPORT, FIRST_USE])
def test_the_table_lists_every_attribute_that_changes_and_when(changes, when):
    changed = set(changes[when])
    exact = {k for k in listed(when) if not k.endswith(".*")}
    owners = {k[:-1] for k in listed(when) if k.endswith(".*")}  # "Owner." prefixes
    assert exact - changed == set(), "listed, but torch's attribute is not replaced then"
    unlisted = {k for k in changed - exact if not any(k.startswith(o) for o in owners)}
    assert unlisted == set(), "replaced, but not listed for this moment"
    assert all(any(k.startswith(o) for k in changed) for o in owners)


def test_the_registrations_without_attributes_happen_when_the_table_says(changes):
    before, imported, used = changes["registrations"]
    assert imported["packages"] == before["packages"] + 1 == used["packages"]  # at import
    assert before["pin_memory"] == imported["pin_memory"] == "refused"  # torch's, until
    assert used["pin_memory"] == "cpu"  # the first use: a pinned copy is a plain copy
    assert {p.what.split("`")[1] for p in PATCHES if not p.attributes} == {
        "sim",  # its kernels
        "torch.serialization",
        "aten::_pin_memory",
    }


def test_cpu_only_code_sees_torchs_own_objects_and_behaves_as_without_learn_parallel():
    first_use = [path for p in PATCHES if p.when == FIRST_USE for path in p.attributes]
    plain = run(str(HERE / "_cpu_only_probe.py"), "plain", *first_use).splitlines()
    after_import = run(str(HERE / "_cpu_only_probe.py"), "lp", *first_use).splitlines()
    # Then what the table says of torch.accelerator: it names sim, is not available, and
    # asking its current device is a first use.
    assert after_import == plain + ["installed: False", "sim False 0", "0 True 4"]
    assert "torch.Generator: OpaqueBaseMeta torch._C <class 'torch._C.Generator'>" in plain
    probe = (HERE / "_cpu_only_probe.py").read_text().splitlines()
    lines = [n for n, line in enumerate(probe, 1) if line.strip().startswith("F.mse_loss(")]
    assert f"warnings at {[('_cpu_only_probe.py', n) for n in lines]}" in plain  # one a line


FIRST_USES = {
    "a lazy module's move": (
        "bn = torch.nn.LazyBatchNorm1d(affine=False).to('sim:0')  # buffers only\n"
        "lin = torch.nn.LazyLinear(4).to('sim:1')\n"
        "x = torch.ones(2, 3, device='sim:1')\n"
        "print(bn(x.to('sim:0')).device, lin(x).device, lin.weight.shape)\n"
    ),
    "torch.load onto a device": (
        "import io\n"
        "buffer = io.BytesIO()\n"
        "torch.save(torch.ones(2), buffer)\n"
        "buffer.seek(0)\n"
        "print(torch.load(buffer, map_location='sim:1').device, patches.installed())\n"
    ),
}
FIRST_USE_PRINTS = {
    "a lazy module's move": ["sim:0 sim:1 torch.Size([4, 3])"],
    "torch.load onto a device": ["cpu True"],  # a CPU tensor stays on the CPU (the chapter)
}


@pytest.mark.parametrize("first_use", FIRST_USES)
def test_the_first_use_can_be_any_of_these(first_use):
    code = "import torch, learn_parallel\nfrom learn_parallel.sim import patches\n"
    assert run("-c", code + FIRST_USES[first_use]).splitlines() == FIRST_USE_PRINTS[first_use]


def test_after_the_first_use_everything_the_simulator_needs_works():
    code = (
        "import warnings, torch, learn_parallel as lp\n"
        "try:  # before the first use, torch's own Generator refuses sim (the table)\n"
        "    torch.Generator(device='sim:1')\n"
        "except NotImplementedError as refusal:\n"
        "    print('refused:', 'getNewGenerator' in str(refusal))\n"
        "model = torch.nn.Linear(20, 5).to('sim:1')  # the first use\n"
        "x = torch.randn(8, 20, device='sim:1', generator=torch.Generator(device='sim:1'))\n"
        "model(x).sum().backward()\n"
        "print(model.weight.grad.device, x.sim(0).device, torch.accelerator.device_count())\n"
        "dp = torch.nn.DataParallel(torch.nn.Linear(20, 5).to('sim:0'), device_ids=[0, 1])\n"
        "print(dp(x.to('sim:0')).device, torch.ones(2).pin_memory().device)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('default')\n"
        "    torch.nn.functional.mse_loss(model(x)[:, :1], x[:, 0])\n"
        "print([(w.filename, w.lineno) for w in caught])\n"
    )
    assert run("-c", code).splitlines() == [
        "refused: True",
        "sim:1 sim:0 4",
        "sim:0 cpu",
        "[('<string>', 14)]",  # the user's line, not the simulator's
    ]


def test_the_chapter_table_has_a_row_per_patch():
    rows = markdown().splitlines()
    assert rows[:2] == ["| what changes | when | why |", "| --- | --- | --- |"]
    assert len(rows) == 2 + len(PATCHES)
    assert all(row.count(" | ") == 2 for row in rows[2:])  # no cell breaks the table
