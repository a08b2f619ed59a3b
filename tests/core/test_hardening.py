"""Hostile inputs: no silent wrong answers, no hangs, no lost exception details, no leaks."""

import contextlib
import gc
import os
import subprocess
import sys
import textwrap
import threading
import traceback
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from _training import SimDevices
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import learn_parallel as lp
from learn_parallel.devices import Device
from learn_parallel.replicate import Broadcast, copy_to_devices

SIM = SimDevices(4)  # SIM[0] is device_ids[0]: models live there, outputs land there


class Add(nn.Module):
    def forward(self, a, b):
        return a + b


def run_in_thread(fn, timeout=30.0):
    """``fn()``'s result, failing the test (instead of hanging it) after ``timeout`` s."""
    result, errors = [], []

    def target():
        try:
            result.append(fn())
        except BaseException as error:  # noqa: BLE001 - handed to the test
            errors.append(error)

    runner = threading.Thread(target=target, daemon=True)
    runner.start()
    runner.join(timeout)
    assert not runner.is_alive(), f"still waiting after {timeout} s: it hangs"
    if errors:
        raise errors[0]
    return result[0]


# -- 1. tensors of different sizes in one call --------------------------------------


def test_tensors_of_different_sizes_in_one_call_are_refused():
    dp = lp.DataParallel(Add(), [0, 1, 2, 3])
    # 8 and 7 rows both make 4 pieces: before, the last replica added 2 rows to 1.
    with pytest.raises(ValueError, match=r"argument 0 has 8, argument 1 has 7"):
        dp(torch.randn(8, 2), torch.randn(7, 2))
    with pytest.raises(ValueError, match=r"inputs\[0\] has 8, inputs\[1\] has 7"):
        lp.scatter((torch.randn(8), torch.randn(7)), [0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"keyword argument 'b'\['x'\] has 5"):
        lp.scatter_kwargs((torch.randn(6, 2),), {"b": {"x": torch.randn(5, 2)}}, [0, 1])


def test_an_input_without_the_scatter_dim_raises_torchs_own_index_error():
    # As scatter_kwargs' docstring says: the IndexError of torch's size(dim), as torch's
    # DataParallel raises, not an error of ours.
    dp = lp.DataParallel(Add(), [0, 1], dim=2)
    with pytest.raises(IndexError, match=r"Dimension out of range"):
        dp(torch.randn(4, 3, 2), torch.randn(4, 3))
    with pytest.raises(IndexError, match=r"Dimension out of range"):
        lp.scatter_kwargs((torch.randn(4, 2, 2),), {"m": torch.randn(4)}, [0, 1], dim=-3)
    # Every dim an input has still scatters, negative ones included.
    pieces = lp.scatter(torch.randn(4, 3), [0, 1], dim=-1)
    assert [tuple(p.shape) for p in pieces] == [(4, 2), (4, 1)]


def test_equal_sizes_shared_scalars_and_plain_values_still_scatter():
    dp = lp.DataParallel(Add(), [0, 1, 2, 3])
    a = torch.randn(8, 2, dtype=torch.double)
    # The outputs are gathered on device_ids[0], so the expectations are moved there.
    torch.testing.assert_close(dp(a, a), (a + a).to(SIM[0]))
    torch.testing.assert_close(dp(a, torch.tensor(2.0, dtype=torch.double)), (a + 2).to(SIM[0]))
    torch.testing.assert_close(dp(a, 3.0), (a + 3).to(SIM[0]))
    # Sizes are compared along the scatter dim only.
    dp1 = lp.DataParallel(SumRows(), [0, 1], dim=1)
    a, b = torch.randn(3, 4), torch.randn(5, 4)
    torch.testing.assert_close(dp1(a, b), SumRows()(a, b).to(SIM[0]))


class SumRows(nn.Module):
    def forward(self, a, b):
        return a.sum(0, keepdim=True) + b.sum(0, keepdim=True)


# -- 2. PackedSequence ----------------------------------------------------------------


def packed_batch():
    torch.manual_seed(0)
    padded = torch.randn(4, 5, 3)
    lengths = torch.tensor([5, 4, 3, 2])
    return padded, lengths, pack_padded_sequence(padded, lengths, batch_first=True)


def test_a_packed_sequence_input_is_refused_with_the_padded_alternative():
    _, _, packed = packed_batch()
    dp = lp.DataParallel(nn.GRU(3, 4, batch_first=True), [0, 1])
    with pytest.raises(TypeError, match=r"PackedSequence.*pad_packed_sequence.*enforce_sorted"):
        dp(packed)


def test_packed_sequence_outputs_are_refused_by_gather():
    _, _, packed = packed_batch()
    with pytest.raises(TypeError, match=r"Cannot gather output: .*PackedSequence"):
        lp.gather([packed, packed], 0)


class PackInside(nn.Module):
    """The way that works: padded tensor and lengths in, packed inside forward."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 4, batch_first=True)

    def forward(self, padded, lengths):
        packed = pack_padded_sequence(padded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        output, _ = self.gru(packed)
        return pad_packed_sequence(output, batch_first=True, total_length=padded.size(1))[0]


def test_padded_tensors_and_lengths_match_one_device():
    padded, lengths, _ = packed_batch()
    net = PackInside().double().to(SIM[0])
    padded = padded.double().to(SIM[0]).requires_grad_()
    expected = net(padded, lengths)  # one device: sim:0
    expected.square().sum().backward()
    want_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    output = lp.DataParallel(net, [0, 1, 2, 3])(padded, lengths)
    torch.testing.assert_close(output, expected, rtol=1e-12, atol=1e-12)
    output.square().sum().backward()
    for got, want in zip([p.grad for p in net.parameters()], want_grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# -- 3. DataParallel from a helper thread inside a replica ----------------------------


class HandsOff(nn.Module):
    """A replica that hands its work to a helper thread, which calls data_parallel."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(2, 2)

    def forward(self, x):
        # The replica's parameters sit on its own device, so that device comes first.
        here = x.device.index
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(lp.data_parallel, self.inner, x, [here, 1 - here]).result(timeout=10)


def test_data_parallel_from_a_helper_thread_of_a_replica_completes():
    net = HandsOff().to(SIM[0])
    x = torch.randn(8, 2, device=SIM[0])
    output = run_in_thread(lambda: lp.DataParallel(net, [0, 1])(x))
    torch.testing.assert_close(output, net.inner(x))
    # ... and the devices' workers still serve later calls.
    again = run_in_thread(lambda: lp.DataParallel(net.inner, [0, 1])(x))
    torch.testing.assert_close(again, net.inner(x))


# -- 4. fork ------------------------------------------------------------------------------


def test_fork_while_a_worker_is_busy_leaves_a_working_child():
    """The child has none of the parent's threads: it must start workers of its own, even
    for a device whose worker was busy (its idle lock held) at the fork."""
    script = textwrap.dedent(
        """
        import os, sys, threading, time
        import torch
        from torch import nn
        import learn_parallel as lp

        running, release = threading.Event(), threading.Event()

        class Waits(nn.Module):
            def forward(self, x):
                running.set()
                release.wait()
                return x

        replicas, inputs = [Waits(), nn.Identity()], [(torch.ones(2),)] * 2
        call = lambda: lp.parallel_apply(replicas, inputs, None, [0, 1])
        threading.Thread(target=call, daemon=True).start()
        assert running.wait(10)  # sim:0's worker is inside a replica now
        pid = os.fork()
        if pid == 0:  # elementwise work only: see the note on torch's CPU thread pool
            out = lp.parallel_apply([nn.Identity()] * 2, [(torch.ones(2),)] * 2, None, [0, 1])
            names = {t.name for t in threading.enumerate()}
            os._exit(0 if len(out) == 2 and "learn_parallel worker sim:0" in names else 1)
        release.set()
        for _ in range(200):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                sys.exit(os.waitstatus_to_exitcode(status))
            time.sleep(0.05)
        os.kill(pid, 9)
        sys.exit("the forked child hung on its first parallel_apply")
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LEARN_PARALLEL_SIMULATE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]


# -- 5. exceptions keep their type, attributes, cause and traceback ----------------------


class CodedError(Exception):
    def __init__(self, code, text):
        super().__init__(text)
        self.code = code


class RaisesCoded(nn.Module):
    def forward(self, x):
        try:
            {}["missing"]
        except KeyError as cause:
            raise CodedError(7, "bad input") from cause


def test_the_replicas_own_exception_object_is_raised():
    with pytest.raises(CodedError, match="bad input") as caught:
        lp.parallel_apply([RaisesCoded()] * 2, [(torch.ones(1),)] * 2, None, [0, 1])
    error = caught.value
    assert error.code == 7
    assert isinstance(error.__cause__, KeyError)
    assert "Caught CodedError in replica 0 on device sim:0" in "\n".join(error.__notes__)
    frames = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    assert frames[-1] == "forward"  # down to the line that raised, in the worker


def test_exceptions_through_data_parallel_keep_their_type():
    with pytest.raises(CodedError, match=r"Caught CodedError in replica 0 on device sim:0"):
        lp.DataParallel(RaisesCoded(), [0, 1, 2])(torch.ones(6, 1))


# -- 6. no reference cycle on the failure path -------------------------------------------


class FailsAfterLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        hidden = self.linear(x)
        raise ValueError(f"no luck with {tuple(hidden.shape)}")


def test_a_failed_step_frees_model_and_inputs_without_the_garbage_collector():
    gc.collect()
    gc.disable()  # only reference counting may free them
    try:
        net = FailsAfterLinear().to(SIM[0])
        x = torch.randn(6, 3)
        dp = lp.DataParallel(net, [0, 1, 2])
        model_alive, input_alive = weakref.ref(net), weakref.ref(x)
        with contextlib.suppress(ValueError):
            dp(x)
        del net, dp, x
        assert model_alive() is None, "the failed step keeps the model alive"
        assert input_alive() is None, "the failed step keeps the inputs alive"
    finally:
        gc.enable()


# -- 7. complex parameters (the GPU path, with CUDA's broadcast emulated) -----------------


def test_complex_tensors_come_back_complex_from_coalesced_broadcast(monkeypatch):
    def broadcast_coalesced(tensors, devices):
        # What torch.cuda.comm does: complex tensors travel as real (..., 2) views.
        tensors = [torch.view_as_real(t) if t.is_complex() else t for t in tensors]
        return [list(tensors)] + [[t.clone() for t in tensors] for _ in devices[1:]]

    def reduce_add_coalesced(per_device, destination):
        return [sum(copies) for copies in zip(*per_device)]

    monkeypatch.setattr(torch.cuda.comm, "broadcast_coalesced", broadcast_coalesced)
    monkeypatch.setattr(torch.cuda.comm, "reduce_add_coalesced", reduce_add_coalesced)
    gpus = [Device("cuda", 0), Device("cuda", 1)]
    weight = torch.randn(1, 5, dtype=torch.complex128, requires_grad=True)
    bias = torch.randn(3, dtype=torch.float64, requires_grad=True)
    copies = copy_to_devices([bias, weight], gpus)
    for per_device in copies:
        assert [c.dtype for c in per_device] == [torch.float64, torch.complex128]
        torch.testing.assert_close(per_device[1], weight.detach())
    a, b = Broadcast.apply(gpus, weight)
    (a.abs().square().sum() + 2 * b.abs().square().sum()).backward()
    torch.testing.assert_close(weight.grad, 3 * 2 * weight.detach())


# -- 8. saved-tensor hooks reach the workers ----------------------------------------------


def test_saved_tensor_hooks_of_the_caller_apply_inside_replicas():
    packed_by = []

    def pack(tensor):
        packed_by.append(threading.current_thread().name)
        return tensor

    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1)).double().to(SIM[0])
    x = torch.randn(8, 3, dtype=torch.double, device=SIM[0])
    net(x).sum().backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = lp.DataParallel(net, [0, 1])(x)
    workers = {name for name in packed_by if name.startswith("learn_parallel worker")}
    assert workers == {"learn_parallel worker sim:0", "learn_parallel worker sim:1"}
    output.sum().backward()
    for got, expected in zip([p.grad for p in net.parameters()], want):
        torch.testing.assert_close(got, expected)


def test_a_torch_that_cannot_read_the_hooks_says_so_once(monkeypatch):
    # torch before 2.8 has no reader of a thread's saved-tensor hooks: the workers then run
    # without them, and one warning (not one per call, not none) says so.
    reader = sys.modules["learn_parallel.parallel_apply"]._saved_tensor_hooks_reader
    monkeypatch.delattr(torch._C._autograd, "_top_saved_tensors_default_hooks", raising=False)
    reader.cache_clear()
    try:
        net = nn.Linear(3, 1).double().to(SIM[0])
        x = torch.randn(8, 3, dtype=torch.double, device=SIM[0])
        with pytest.warns(UserWarning, match=r"cannot read the saved-tensor hooks.*2\.8") as seen:
            lp.DataParallel(net, [0, 1])(x)
            lp.DataParallel(net, [0, 1])(x)
        assert len([w for w in seen if "saved-tensor hooks" in str(w.message)]) == 1
        assert seen[0].filename == __file__  # shown at the caller's line
    finally:
        reader.cache_clear()  # the real torch's reader again for later tests


def test_save_on_cpu_around_a_step_gives_the_same_gradients():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).double().to(SIM[0])
    x = torch.randn(8, 3, dtype=torch.double)
    lp.DataParallel(net, [0, 1, 2, 3])(x).sum().backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with torch.autograd.graph.save_on_cpu():
        lp.DataParallel(net, [0, 1, 2, 3])(x).sum().backward()
    for got, expected in zip([p.grad for p in net.parameters()], want):
        torch.testing.assert_close(got, expected)
