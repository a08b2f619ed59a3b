"""scatter / scatter_kwargs / gather on simulated devices, and their gradients."""

import dataclasses
from collections import OrderedDict, namedtuple

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import learn_parallel as lp
from learn_parallel.devices import Device
from learn_parallel.scatter_gather import Gather, Scatter

Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    label: str


def rows(tensor_list):
    return [t.shape[0] for t in tensor_list]


@pytest.mark.parametrize(
    "batch, devices, expected",
    [(12, 4, [3, 3, 3, 3]), (10, 4, [3, 3, 3, 1]), (9, 8, [2, 2, 2, 2, 1]), (2, 4, [1, 1])],
)
def test_tensors_are_chunked_like_tensor_chunk(monkeypatch, batch, devices, expected):
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", str(devices))
    pieces = lp.scatter(torch.arange(batch), list(range(devices)))
    assert rows(pieces) == expected
    assert [p.device for p in pieces] == [torch.device("sim", i) for i in range(len(pieces))]
    assert torch.equal(torch.cat([p.cpu() for p in pieces]), torch.arange(batch))


def test_scatter_along_another_dim():
    pieces = lp.scatter(torch.zeros(2, 6), [0, 1, 2], dim=1)
    assert [p.shape for p in pieces] == [(2, 2)] * 3


def test_containers_are_rebuilt_per_device_and_other_objects_shared():
    marker = object()
    inputs = (
        [torch.arange(4), "text"],
        {"x": torch.arange(4) * 10, "k": 3},
        Pair(torch.arange(4), marker),
        Batch(torch.arange(4), "label"),
        OrderedDict(z=torch.arange(4)),
    )
    per_device = lp.scatter(inputs, [0, 1])
    assert len(per_device) == 2
    first = per_device[0]
    assert isinstance(first[0], list) and first[0][1] == "text"
    assert torch.equal(first[1]["x"].cpu(), torch.tensor([0, 10])) and first[1]["k"] == 3
    assert isinstance(first[2], Pair) and first[2].b is marker
    assert isinstance(first[3], Batch) and first[3].label == "label"
    assert torch.equal(per_device[1][3].x.cpu(), torch.tensor([2, 3]))
    assert per_device[1][3].x.device == torch.device("sim", 1)
    assert isinstance(first[4], OrderedDict)


def test_zero_dim_tensors_and_empty_containers_go_to_every_replica():
    per_device = lp.scatter((torch.arange(4), torch.tensor(2.0), (), {}), [0, 1])
    assert [p[1].item() for p in per_device] == [2.0, 2.0]
    assert all(p[2] == () and p[3] == {} for p in per_device)


def test_uneven_members_raise_instead_of_silently_truncating():
    # One rule (equal sizes along dim), one message, checked before anything is copied.
    with pytest.raises(ValueError, match=r"inputs\[0\] has 9, inputs\[1\] has 2.*Give every"):
        lp.scatter((torch.zeros(9, 1), torch.zeros(2, 1)), [0, 1, 2])


def test_kwargs_stay_aligned_with_a_tiny_batch():
    # Two rows on four devices: two replicas, each with its row AND its kwargs.
    inputs, kwargs = lp.scatter_kwargs((torch.arange(2),), {"scale": 2.0}, [0, 1, 2, 3])
    assert len(inputs) == len(kwargs) == 2
    assert [i[0].tolist() for i in inputs] == [[0], [1]]
    assert kwargs == ({"scale": 2.0}, {"scale": 2.0})


def test_tensor_kwargs_are_split_too():
    inputs, kwargs = lp.scatter_kwargs((), {"x": torch.arange(6)}, [0, 1, 2])
    assert inputs == ((), (), ())
    assert [k["x"].tolist() for k in kwargs] == [[0, 1], [2, 3], [4, 5]]


def test_no_inputs_give_nothing_to_scatter():
    assert lp.scatter_kwargs((), {}, [0, 1]) == ((), ())


def test_gather_rebuilds_structures():
    outputs = [
        {"y": torch.ones(2, 1), "pair": Pair(torch.zeros(2), None), "b": Batch(torch.ones(2), "s")},
        {"y": torch.ones(1, 1), "pair": Pair(torch.zeros(1), None), "b": Batch(torch.ones(1), "s")},
    ]
    out = lp.gather(outputs, 0)
    assert out["y"].shape == (3, 1)
    assert isinstance(out["pair"], Pair) and out["pair"].b is None
    assert out["pair"].a.shape == (3,)
    assert isinstance(out["b"], Batch) and out["b"].x.shape == (3,)
    assert out["b"].label == ["s", "s"]  # non-tensors: one value per replica, none dropped


def test_gather_matches_dict_members_by_key():
    out = lp.gather(
        [{"a": torch.zeros(1), "b": torch.ones(1)}, {"b": torch.ones(1), "a": torch.zeros(1)}], 0
    )
    assert out["a"].tolist() == [0.0, 0.0] and out["b"].tolist() == [1.0, 1.0]


def test_gather_to_cpu():
    assert lp.gather([torch.ones(1), torch.ones(2)], "cpu").device == torch.device("cpu")


def test_gather_dicts_with_different_keys():
    with pytest.raises(ValueError, match="same keys, but 'b' appears only in some replicas'"):
        lp.gather([{"a": torch.ones(1)}, {"a": torch.ones(1), "b": torch.ones(1)}], 0)
    two_more = {"a": torch.ones(1), "b": torch.ones(1), "c": torch.ones(1)}
    with pytest.raises(ValueError, match="same keys, but 'b', 'c' appear only in some"):
        lp.gather([{"a": torch.ones(1)}, two_more], 0)


def test_gather_mismatched_shapes_names_them():
    with pytest.raises(ValueError, match=r"shapes \(1, 2\), \(1, 3\) differ"):
        lp.gather([torch.ones(1, 2), torch.ones(1, 3)], 0)


def test_gather_lets_torch_errors_through_unchanged(monkeypatch):
    # Out of memory while joining is not a shape problem: its type and message survive,
    # so a caller's `except torch.OutOfMemoryError` still catches it.
    def out_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Gather, "apply", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        lp.gather([torch.ones(2, 3).to("sim:0"), torch.ones(2, 3).to("sim:1")], "sim:0")


@pytest.mark.parametrize("dim", [1, -1])
def test_gather_checks_shapes_along_any_dim_and_their_rank(dim):
    joined = lp.gather(
        [torch.ones(2, 3).to("sim:0"), torch.ones(2, 5).to("sim:1")], "sim:0", dim=dim
    )
    assert joined.shape == (2, 8)
    with pytest.raises(ValueError, match=r"shapes \(2, 3\), \(3, 3\) differ in another"):
        lp.gather([torch.ones(2, 3).to("sim:0"), torch.ones(3, 3).to("sim:1")], "sim:0", dim=dim)
    with pytest.raises(ValueError, match="number of dimensions"):
        lp.gather([torch.ones(2, 3).to("sim:0"), torch.ones(2, 3, 1).to("sim:1")], "sim:0", dim=dim)


def test_gather_mixed_none_and_structure():
    with pytest.raises(TypeError, match="some replicas returned None"):
        lp.gather([None, torch.ones(1)], 0)
    with pytest.raises(TypeError, match="different structures"):
        lp.gather([(torch.ones(1),), (torch.ones(1), torch.ones(1))], 0)


def test_scalar_outputs_become_a_vector_with_a_warning():
    with pytest.warns(UserWarning, match="every replica returned a 0-dim tensor"):
        out = lp.gather([torch.tensor(1.0), torch.tensor(2.0)], 0)
    assert out.tolist() == [1.0, 2.0]


# --- gradients: double precision, through both autograd Functions ---------------

DEVICES = [Device("sim", 0), Device("sim", 1), Device("sim", 2)]


def test_scatter_and_gather_gradcheck_and_gradgradcheck():
    x = torch.randn(7, 3, dtype=torch.double, requires_grad=True)

    def scatter_then_weight(t):
        pieces = Scatter.apply([d.torch_device for d in DEVICES], None, 0, t)
        return tuple(p * (i + 1) for i, p in enumerate(pieces))

    def gather_of_pieces(a, b, c):
        return Gather.apply(torch.device("cpu"), 1, a * a, b, c)

    assert gradcheck(scatter_then_weight, (x,))
    assert gradgradcheck(scatter_then_weight, (x,))
    parts = [torch.randn(2, n, dtype=torch.double, requires_grad=True) for n in (1, 2, 3)]
    assert gradcheck(gather_of_pieces, parts)
    assert gradgradcheck(gather_of_pieces, parts)


def test_gather_backward_sends_each_slice_back():
    a = torch.zeros(2, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    lp.gather([a, b], 0).backward(torch.arange(5.0, device="sim:0"))  # on the output's device
    assert a.grad.tolist() == [0.0, 1.0] and b.grad.tolist() == [2.0, 3.0, 4.0]
