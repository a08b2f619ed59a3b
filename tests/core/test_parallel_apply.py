"""parallel_apply(): persistent workers, the caller's state, errors, no leaks."""

import gc
import subprocess
import sys
import threading
import traceback
import weakref

import pytest
import torch
from _training import SimDevices
from torch import nn

import learn_parallel as lp

SIM = SimDevices(4)  # SIM[0] is device_ids[0]: models live there, outputs land there
KIND = "sim"  # "sim": simulated devices have an autocast of their own, like "cuda"


class Probe(nn.Module):
    """Returns what the worker thread saw, as plain data."""

    def forward(self, x):
        return {
            "thread": threading.get_ident(),
            "name": threading.current_thread().name,
            "grad": torch.is_grad_enabled(),
            "autocast": (torch.is_autocast_enabled(KIND), torch.get_autocast_dtype(KIND)),
            "x": x,
        }


def worker_threads():
    """The live worker threads (at most one per device ever used)."""
    return [t for t in threading.enumerate() if t.name.startswith("learn_parallel worker")]


def run_probes(n=3):
    return lp.parallel_apply([Probe()] * n, [(torch.ones(1),)] * n, None, list(range(n)))


def test_each_device_has_one_worker_reused_across_calls():
    first = run_probes()
    second = run_probes()
    assert [r["name"] for r in first] == [f"learn_parallel worker sim:{i}" for i in range(3)]
    assert [r["thread"] for r in first] == [r["thread"] for r in second]
    assert len({r["thread"] for r in first}) == 3
    assert threading.get_ident() not in {r["thread"] for r in first}


def test_a_single_replica_runs_in_the_caller():
    (result,) = lp.parallel_apply([Probe()], [(torch.ones(1),)], None, [0])
    assert result["thread"] == threading.get_ident()


def test_workers_adopt_grad_mode_and_autocast_with_its_dtype():
    with torch.no_grad():
        assert not any(r["grad"] for r in run_probes())
    assert all(r["grad"] for r in run_probes())
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast(KIND, dtype=dtype):
            assert all(r["autocast"] == (True, dtype) for r in run_probes())
    assert all(r["autocast"][0] is False for r in run_probes())


def test_autocast_really_applies_inside_replicas():
    net = nn.Linear(4, 4).to(SIM[0])
    with torch.autocast(KIND, dtype=torch.bfloat16):
        out = lp.DataParallel(net, [0, 1])(torch.randn(6, 4))
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()  # the casts were recorded: gradients in float32
    assert net.weight.grad.dtype == torch.float32


def test_cpu_autocast_does_not_reach_simulated_devices():
    # As on GPUs, where autocast("cpu") leaves CUDA tensors alone.
    net = nn.Linear(4, 4).to(SIM[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = lp.DataParallel(net, [0, 1])(torch.randn(6, 4))
    assert out.device == SIM[0] and out.dtype == torch.float32


def test_inputs_may_be_single_objects_and_kwargs_are_passed():
    class AddKw(nn.Module):
        def forward(self, x, shift=0):
            return x + shift

    out = lp.parallel_apply(
        [AddKw(), AddKw()], [torch.zeros(1), torch.zeros(1)], [{"shift": 1}, {}]
    )
    assert [o.item() for o in out] == [1.0, 0.0]


class FailsOn(nn.Module):
    def __init__(self, bad_value, error=KeyError):
        super().__init__()
        self.bad_value, self.error = bad_value, error

    def forward(self, x):
        if x.item() == self.bad_value:
            raise self.error("missing_key")
        return x


def test_replica_exceptions_are_reraised_with_type_replica_device_and_traceback():
    inputs = [(torch.tensor([float(i)]),) for i in range(4)]
    where = r"Caught KeyError in replica 2 on device sim:2 \(simulated on the CPU\)"
    with pytest.raises(KeyError, match=where) as caught:
        lp.parallel_apply([FailsOn(2)] * 4, inputs, None, [0, 1, 2, 3])
    assert caught.value.args == ("missing_key",)  # the replica's own exception object
    text = "".join(traceback.format_exception(caught.value))
    assert 'raise self.error("missing_key")' in text  # the worker's frames are kept
    # As the note says: the frames after 'raise error' are the worker's, from its job on.
    frames = [(f.name, f.line) for f in traceback.extract_tb(caught.value.__traceback__)]
    after = frames.index(("_raise_from_replica", "raise error")) + 1
    assert frames[after][0] == "call" and frames[-1][0] == "forward", frames
    assert "the frames after 'raise error' are the worker thread's" in caught.value.__notes__[0]
    # The pool survives the failure and keeps working.
    assert len(lp.parallel_apply([FailsOn(-1)] * 4, inputs, None, [0, 1, 2, 3])) == 4


class KeepsALocal(nn.Module):
    def forward(self, x):
        activation = x * 2  # noqa: F841 (a local the failure must not keep alive)
        raise ValueError("replica failed")


def test_the_replicas_frames_keep_their_lines_but_not_their_variables():
    with pytest.raises(ValueError, match="replica failed") as caught:
        lp.parallel_apply([KeepsALocal()] * 2, [(torch.ones(1),)] * 2, None, [0, 1])
    tb = caught.value.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_name == "forward"  # down to the replica's own frame
    assert tb.tb_frame.f_locals == {}  # cleared: no activation is held by the exception
    assert 'raise ValueError("replica failed")' in "".join(traceback.format_exception(caught.value))
    names = [f.name for f in traceback.extract_tb(caught.value.__traceback__)]
    assert "execute" not in names  # the worker's own frame is left out


def test_lowest_failing_replica_wins_and_odd_exception_types_still_report():
    class NeedsTwoArgs(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)

    class Broken(nn.Module):
        def forward(self, x):
            raise NeedsTwoArgs(1, 2)

    with pytest.raises(NeedsTwoArgs, match="Caught NeedsTwoArgs in replica 0 on device sim:0"):
        lp.parallel_apply([Broken(), Broken()], [(torch.ones(1),)] * 2, None, [0, 1])


def test_replicas_may_share_a_device():
    results = lp.parallel_apply([Probe()] * 3, [(torch.ones(1),)] * 3, None, [0, 1, 0])
    assert [r["name"] for r in results][1] == "learn_parallel worker sim:1"
    assert len({r["thread"] for r in results}) == 3  # sim:0's second job: a thread of its own


def test_length_mismatches_are_reported():
    with pytest.raises(ValueError, match="got 2 modules but 1 inputs"):
        lp.parallel_apply([Probe(), Probe()], [(torch.ones(1),)])
    with pytest.raises(ValueError, match="2 modules, 1 kwargs and 2 devices"):
        lp.parallel_apply([Probe(), Probe()], [(1,), (2,)], [{}], [0, 1])


def test_nested_data_parallel_inside_a_replica_does_not_hang():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def forward(self, x):
            # This replica's own device first: its inner module lives there.
            here = x.device.index
            return lp.data_parallel(self.inner, x, [here, 1 - here])

    outer = Outer().to(SIM[0])
    x = torch.randn(8, 2, device=SIM[0])
    result = []
    runner = threading.Thread(target=lambda: result.append(lp.DataParallel(outer, [0, 1])(x)))
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "nested DataParallel deadlocked"
    assert torch.allclose(result[0], outer.inner(x), atol=1e-6)


def test_no_thread_leak_from_many_data_parallel_objects():
    x = torch.randn(8, 3)
    lp.DataParallel(nn.Linear(3, 1).to(SIM[0]))(x)
    before = len(threading.enumerate())
    for _ in range(50):
        lp.DataParallel(nn.Linear(3, 1).to(SIM[0]))(x).sum().backward()
    assert len(threading.enumerate()) == before
    simulated_workers = [t for t in worker_threads() if "sim:" in t.name]
    assert len(simulated_workers) <= lp.device_count()


def test_no_reference_cycles_keep_the_model_alive():
    gc.collect()
    gc.disable()  # so only reference counting can free things
    try:
        net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).to(SIM[0])
        dp = lp.DataParallel(net, [0, 1, 2])
        dp(torch.randn(6, 3)).sum().backward()
        with pytest.raises(ValueError):  # a failure path too
            lp.parallel_apply([FailsOn(1.0, ValueError)] * 2, [(torch.ones(1),)] * 2, None, [0, 1])
        alive = weakref.ref(net)
        del net, dp
        assert alive() is None
    finally:
        gc.enable()


def test_the_process_exits_cleanly_with_its_workers_idle():
    """The workers are daemon threads: an idle one never holds up the end of the process."""
    script = (
        "import torch, learn_parallel as lp; "
        "net = torch.nn.Linear(2, 2).to(lp.Device('sim', 0).torch_device); "
        "lp.DataParallel(net)(torch.ones(8, 2))"
    )

    done = subprocess.run(
        [sys.executable, "-c", script], timeout=60, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
