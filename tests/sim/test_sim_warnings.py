"""Warnings raised through the simulator name the line that would raise them on a GPU.

torch issues them while `SimTensor.__torch_function__` runs, so Python alone would name a
line of learn_parallel/sim/tensor.py, and its default filter would then show the same
warning from two lines of the user's once (`learn_parallel.sim.warning_frames`).
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import learn_parallel as lp
from learn_parallel import sim

HERE = str(Path(__file__).resolve())
SIZE_WARNING = "Using a target size (torch.Size(["  # then the sizes, which differ


@pytest.fixture(autouse=True)
def _on():
    sim.enable()


def caught(action: str, code) -> list[tuple[str, int, str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter(action)
        code()
    return [(Path(w.filename).name, w.lineno, str(w.message)) for w in seen]


def line_of(text: str) -> int:
    """The line of this file that holds ``text`` (once)."""
    source = Path(HERE).read_text().splitlines()
    lines = [n for n, line in enumerate(source, 1) if text in line and "line_of(" not in line]
    assert len(lines) == 1, lines
    return lines[0]


def two_lines(device: str) -> None:
    x, target = torch.ones(3, 1, device=device), torch.ones(3, device=device)
    F.mse_loss(x, target)  # first line
    F.mse_loss(x, target)  # second line


@pytest.mark.parametrize("device", ["cpu", "sim:1"])
def test_the_same_warning_from_two_lines_shows_twice_at_those_lines(device):
    seen = caught("default", lambda: two_lines(device))
    where = [(name, line) for name, line, _ in seen]
    lines = [line_of("# first line"), line_of("# second line")]
    assert where == [("test_sim_warnings.py", n) for n in lines]
    assert all(message.startswith(SIZE_WARNING) for _, _, message in seen)


@pytest.mark.parametrize("device", ["cpu", "sim:1"])
def test_a_warning_inside_torch_names_torchs_line_as_on_the_cpu(device):
    x, target = torch.ones(3, 1, device=device), torch.ones(3, device=device)
    seen = caught("always", lambda: nn.MSELoss()(x, target))
    source, first = inspect.getsourcelines(nn.MSELoss.forward)
    line = first + next(n for n, text in enumerate(source) if "F.mse_loss(" in text)
    assert [(name, at) for name, at, _ in seen] == [("loss.py", line)]


def test_a_warning_of_torchs_cpp_names_the_users_line():
    y = torch.ones(2, device="sim:0", requires_grad=True)
    assert caught("always", lambda: y.grad) == []  # a leaf: nothing to say
    z = y * 2
    seen = caught("always", lambda: z.grad)  # the .grad of a non-leaf: torch's C++ warns
    assert [(name, at) for name, at, _ in seen] == [("test_sim_warnings.py", line_of("z.grad)"))]


def test_a_warning_in_a_replicas_worker_names_the_modules_line():
    class Loss(nn.Module):
        def forward(self, x):
            return F.mse_loss(x, x[:, 0])  # the module's line

    model = lp.DataParallel(Loss(), device_ids=[0, 1])
    seen = caught("always", lambda: model(torch.ones(4, 1, device="sim:0")))
    seen = [w for w in seen if w[2].startswith(SIZE_WARNING)]  # not gather's about scalars
    assert {(name, at) for name, at, _ in seen} == {
        ("test_sim_warnings.py", line_of("# the module's line"))
    }
    assert len(seen) == 2  # one per replica


def test_filters_apply_at_the_users_line():
    def quiet_here() -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", module=__name__)  # this test module only
            two_lines("sim:1")
        assert seen == []

    quiet_here()
    with warnings.catch_warnings(), pytest.raises(UserWarning, match="Using a target size"):
        warnings.simplefilter("error")
        two_lines("sim:1")
