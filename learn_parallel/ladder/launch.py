"""How the processes of a DDP job find each other under torchrun, on one node or several.

torchrun, torch's launcher, starts ``--nproc-per-node`` processes on every node, meets the
other nodes at a rendezvous and tells each process who it is in environment variables.
`read_launch` reads them, `pick_device` gives each process its own GPU (or the CPU), and
`join_group` connects the processes (NCCL between GPUs, gloo between CPUs) with a bounded
wait. `torchrun_command` writes the commands that start ``learn_parallel.ladder.train``:
the ones the distributed chapter shows and the tests run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

MODULE = "learn_parallel.ladder.train"
JOIN_TIMEOUT_S = 300  # how long a node waits at the rendezvous for the others (torch's: 600)


class LaunchError(RuntimeError):
    """The job was started in a way it cannot run; the message says how to start it."""


@dataclass(frozen=True)
class Launch:
    """Who this process is in the job, as torchrun's environment says."""

    rank: int  # RANK: 0 .. world_size - 1, over every node
    local_rank: int  # LOCAL_RANK: 0 .. local_world_size - 1 on this node: which GPU
    world_size: int  # WORLD_SIZE: processes in the whole job
    local_world_size: int  # LOCAL_WORLD_SIZE: processes on this node (--nproc-per-node)
    node_rank: int  # GROUP_RANK: this node's number, given by the rendezvous
    nodes: int  # GROUP_WORLD_SIZE: how many nodes joined
    master: str  # MASTER_ADDR:MASTER_PORT: the store init_process_group connects to


NAMES = {
    "rank": "RANK",
    "local_rank": "LOCAL_RANK",
    "world_size": "WORLD_SIZE",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "GROUP_RANK",
    "nodes": "GROUP_WORLD_SIZE",
}


def read_launch(environ: Mapping[str, str] = os.environ) -> Launch:
    """This process's place in the job, from the variables torchrun sets in every worker."""
    if "RANK" not in environ:
        raise LaunchError(
            "started without torchrun (RANK is not set), which starts one process per rank "
            f"and tells each who it is: start it with: {' '.join(torchrun_command(2))}"
        )
    missing = [n for n in [*NAMES.values(), "MASTER_ADDR", "MASTER_PORT"] if n not in environ]
    if missing:
        raise LaunchError(f"{', '.join(missing)} not set: start this module with torchrun")
    numbers = {field: int(environ[name]) for field, name in NAMES.items()}
    return Launch(**numbers, master=f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}")


def pick_device(launch: Launch, wanted: str, gpus: int) -> torch.device:
    """GPU ``LOCAL_RANK`` (``wanted`` "cuda", or "auto" where a GPU is visible) or the CPU."""
    if wanted == "auto":
        wanted = "cuda" if gpus else "cpu"
    if wanted == "cpu":
        return torch.device("cpu")
    if gpus == 0:
        raise LaunchError(
            "--device cuda, but no GPU is visible: train on the CPU with --device cpu"
        )
    if launch.local_world_size > gpus:
        raise LaunchError(
            f"{launch.local_world_size} processes on this node (--nproc-per-node "
            f"{launch.local_world_size}) but {gpus} GPUs visible, and each process needs one: "
            f"use --nproc-per-node {gpus} or fewer, or --device cpu"
        )
    return torch.device("cuda", launch.local_rank)


def join_group(launch: Launch, device: torch.device, timeout_s: float) -> str:
    """Join the job's process group; the backend's name. ``timeout_s`` bounds the wait for the
    other processes, here and in every collective after: a rank left waiting for one that is
    gone fails after that long instead of waiting forever."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL runs this process's collectives on this GPU
    dist.init_process_group(
        backend,
        init_method="env://",  # MASTER_ADDR and MASTER_PORT, from torchrun
        rank=launch.rank,
        world_size=launch.world_size,
        timeout=timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return backend


def torchrun_command(
    nproc: int,
    nodes: int = 1,
    endpoint: str | None = None,
    run_id: str | None = None,
    join_timeout_s: int = JOIN_TIMEOUT_S,
    args: Sequence[str] = (),
) -> list[str]:
    """The torchrun command that starts ``nproc`` processes of `MODULE` on this node.

    One node: ``--standalone`` (torchrun hosts the rendezvous itself, at a port the OS
    picks). Several: the same command on every node, all meeting at ``endpoint``
    (``HOST:PORT``, a free port on one of them) through the c10d rendezvous, each waiting at
    most ``join_timeout_s`` seconds for the others; ``run_id`` tells jobs sharing it apart.
    """
    command = ["torchrun"]
    if nodes == 1 and endpoint is None:
        command.append("--standalone")
    else:
        if endpoint is None:
            raise ValueError(f"{nodes} nodes need an endpoint (HOST:PORT) to meet at")
        command += ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint]
        command += ["--rdzv-id", run_id] if run_id else []
        command += ["--rdzv-conf", f"join_timeout={join_timeout_s}"]
    return [*command, "--nproc-per-node", str(nproc), "-m", MODULE, *args]


def runnable(command: Sequence[str]) -> list[str]:
    """``command`` with this Python's own torchrun: the script beside the interpreter, or
    ``python -m torch.distributed.run``, the module that script runs."""
    if command[0] != "torchrun":
        return list(command)
    beside = Path(sys.executable).with_name("torchrun")
    if beside.is_file():
        return [str(beside), *command[1:]]
    return [sys.executable, "-m", "torch.distributed.run", *command[1:]]
