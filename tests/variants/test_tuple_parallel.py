"""TupleParallel and its collate helper.

What these tests prove: batch i reaches the replica on device i (moved there
through any structure, or checked when transfer is off), the N outputs come back
per device and ungathered, mistakes get errors that name the fix, and training
on per-device batches gives the same gradients as one device seeing the whole
batch. Equivalence runs in float64 with rtol=1e-10, atol=1e-12 (the only
difference is the order of a few floating-point sums).

Simulated devices are distinct torch devices (``sim:i``), so "on device i" is
checked as on GPUs; models start on device_ids[0], references run on the CPU.
"""

from __future__ import annotations

import copy
import pickle
import threading
import warnings
from collections import namedtuple

import pytest
import torch
from _training import SimDevices
from torch import nn
from torch.utils.data import DataLoader, Dataset

from learn_parallel import DataParallel, PerDeviceCollate, TupleParallel, device_type, split_batch
from learn_parallel.devices import Device

TOL = {"rtol": 1e-10, "atol": 1e-12}
SIM = SimDevices(4)
Pair = namedtuple("Pair", ["x", "y"])


def gpus(n: int):
    """Skip unless this machine has at least n GPUs."""
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pytest.mark.skipif(have < n, reason=f"needs {n} CUDA GPUs, found {have}")


class Recorder(nn.Module):
    """Linear layer that notes which batch (by its first value) each thread saw."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2).double()
        self.seen: list = []

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        self.seen.append((float(x[0, 0]), threading.current_thread().name))
        out = self.linear(x)
        return out if scale is None else out * scale


class Moveable:
    """A custom batch type: TupleParallel must move it through its own .to()."""

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data
        self.moves: list = []

    def to(self, device: torch.device, non_blocking: bool = False) -> Moveable:
        moved = Moveable(self.data.to(device, non_blocking=non_blocking))
        moved.moves = [*self.moves, (device, non_blocking)]
        return moved


class Unpack(nn.Module):
    """Takes a nested batch and sums what it finds, to show the structure arrived."""

    def forward(self, batch: dict) -> dict:
        pair, items, custom = batch["pair"], batch["items"], batch["custom"]
        assert isinstance(pair, Pair) and isinstance(items, list)
        assert custom.moves and custom.moves[-1][1] is True  # moved with non_blocking=True
        return {"sum": pair.x + pair.y + items[0] + custom.data, "tag": batch["tag"]}


def regression_batches(n: int, rows: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(rows, 3, generator=gen, dtype=torch.float64)
    return x, torch.randn(rows, 2, generator=gen, dtype=torch.float64)


# ---------------------------------------------------------------- forward


@pytest.mark.parametrize("n", [2, 3, 4])
def test_batch_i_runs_on_replica_i_and_outputs_stay_per_device(n):
    model = Recorder()
    reference = copy.deepcopy(model.linear)
    tp = TupleParallel(model.to(SIM[0]), device_ids=list(range(n)))
    x, _ = regression_batches(n)
    batches = split_batch(x, n)
    outputs = tp(batches)
    assert isinstance(outputs, tuple) and len(outputs) == n
    for i, (batch, output) in enumerate(zip(batches, outputs)):
        assert output.device == SIM[i]  # left on the device that computed it
        torch.testing.assert_close(output.cpu(), reference(batch), **TOL)
    # Each batch was seen once, and by the worker thread of its own device.
    seen = dict(model.seen)
    assert len(model.seen) == n
    for i, batch in enumerate(batches):
        assert seen[float(batch[0, 0])] == f"learn_parallel worker sim:{i}"


def test_nested_batches_and_custom_types_are_moved_whole():
    tp = TupleParallel(Unpack(), device_ids=[0, 1])
    batches = tuple(
        {
            "pair": Pair(torch.full((2,), float(i)), torch.ones(2)),
            "items": [torch.arange(2.0)],
            "custom": Moveable(torch.full((2,), 10.0 * i)),
            "tag": f"batch {i}",
        }
        for i in range(2)
    )
    outputs = tp(batches)
    assert [o["tag"] for o in outputs] == ["batch 0", "batch 1"]
    assert outputs[1]["sum"].device == SIM[1]
    torch.testing.assert_close(outputs[1]["sum"].cpu(), torch.tensor([12.0, 13.0]))


def test_kwargs_are_shared_by_every_replica_and_get_gradients_from_all():
    model = Recorder()
    reference = copy.deepcopy(model.linear)
    tp = TupleParallel(model.to(SIM[0]), device_ids=[0, 1, 2])
    x, _ = regression_batches(3)
    scale = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    outputs = tp(split_batch(x, 3), scale=scale)
    sum(o.sum().cpu() for o in outputs).backward()  # each replica's sum, brought home
    grad = scale.grad.clone()
    scale.grad = None
    (reference(x) * scale).sum().backward()
    torch.testing.assert_close(grad, scale.grad, **TOL)


def test_list_of_batches_is_accepted():
    x, _ = regression_batches(2)
    outputs = TupleParallel(Recorder().to(SIM[0]), device_ids=[0, 1])(list(split_batch(x, 2)))
    assert len(outputs) == 2


def test_one_device_returns_a_one_element_tuple_without_worker_threads():
    model = Recorder()
    reference = copy.deepcopy(model.linear)
    tp = TupleParallel(model.to(SIM[0]), device_ids=[0])
    x, _ = regression_batches(1)
    outputs = tp((x,))
    assert isinstance(outputs, tuple) and len(outputs) == 1
    assert outputs[0].device == SIM[0]
    torch.testing.assert_close(outputs[0].cpu(), reference(x), **TOL)
    assert model.seen[0][1] == threading.current_thread().name


def test_default_device_ids_use_every_simulated_device():
    tp = TupleParallel(Recorder().to(SIM[0]))
    x, _ = regression_batches(4)
    assert len(tp(split_batch(x, 4))) == 4


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("n, given", [(2, 3), (3, 2), (4, 1)])
def test_wrong_number_of_batches_names_both_counts(n, given):
    tp = TupleParallel(Recorder().to(SIM[0]), device_ids=list(range(n)))
    x, _ = regression_batches(n)
    with pytest.raises(ValueError, match=f"got {given} batches but runs on {n} devices"):
        tp(split_batch(x, given))


def test_a_single_tensor_instead_of_a_tuple_is_refused_with_the_fix():
    tp = TupleParallel(Recorder().to(SIM[0]), device_ids=[0, 1])
    x, _ = regression_batches(2)
    with pytest.raises(TypeError, match=r"expects a tuple of 2 batches.*got a Tensor.*Split"):
        tp(x)
    with pytest.raises(TypeError, match="got a Pair"):  # a namedtuple is one batch, not N
        tp(Pair(x, x))


def test_transfer_off_checks_placement_and_names_the_fix():
    tp = TupleParallel(Recorder().to(SIM[0]), device_ids=[0, 1], transfer=False)
    x, _ = regression_batches(2)
    first = x[:6].to(SIM[0])
    for where in ("meta", "cpu", "sim:0"):  # sim:0 exists, but batch 1 belongs on sim:1
        wrong = (first, {"x": torch.empty(6, 3, dtype=torch.float64).to(where)})
        with pytest.raises(
            RuntimeError,
            match=rf"transfer=False\): batches\[1\]\['x'\] is on {where}.*leave transfer=True",
        ):
            tp(wrong)
    placed = tuple(b.to(d) for b, d in zip(split_batch(x, 2), SIM))
    assert len(tp(placed)) == 2  # correctly placed batches run


@pytest.mark.parametrize("transfer", [True, False])
def test_packed_sequences_keep_batch_sizes_on_the_cpu_and_train_like_one_device(transfer):
    from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

    class LastStates(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(3, 4, batch_first=True).double()

        def forward(self, packed):
            return self.rnn(packed)[1][0]  # the last state of every sequence

    torch.manual_seed(0)
    reference = LastStates()
    tp = TupleParallel(copy.deepcopy(reference).to(SIM[0]), device_ids=[0, 1], transfer=transfer)
    lengths = [[5, 3, 2], [4, 4, 1, 1]]  # unsorted order too: sorted_indices must move
    seqs = [[torch.randn(n, 3, dtype=torch.float64) for n in batch] for batch in lengths]
    packs = [pack_sequence(s, enforce_sorted=False) for s in seqs]
    given = packs if transfer else [p.to(d) for p, d in zip(packs, SIM)]
    outputs = tp(tuple(given))
    assert [o.device for o in outputs] == SIM[:2]
    expected = [reference(p) for p in packs]
    for out, exp in zip(outputs, expected):
        torch.testing.assert_close(out.cpu(), exp, **TOL)
    sum(o.pow(2).sum().cpu() for o in outputs).backward()
    sum(e.pow(2).sum() for e in expected).backward()
    for ours, theirs in zip(tp.module.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad.cpu(), theirs.grad, **TOL)
    assert pad_packed_sequence(packs[0], batch_first=True)[0].shape == (3, 5, 3)


def test_module_off_the_source_device_is_refused():
    model = Recorder().to("meta")
    with pytest.raises(RuntimeError, match="module must have its parameters"):
        TupleParallel(model, device_ids=[0, 1])(split_batch(torch.ones(4, 3), 2))


# ---------------------------------------------------------------- collate


def test_split_batch_always_gives_n_pieces_and_keeps_structure():
    x = torch.arange(9.0)
    pieces = split_batch(x, 8)  # chunk(8) would give only 5 pieces here
    assert [len(p) for p in pieces] == [2, 1, 1, 1, 1, 1, 1, 1]
    pairs = split_batch((torch.zeros(5, 2), torch.ones(5), "meta", torch.tensor(3.0)), 2)
    assert all(type(p) is tuple for p in pairs)
    assert [p[0].shape[0] for p in pairs] == [3, 2]
    assert pairs[1][2] == "meta" and pairs[1][3] == 3.0  # shared by every piece


def test_split_batch_errors_name_the_sizes():
    with pytest.raises(ValueError, match="A batch of 3 cannot be split into 4 pieces.*drop_last"):
        split_batch(torch.ones(3, 2), 4)
    with pytest.raises(ValueError, match=r"different sizes along dim 0 \(\[3, 4\]\)"):
        split_batch((torch.ones(3), torch.ones(4)), 2)
    with pytest.raises(ValueError, match="holds no tensor"):
        split_batch(["a", "b"], 2)


def test_collate_of_xy_items_gives_per_device_tuples():
    items = [(torch.full((3,), float(i)), torch.tensor(i)) for i in range(6)]
    pieces = PerDeviceCollate(3)(items)
    assert len(pieces) == 3 and all(type(p) is tuple and len(p) == 2 for p in pieces)
    torch.testing.assert_close(pieces[2][1], torch.tensor([4, 5]))
    dicts = PerDeviceCollate(2)([{"x": torch.ones(2), "id": i} for i in range(4)])
    torch.testing.assert_close(dicts[1]["id"], torch.tensor([2, 3]))


def test_collate_is_picklable_for_dataloader_workers():
    collate = pickle.loads(pickle.dumps(TupleParallel(Recorder(), [0, 1]).collate_fn()))
    assert collate.num_devices == 2


def test_collate_refuses_bad_device_counts():
    with pytest.raises(ValueError, match="num_devices must be at least 1, got 0"):
        PerDeviceCollate(0)


# ---------------------------------------------------------------- the seed's example


class RandomDataset(Dataset):
    """Random (x, y) pairs, fixed by a seed."""

    def __init__(self, features: int, length: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(length, features, generator=gen, dtype=torch.float64)
        self.y = torch.randn(length, 1, generator=gen, dtype=torch.float64)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class SummedLoss(nn.Module):
    """Model plus loss: each device computes the loss of its own batch, in place."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, 1)).double()

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return ((self.net(x) - y) ** 2).sum()


def loader(dataset, collate, batch_size: int, drop_last: bool = False) -> DataLoader:
    # shuffle with a fixed generator, so both runs see the same batches.
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(1),
        collate_fn=collate,
        pin_memory=True,
        drop_last=drop_last,
    )


def train_per_device(device_ids, features=5, length=50, batch_size=8, steps_log=None):
    """The seed's loop: DataLoader + collate helper + TupleParallel; returns the model."""
    torch.manual_seed(0)
    model = SummedLoss(features)
    # device_type(), not torch.cuda: CPU tests run simulated even on a GPU box.
    on_gpu = device_type() == "cuda"
    source = Device(device_type(), device_ids[0]).torch_device
    model.to(source)
    tp = TupleParallel(model, device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = loader(RandomDataset(features, length), tp.collate_fn(), batch_size, drop_last=True)
    for batches in data:
        if on_gpu:
            assert all(x.is_pinned() for x, _ in batches)  # pin_memory pinned every piece
        optimizer.zero_grad()
        losses = tp(batches)
        for loss, device in zip(losses, tp.devices):
            assert loss.device == device.torch_device  # left where it was computed
        rows = sum(len(x) for x, _ in batches)
        (sum(loss.to(source) for loss in losses) / rows).backward()
        if steps_log is not None:
            steps_log.append([p.grad.clone().cpu() for p in model.parameters()])
        optimizer.step()
    return model


def train_one_device(features=5, length=50, batch_size=8, steps_log=None):
    torch.manual_seed(0)
    model = SummedLoss(features)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = loader(RandomDataset(features, length), None, batch_size, drop_last=True)
    for x, y in data:
        optimizer.zero_grad()
        (model((x, y)) / len(x)).backward()
        if steps_log is not None:
            steps_log.append([p.grad.clone() for p in model.parameters()])
        optimizer.step()
    return model


def assert_same_training(device_ids):
    grads, reference_grads = [], []
    with warnings.catch_warnings():
        # Without an accelerator torch skips pin_memory and says so; that is expected.
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        model = train_per_device(device_ids, steps_log=grads)
        reference = train_one_device(steps_log=reference_grads)
    assert len(grads) == len(reference_grads) == 50 // 8
    for step, reference_step in zip(grads, reference_grads):
        for grad, reference_grad in zip(step, reference_step):
            torch.testing.assert_close(grad, reference_grad, **TOL)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.cpu(), q, **TOL)


@pytest.mark.parametrize("device_ids", [[0, 1], [0, 1, 2], [0, 1, 2, 3], [2, 1]])
def test_seed_example_trains_like_one_device(device_ids):
    assert_same_training(device_ids)


def test_short_last_batch_gets_a_clear_error_from_the_dataloader():
    # 50 items in batches of 8 leave 2 for the last batch: not enough for 4 devices.
    data = DataLoader(RandomDataset(5, 50), batch_size=8, collate_fn=PerDeviceCollate(4))
    with pytest.raises(ValueError, match="A batch of 2 cannot be split into 4 pieces"):
        for _ in data:
            pass


# ---------------------------------------------------------------- real GPUs


@pytest.mark.gpu
def test_gpu_seed_example_on_two_gpus():
    assert_same_training([0, 1])


@pytest.mark.gpu
@gpus(3)
def test_gpu_seed_example_with_device_ids_not_starting_at_zero():
    assert_same_training([1, 2])


@pytest.mark.gpu
@gpus(4)
def test_gpu_seed_example_on_four_gpus_in_any_order():
    assert_same_training([3, 1, 0, 2])


@pytest.mark.gpu
def test_gpu_outputs_stay_on_their_devices_and_custom_types_move():
    tp = TupleParallel(Unpack().cuda(0), device_ids=[0, 1])
    batches = tuple(
        {
            "pair": Pair(torch.ones(2), torch.ones(2)),
            "items": [torch.ones(2)],
            "custom": Moveable(torch.ones(2)),
            "tag": i,
        }
        for i in range(2)
    )
    outputs = tp(batches)
    assert [o["sum"].device for o in outputs] == [torch.device("cuda", i) for i in range(2)]


@pytest.mark.gpu
def test_gpu_transfer_off_refuses_a_batch_on_the_wrong_gpu():
    tp = TupleParallel(Recorder().cuda(0), device_ids=[0, 1], transfer=False)
    x = torch.randn(4, 3, dtype=torch.float64, device="cuda:0")
    with pytest.raises(RuntimeError, match=r"batches\[1\] is on cuda:0.*cuda:1"):
        tp((x[:2], x[2:]))
    outputs = tp((x[:2], x[2:].to("cuda:1")))
    assert outputs[1].device == torch.device("cuda", 1)


def test_tuple_parallel_is_dataparallel_with_its_own_scatter_and_gather():
    tp = TupleParallel(nn.Linear(2, 2), device_ids=[0, 1])
    assert isinstance(tp, DataParallel)
    changed = {
        n for n in ("scatter", "replicate", "parallel_apply", "gather") if n in vars(TupleParallel)
    }
    assert changed == {"scatter", "gather"}
    assert "output_device" not in repr(tp)  # nothing is gathered
    assert "devices=[sim:0, sim:1] (simulated on the CPU), dim=0, transfer=True" in repr(tp)
    outputs = [torch.ones(1), torch.ones(1)]
    assert tp.gather(outputs, tp.output_device) == tuple(outputs)  # left as they are
