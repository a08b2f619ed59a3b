"""An iterator for ``device_ids`` loses what `resolve_devices`' first pass read: a limitation.

`resolve_devices` reads ``ids`` twice (its ``all(...)`` over `Device` values, then the
list of parsed ids), so a generator reaches the second pass without its first id. The fix
(``ids = list(ids)`` first) changes ``learn_parallel/devices.py``, whose code the GPU
recordings measured, so it waits for the next recording. Until then the DataParallel
chapter lists it among the differences from ``torch.nn.DataParallel``, and the intro names
it; these tests hold both to what the code does. Once the fix lands they fail: then drop
the item from the chapter and the intro's sentence, and test the fixed behaviour instead.
"""

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import learn_parallel as lp
from learn_parallel import sim
from learn_parallel.devices import Device, resolve_devices

BOOK = Path(__file__).resolve().parents[2] / "book"


def _markdown(chapter: str) -> str:
    cells = json.loads((BOOK / f"{chapter}.ipynb").read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return " ".join(text.split())


def _ids():
    return (i for i in [0, 1, 2])


@pytest.mark.parametrize("output", [{}, {"output_device": 0}])
def test_ours_loses_a_generators_first_id_without_an_error(output):
    dp = lp.DataParallel(nn.Linear(2, 2), device_ids=_ids(), **output)
    assert dp.device_ids == [1, 2]
    assert dp.src_device == Device("sim", 1)


def test_a_generator_of_devices_leaves_none_and_the_constructor_fails():
    with pytest.raises(IndexError):
        lp.DataParallel(nn.Linear(2, 2), device_ids=(Device("sim", i) for i in [0, 1, 2]))


def test_scatter_replicate_and_data_parallel_read_devices_the_same_way():
    assert resolve_devices(_ids()) == [Device("sim", 1), Device("sim", 2)]
    x = torch.arange(6.0, device="sim:1").reshape(6, 1)
    pieces = lp.scatter(x, _ids())
    assert [str(p.device) for p in pieces] == ["sim:1", "sim:2"]
    model = nn.Linear(1, 1).to("sim:1")
    assert [str(r.weight.device) for r in lp.replicate(model, _ids())] == ["sim:1", "sim:2"]
    assert lp.data_parallel(model, x, device_ids=_ids()).device == torch.device("sim", 1)


def test_torchs_constructor_reads_the_ids_once_and_needs_an_output_device():
    sim.enable()  # torch's DataParallel then picks the simulated devices
    model = nn.Linear(2, 2).to("sim:0")
    theirs = torch.nn.DataParallel(model, device_ids=_ids(), output_device=0)
    assert theirs.device_ids == [0, 1, 2]
    with pytest.raises(TypeError, match="'generator' object is not subscriptable"):
        torch.nn.DataParallel(model, device_ids=_ids())


def test_the_chapters_say_so():
    listed = _markdown("data_parallel")
    for words in [
        "all on purpose but the last, a limitation",
        "`device_ids=(i for i in [0, 1, 2])` gives `device_ids` `[1, 2]`",
        "a generator of `Device` values leaves none, and the constructor fails with an "
        "`IndexError`",
        "with an `output_device` the same generator gives `[0, 1, 2]`; without one it raises "
        "`TypeError`",
        "`scatter`, `replicate` and the `data_parallel` function read their devices the same way",
        "Pass `list(ids)` instead",
        "waits for the next recording",
    ]:
        assert words in listed, words
    intro = _markdown("intro")
    assert "All but one are deliberate" in intro
    assert "loses what the first pass read (the first id, for integer ids)" in intro
