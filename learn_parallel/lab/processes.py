"""Start one process per rank on this machine, with timeouts everywhere, and collect results.

`run_ranks(fn, world_size)` spawns ``world_size`` fresh Python processes, joins them into
one ``torch.distributed`` process group (gloo on the CPU, NCCL on GPUs) through a TCP store
the parent holds on 127.0.0.1, at a port the OS picked: two runs never race for a port. It
calls ``fn(rank, world_size, *args)`` in each and returns their values in rank order.
``fn`` must be defined in a module, not a notebook cell: a spawned process imports it.
Nothing hangs: a collective left waiting times out, the parent waits at most ``timeout_s``,
and when one rank fails the others are stopped and its traceback is raised.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from learn_parallel.devices import resolve_devices, synchronize
from learn_parallel.lab.timing import step_times_ms

# NVLink multicast (NVLS) stays off wherever NCCL runs: on shared, virtualised GPU machines
# (the ones the book's runs were recorded on) a program that uses it can take the host's GPUs
# out of service, and neither DataParallel nor DDP needs it.
NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def use_nccl_settings() -> None:
    """Put `NCCL_ENV` into this process's environment (values already set win), before NCCL
    starts: in every rank, and where DataParallel broadcasts over GPUs (NCCL too)."""
    for name, value in NCCL_ENV.items():
        os.environ.setdefault(name, value)


def rank_device(backend: str, rank: int) -> torch.device:
    """Where rank ``rank`` works: GPU ``rank`` with NCCL, the CPU with gloo."""
    return torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")


def share(batch: int, world: int, rank: int) -> int:
    """This rank's rows of the global batch, split the way ``tensor.chunk`` would."""
    size = -(-batch // world)
    return max(0, min(size, batch - rank * size))


def rank_step_times(
    step: Callable[[], Any], device: torch.device, warmup: int, steps: int
) -> list[float]:
    """Wall time (ms) of each timed ``step`` (as `step_times_ms`, after a barrier); every rank
    calls this and gets, per step, the slowest rank's time: a step is as slow as that rank."""
    for _ in range(warmup):
        step()
    devices = [resolve_devices(device, output=True)]  # a gloo rank runs on the CPU
    synchronize(devices)
    dist.barrier()
    times = step_times_ms(step, devices, warmup=0, steps=steps)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.cpu().tolist()


def _entry(
    rank: int,
    fn: Callable[..., Any],
    world_size: int,
    port: int,
    backend: str,
    group_timeout_s: float,
    args: tuple,
    folder: str,
    threads: int,
) -> None:
    """What each spawned process runs: join the group, call ``fn``, save its result."""
    started = time.time()
    use_nccl_settings()
    torch.set_num_threads(threads)
    result_path = Path(folder) / f"rank{rank}.pt"
    try:
        device = rank_device(backend, rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # A client of the store the parent holds: nobody else can have taken its port.
        store = dist.TCPStore("127.0.0.1", port, timeout=timedelta(seconds=group_timeout_s))
        dist.init_process_group(
            backend,
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=group_timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
        joined = time.time()
        value = fn(rank, world_size, *args)
        torch.save({"ok": True, "value": value, "started": started, "joined": joined}, result_path)
    except BaseException:
        failed = {"ok": False, "error": traceback.format_exc(), "failed_at": time.time()}
        torch.save(failed, result_path)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class RankFailed(RuntimeError):
    """A rank raised, timed out or died; the message carries its traceback."""


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    backend: str = "gloo",
    timeout_s: float = 120.0,
    group_timeout_s: float = 60.0,
    threads: int | None = None,
    with_times: bool = False,
) -> list[Any]:
    """``[fn(0, world_size, *args), fn(1, ...), ...]``, each computed in its own process.

    ``timeout_s`` bounds the whole run, ``group_timeout_s`` any one collective; ``threads``:
    torch's CPU threads per process (default: the cores shared out). ``with_times``: return
    ``(values, times)``, ``times[r]`` the seconds until rank r started and joined the group.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be 1 or more, got {world_size}.")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"NCCL with {world_size} ranks needs {world_size} GPUs; "
            f"{torch.cuda.device_count()} are visible."
        )
    threads = threads or max(1, (os.cpu_count() or 1) // world_size)
    called = time.time()
    # The store binds port 0 itself and listens until the ranks are done: the OS picks a
    # free port and no other program can take it between here and the ranks' connecting.
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    with tempfile.TemporaryDirectory() as folder:
        entry_args = (fn, world_size, store.port, backend, group_timeout_s, tuple(args))
        context = mp.start_processes(
            _entry, (*entry_args, folder, threads), world_size, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    raise RankFailed(
                        f"{world_size} ranks did not finish within {timeout_s:.0f} s "
                        "(timeout_s); they were stopped."
                    )
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
            raise RankFailed(_failures(_results(folder, world_size)) or str(error)) from None
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join(5)
            for name in context.error_files:  # torch writes a failed rank's traceback there
                Path(name).unlink(missing_ok=True)
        results = _results(folder, world_size)
    if any(not r["ok"] for r in results):
        raise RankFailed(_failures(results))
    values = [r["value"] for r in results]
    if with_times:
        times = [
            {"started_s": r["started"] - called, "joined_s": r["joined"] - called} for r in results
        ]
        return values, times  # type: ignore[return-value]
    return values


def _results(folder: str, world_size: int) -> list[dict[str, Any]]:
    results = []
    for rank in range(world_size):
        path = Path(folder) / f"rank{rank}.pt"
        missing = {"ok": False, "error": f"rank {rank} left no result"}
        results.append(torch.load(path, weights_only=False) if path.exists() else missing)
    return results


def _failures(results: list[dict[str, Any]]) -> str:
    """Every failed rank's traceback, the earliest failure (usually the cause) first."""
    failed = [(r.get("failed_at", float("inf")), k, r) for k, r in enumerate(results)]
    return "\n".join(
        f"rank {rank} failed:\n{r['error']}" for _, rank, r in sorted(failed) if not r["ok"]
    )
