"""OptionsDataParallel (DataParallel with options): gather_to_one_device, inputs_are_scattered,
except_keywords, sort_and_gather, and gather_per_device.

What these tests prove: each option puts every value where it says (per-device
tuples in device_ids order, replica i fed the i-th value), mistakes get errors
that name the fix, and chains of wrapped networks (the tutorial's two test
cases among them) give the outputs, gradients and optimizer steps of one device
running the plain networks. Equivalence runs in float64 with rtol=1e-10,
atol=1e-12 (sums over devices are only reordered).

Simulated devices are distinct torch devices (``sim:i``), so "sits on device
i" is checked as on GPUs: models start on device_ids[0], per-device inputs on
their devices, and references run on the CPU.
"""

from __future__ import annotations

import copy
import threading
from collections import namedtuple

import pytest
import torch
from torch import nn

from learn_parallel import OptionsDataParallel, PerDevice, device_type, gather_per_device
from learn_parallel.devices import resolve_devices

TOL = {"rtol": 1e-10, "atol": 1e-12}
Out = namedtuple("Out", ["a", "b"])


def gpus(n: int):
    """Skip unless this machine has at least n GPUs."""
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pytest.mark.skipif(have < n, reason=f"needs {n} CUDA GPUs, found {have}")


def on_gpu() -> bool:
    # Not torch.cuda.is_available(): on a GPU box the CPU tests still run on
    # simulated devices (conftest sets LEARN_PARALLEL_SIMULATE=1 for them).
    return device_type() == "cuda"


def source_of(device_ids) -> torch.device:
    return resolve_devices([device_ids[0]])[0].torch_device


def on(module: nn.Module, device_ids) -> nn.Module:
    """The module on device_ids[0], where DataParallel expects it."""
    return module.to(source_of(device_ids))


def spread(values, device_ids=(0, 1, 2, 3)) -> tuple:
    """Value i moved to device_ids[i], as inputs_are_scattered=True expects."""
    return tuple(v.to(resolve_devices([d])[0].torch_device) for v, d in zip(values, device_ids))


def batch(rows: int = 16, features: int = 5, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, features, generator=gen, dtype=torch.float64)


def linear(inputs: int, outputs: int, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(inputs, outputs).double()


class Structured(nn.Module):
    """Returns a nested output, to see where each leaf ends up."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = linear(5, 2, 0)

    def forward(self, x: torch.Tensor) -> dict:
        y = self.linear(x)
        return {"y": y, "pair": Out(y * 2, None), "rows": [x], "name": "structured"}


class Tagger(nn.Module):
    """Notes which value of ``x`` and ``extra`` each worker thread received."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = linear(5, 2, 1)
        self.seen: dict = {}

    def forward(self, x: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        self.seen[threading.current_thread().name] = (float(x[0, 0]), float(extra[0]))
        return self.linear(x) + extra[:, None]


def grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone().cpu() for p in module.parameters()]


def assert_close_all(actual, expected) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e.cpu(), **TOL)


# ---------------------------------------------------------------- gather_to_one_device=False


@pytest.mark.parametrize("n", [2, 3, 4])
def test_not_gathered_every_tensor_leaf_becomes_a_per_device_tuple(n):
    model = Structured()
    x = batch()
    reference = model(x)
    out = OptionsDataParallel(
        on(model, [0]), device_ids=list(range(n)), gather_to_one_device=False
    )(x)
    pieces = reference["y"].chunk(n)
    assert isinstance(out["y"], tuple) and len(out["y"]) == n
    assert [y.device.index for y in out["y"]] == list(range(n))  # each left where computed
    assert_close_all(out["y"], pieces)
    assert isinstance(out["pair"], Out) and out["pair"].b is None
    assert_close_all(out["pair"].a, [p * 2 for p in pieces])
    assert_close_all(out["rows"][0], x.chunk(n))
    assert out["name"] == ("structured",) * n  # non-tensor leaves: one per device too


def test_not_gathered_on_one_device_still_gives_one_element_tuples():
    out = OptionsDataParallel(on(Structured(), [0]), device_ids=[0], gather_to_one_device=False)(
        batch()
    )
    assert isinstance(out["y"], tuple) and len(out["y"]) == 1


def test_not_gathered_short_batch_gives_as_many_values_as_pieces():
    out = OptionsDataParallel(
        on(linear(5, 2, 0), [0]), device_ids=[0, 1, 2, 3], gather_to_one_device=False
    )(batch(rows=3))
    assert len(out) == 3


# ---------------------------------------------------------------- inputs_are_scattered=True


@pytest.mark.parametrize("n", [2, 3, 4])
def test_scattered_inputs_replica_i_gets_value_i_of_every_argument(n):
    model = Tagger()
    xs = batch().chunk(n)
    extras = tuple(torch.full((len(x),), 100.0 + i, dtype=torch.float64) for i, x in enumerate(xs))
    reference = torch.cat([model.linear(x) + e[:, None] for x, e in zip(xs, extras)])
    dp = OptionsDataParallel(on(model, [0]), device_ids=list(range(n)), inputs_are_scattered=True)
    out = dp(list(spread(xs)), extra=spread(extras))  # a list works as well as a tuple
    assert model.seen == {
        f"learn_parallel worker sim:{i}": (float(xs[i][0, 0]), 100.0 + i) for i in range(n)
    }
    torch.testing.assert_close(out.cpu(), reference, **TOL)  # gathered in device_ids order


def test_scattered_inputs_with_fewer_values_run_fewer_replicas():
    model = on(Tagger(), [0])
    xs = spread(batch(rows=2).chunk(2))
    dp = OptionsDataParallel(model, device_ids=[0, 1, 2, 3], inputs_are_scattered=True)
    out = dp(xs, extra=spread((torch.zeros(1), torch.zeros(1))))
    assert out.shape == (2, 2) and len(model.seen) == 2


def test_scattered_inputs_errors_name_the_problem_and_the_fix():
    dp = OptionsDataParallel(on(Tagger(), [0]), device_ids=[0, 1], inputs_are_scattered=True)
    xs = spread(batch().chunk(2))
    extra = spread((torch.zeros(8), torch.zeros(8)))
    with pytest.raises(TypeError, match=r"argument 0 is a Tensor.*gather_to_one_device=False"):
        dp(batch(), extra=extra)
    with pytest.raises(TypeError, match="keyword argument 'extra' is a Out"):
        dp(xs, extra=Out(*extra))
    with pytest.raises(
        ValueError, match=r"got 3 per-device values.*has 2 devices \(\[sim:0, sim:1\]\)"
    ):
        dp(batch(rows=24).chunk(3), extra=(torch.zeros(8),) * 3)
    with pytest.raises(ValueError, match="argument 0 has 2, keyword argument 'extra' has 1"):
        dp(xs, extra=extra[:1])
    for wrong in ("meta", "cpu", "sim:0"):  # sim:0 is a device, but not this piece's
        misplaced = (xs[0], xs[1].to(wrong))
        with pytest.raises(
            RuntimeError,
            match=rf"argument 0\[1\] is on {wrong}, but it goes to sim:1 .*device_ids\[1\]",
        ):
            dp(misplaced, extra=extra)


# ---------------------------------------------------------------- except_keywords


class Features(nn.Module):
    """The tutorial's second feature network: one output under several dict keys."""

    def __init__(self) -> None:
        super().__init__()
        self.model = linear(5, 2, 2)

    def forward(self, x: torch.Tensor) -> dict:
        out = self.model(x)
        return {"outputs": {"out1": out, "out2": out}, "second_output": out}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_except_keywords_keep_their_subtrees_apart_and_gather_the_rest(n):
    model = Features()
    x = batch()
    reference = model.model(x)
    out = OptionsDataParallel(
        on(model, [0]), device_ids=list(range(n)), except_keywords=["out1", "out2"]
    )(x)
    torch.testing.assert_close(out["second_output"].cpu(), reference, **TOL)
    for key in ("out1", "out2"):
        assert isinstance(out["outputs"][key], tuple)
        assert_close_all(out["outputs"][key], reference.chunk(n))


def test_except_keywords_match_at_any_depth_and_keep_the_whole_subtree():
    class Deep(nn.Module):
        def forward(self, x):
            return [{"a": {"keep": {"x": x, "more": [x]}, "b": x}}, x]

    out = OptionsDataParallel(Deep(), device_ids=[0, 1], except_keywords=("keep",))(batch())
    assert [t.device.index for t in out[0]["a"]["keep"]["x"]] == [0, 1]
    kept = out[0]["a"]["keep"]
    assert len(kept["x"]) == 2 and len(kept["more"][0]) == 2
    assert out[0]["a"]["b"].shape == (16, 5) and out[1].shape == (16, 5)


def test_except_keywords_as_a_bare_string_is_refused():
    with pytest.raises(TypeError, match=r"got the string 'out1'; write except_keywords=\['out1'\]"):
        OptionsDataParallel(Features(), device_ids=[0, 1], except_keywords="out1")


def test_default_options_keep_pytorch_behaviour():
    dp = OptionsDataParallel(on(Features(), [0]), device_ids=[0, 1])
    out = dp(batch())
    assert out["outputs"]["out1"].shape == (16, 2)  # everything gathered
    assert "gather_to_one_device" not in repr(dp)
    assert OptionsDataParallel(on(linear(5, 1, 0), [0]), device_ids=[0])(batch()).shape == (16, 1)
    options = OptionsDataParallel(Features(), [0, 1], except_keywords=["out2", "out1"])
    assert "except_keywords=['out1', 'out2']" in repr(options)


# ---------------------------------------------------------------- sort_and_gather


class RowIds(nn.Module):
    """Returns its input rows untouched: shows where each row ends up."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return rows + 0 * self.unused


@pytest.mark.parametrize("device_ids", [[0, 1], [1, 0], [2, 0, 1], [1, 2], [3, 1, 0, 2]])
def test_sort_and_gather_keeps_batch_order_for_any_device_order(device_ids):
    rows = torch.arange(10, dtype=torch.float64)[:, None]
    model = on(RowIds(), device_ids)
    kept = OptionsDataParallel(model, device_ids, gather_to_one_device=False)(rows)
    assert [k.device.index for k in kept] == device_ids
    gathered = OptionsDataParallel(
        model, device_ids, inputs_are_scattered=True, sort_and_gather=True
    )(kept)
    assert gathered.device == source_of(device_ids)
    torch.testing.assert_close(gathered.cpu(), rows)
    torch.testing.assert_close(gather_per_device(kept, "cpu"), rows)


def test_sort_and_gather_refuses_options_that_keep_outputs_apart():
    for option in ({"gather_to_one_device": False}, {"except_keywords": ["out1"]}):
        with pytest.raises(ValueError, match="sort_and_gather=True gathers every output.*"):
            OptionsDataParallel(RowIds(), [0, 1], sort_and_gather=True, **option)


@pytest.mark.parametrize("device_ids", [[0, 1], [1]])
@pytest.mark.parametrize("switch", [{"gather_to_one_device": False}, {"except_keywords": {"a"}}])
def test_gather_reads_sort_and_gather_when_an_option_is_switched_later(device_ids, switch):
    # gather itself reads sort_and_gather: an option switched after __init__ that would keep
    # outputs apart is refused there, never silently wins over sort_and_gather=True.
    dp = OptionsDataParallel(on(RowIds(), device_ids), device_ids, sort_and_gather=True)
    rows = torch.arange(4, dtype=torch.float64)[:, None]
    torch.testing.assert_close(dp(rows).cpu(), rows)
    for name, value in switch.items():
        setattr(dp, name, frozenset(value) if name == "except_keywords" else value)
    with pytest.raises(ValueError, match="sort_and_gather=True gathers every output.*"):
        dp(rows)


def test_gather_per_device_undoes_gather_to_one_device_false_with_gradients():
    model = on(Structured(), [2])
    reference_model = copy.deepcopy(model).cpu()
    x = batch()
    out = OptionsDataParallel(model, [2, 0, 1], gather_to_one_device=False)(x)
    whole = gather_per_device(out, "cpu")
    reference = reference_model(x)
    torch.testing.assert_close(whole["y"], reference["y"], **TOL)
    torch.testing.assert_close(whole["pair"].a, reference["pair"].a, **TOL)
    assert whole["name"] == ("structured",) * 3  # non-tensor tuples are left alone
    whole["y"].pow(2).sum().backward()
    reference["y"].pow(2).sum().backward()
    assert_close_all(grads(model), grads(reference_model))


def test_gather_per_device_joins_only_what_the_options_kept_apart():
    # A list of whole-batch tensors that the model returns, gathered beside a kept key,
    # stays a list: only the PerDevice tuples the options made are joined.
    class FineAndPair(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3).double()

        def forward(self, x):
            h = self.lin(x)
            return {"fine": h, "pair": [h.sum(1), h.mean(1)]}

    model = on(FineAndPair(), [0])
    x = torch.randn(8, 4, dtype=torch.float64, device=source_of([0, 1]))
    out = OptionsDataParallel(model, [0, 1], except_keywords=["fine"])(x)
    assert isinstance(out["fine"], PerDevice) and isinstance(out["pair"], list)
    whole = gather_per_device(out, "cpu")
    reference = copy.deepcopy(model).cpu()(x.cpu())
    assert isinstance(whole["pair"], list) and [t.shape for t in whole["pair"]] == [(8,), (8,)]
    torch.testing.assert_close(whole["fine"], reference["fine"], **TOL)
    # Pieces of one's own join once marked as such; a plain tuple is left alone.
    pieces = (torch.ones(2, device=source_of([0])), torch.zeros(3, device=source_of([1])))
    left = gather_per_device(pieces, "cpu")
    assert type(left) is tuple and all(a is b for a, b in zip(left, pieces, strict=True))
    torch.testing.assert_close(
        gather_per_device(PerDevice(pieces), "cpu"), torch.tensor([1.0, 1, 0, 0, 0])
    )


# ---------------------------------------------------------------- the tutorial's test cases


def tutorial_case_one(device_ids, rows: int = 16):
    """netA (not gathered) feeds netB (inputs scattered); compare with one device."""
    source = source_of(device_ids)
    net_a, net_b = linear(5, 2, 3).to(source), linear(2, 1, 4).to(source)
    reference_a, reference_b = linear(5, 2, 3), linear(2, 1, 4)
    x = batch(rows)

    dp_a = OptionsDataParallel(net_a, device_ids, gather_to_one_device=False)
    dp_b = OptionsDataParallel(net_b, device_ids, inputs_are_scattered=True)
    features = dp_a(x.to(source))
    assert isinstance(features, tuple) and len(features) == min(len(device_ids), rows)
    # each piece stayed on the device that computed it
    assert [f.device.index for f in features] == device_ids[: len(features)]
    out = dp_b(features)
    out.mean().backward()

    expected = reference_b(reference_a(x))
    expected.mean().backward()
    torch.testing.assert_close(out.cpu(), expected, **TOL)
    assert_close_all(grads(net_a), grads(reference_a))
    assert_close_all(grads(net_b), grads(reference_b))

    # The tutorial then takes an Adam step; the parameters must move alike.
    for net, ref in ((net_a, reference_a), (net_b, reference_b)):
        for module in (net, ref):
            torch.optim.Adam(module.parameters(), lr=1e-4, betas=(0.5, 0.9)).step()
        assert_close_all(list(net.parameters()), list(ref.parameters()))


def tutorial_case_two(device_ids):
    """A dict output with out1/out2 kept per device, summed, fed to netB."""
    source = source_of(device_ids)
    net_a, net_b = Features().to(source), linear(2, 1, 5).to(source)
    reference_a, reference_b = Features(), linear(2, 1, 5)
    x = batch()

    dp_a = OptionsDataParallel(net_a, device_ids, except_keywords=["out1", "out2"])
    dp_b = OptionsDataParallel(net_b, device_ids, inputs_are_scattered=True)
    out_a = dp_a(x.to(source))
    out1, out2 = out_a["outputs"]["out1"], out_a["outputs"]["out2"]
    assert isinstance(out1, tuple) and len(out1) == len(device_ids)
    assert out_a["second_output"].shape == (16, 2)
    assert out_a["second_output"].device == source
    out_b = dp_b(tuple(o1 + o2 for o1, o2 in zip(out1, out2)))
    (out_b.mean() + out_a["second_output"].pow(2).mean()).backward()

    expected_a = reference_a(x)
    expected_b = reference_b(expected_a["outputs"]["out1"] + expected_a["outputs"]["out2"])
    (expected_b.mean() + expected_a["second_output"].pow(2).mean()).backward()
    torch.testing.assert_close(out_b.cpu(), expected_b, **TOL)
    torch.testing.assert_close(out_a["second_output"].cpu(), expected_a["second_output"], **TOL)
    assert_close_all(grads(net_a), grads(reference_a))
    assert_close_all(grads(net_b), grads(reference_b))


@pytest.mark.parametrize("device_ids", [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [1, 2], [2, 0, 1]])
def test_tutorial_case_one(device_ids):
    tutorial_case_one(device_ids)


def test_tutorial_case_one_with_a_short_batch():
    tutorial_case_one([0, 1, 2, 3], rows=3)


@pytest.mark.parametrize("device_ids", [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [1, 2], [2, 0, 1]])
def test_tutorial_case_two(device_ids):
    tutorial_case_two(device_ids)


# ---------------------------------------------------------------- real GPUs

GPU_ORDERS = [
    pytest.param([0, 1], id="0,1"),
    pytest.param([1, 0], id="1,0"),
    pytest.param([1, 2], id="1,2", marks=gpus(3)),
    pytest.param([0, 2], id="0,2", marks=gpus(3)),
    pytest.param([0, 1, 2, 3], id="0,1,2,3", marks=gpus(4)),
    pytest.param([3, 1, 0, 2], id="3,1,0,2", marks=gpus(4)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("device_ids", GPU_ORDERS)
def test_gpu_tutorial_case_one(device_ids):
    tutorial_case_one(device_ids)


@pytest.mark.gpu
@pytest.mark.parametrize("device_ids", GPU_ORDERS)
def test_gpu_tutorial_case_two(device_ids):
    tutorial_case_two(device_ids)


@pytest.mark.gpu
@pytest.mark.parametrize("device_ids", GPU_ORDERS)
def test_gpu_sort_and_gather_keeps_batch_order(device_ids):
    source = source_of(device_ids)
    rows = torch.arange(10, dtype=torch.float64, device=source)[:, None]
    model = RowIds().to(source)
    kept = OptionsDataParallel(model, device_ids, gather_to_one_device=False)(rows)
    assert [k.device.index for k in kept] == device_ids
    dp = OptionsDataParallel(model, device_ids, inputs_are_scattered=True, sort_and_gather=True)
    torch.testing.assert_close(dp(kept), rows)
    torch.testing.assert_close(gather_per_device(kept, "cpu"), rows.cpu())


@pytest.mark.gpu
def test_gpu_scattered_inputs_on_the_wrong_gpu_are_refused():
    model = Tagger().cuda(0)
    dp = OptionsDataParallel(model, [0, 1], inputs_are_scattered=True)
    x = batch().cuda(0)
    extra = (torch.zeros(8, device="cuda:0"), torch.zeros(8, device="cuda:1"))
    with pytest.raises(RuntimeError, match=r"argument 0\[1\] is on cuda:0.*\.to\('cuda:1'\)"):
        dp(x.chunk(2), extra=extra)
