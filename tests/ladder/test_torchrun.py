"""``learn_parallel.ladder.train`` under torchrun on the CPU: one node, two nodes, a missing node.

The commands are `launch.torchrun_command`'s, the ones the distributed chapter prints. Three
jobs start together (they mostly wait on each other's imports and on the rendezvous):

* one node of two ranks (``--standalone``);
* two torchruns on this machine acting as two nodes of two ranks each, meeting at a c10d
  rendezvous on 127.0.0.1: at a store this test binds to port 0 first, so the OS picks a
  free port and keeps it taken (each torchrun then finds the port in use and joins as a
  client, as the second torchrun on a real node 0 would);
* one torchrun of two nodes whose second node never comes: it must give up after its
  ``join_timeout``.

Both trainings must end with the weights of one process training on the whole batch of
every step, within ``train.TOLERANCE`` (float64: 1e-12).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn import functional as F

from learn_parallel.ladder import launch, train

JOIN_TIMEOUT_S = 8  # the lonely node's wait at the rendezvous
SLACK_S = 60  # starting torchrun and leaving it, on a busy 2-core machine
LIMIT_S = 240  # every job, whatever happens


def _start(command: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:  # the child keeps its own handle
        return subprocess.Popen(
            launch.runnable(command), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_all(running: dict[str, subprocess.Popen], started: float) -> dict[str, dict]:
    """Each job's exit status and when it ended (seconds after ``started``); a job still
    running at `LIMIT_S` is killed, with the ranks it started."""
    done: dict[str, dict] = {}
    while len(done) < len(running):
        for name, process in running.items():
            if name not in done and process.poll() is not None:
                done[name] = {"returncode": process.returncode}
                done[name]["seconds"] = time.monotonic() - started
        if time.monotonic() - started > LIMIT_S:
            for name, process in running.items():
                if name not in done:
                    os.killpg(process.pid, signal.SIGKILL)  # torchrun and its ranks
                    process.wait(10)
                    done[name] = {"returncode": "killed", "seconds": LIMIT_S}
        time.sleep(0.1)
    return done


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torchrun")
    stores = [dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False) for _ in "ab"]
    two, lonely = (f"127.0.0.1:{store.port}" for store in stores)
    commands = {
        "one node": launch.torchrun_command(2, args=["--out", str(folder / "one")]),
        "lonely": launch.torchrun_command(
            2,
            nodes=2,
            endpoint=lonely,
            join_timeout_s=JOIN_TIMEOUT_S,
            args=["--out", str(folder / "lonely")],
        ),
    }
    for node in ("node a", "node b"):
        commands[node] = launch.torchrun_command(
            2, nodes=2, endpoint=two, run_id="two-nodes", args=["--out", str(folder / "two")]
        )
    started = time.monotonic()
    running = {name: _start(command, folder / f"{name}.log") for name, command in commands.items()}
    done = _wait_all(running, started)
    for name, job in done.items():
        job["output"] = (folder / f"{name}.log").read_text()
    del stores
    return folder, done


def _reference(settings: dict) -> dict[str, torch.Tensor]:
    """One process, no DDP, no sampler: the data set shuffled as DistributedSampler does
    (``randperm`` seeded with ``seed`` + epoch 0), one step per run of ``batch`` rows."""
    args = argparse.Namespace(**settings)
    data = train.dataset(args)
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(args.seed))
    model = train.build_model(args, args.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x, y = data[order[step * args.batch : (step + 1) * args.batch]]
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return model.state_dict()


def _check_training(out: Path, nodes: int, per_node: int) -> None:
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nodes * per_node)]
    assert [r["rank"] for r in ranks] == list(range(nodes * per_node))
    places = sorted((r["node_rank"], r["local_rank"]) for r in ranks)
    assert places == [(n, k) for n in range(nodes) for k in range(per_node)]
    assert {(r["world_size"], r["nodes"], r["backend"]) for r in ranks} == {
        (nodes * per_node, nodes, "gloo")
    }
    assert len({r["checksum"] for r in ranks}) == 1  # bit for bit the same weights
    summary = json.loads((out / "summary.json").read_text())
    assert summary["same_training"] and summary["across_ranks"] == 0.0
    weights = torch.load(out / "weights.pt")
    reference = _reference(summary["settings"])
    tolerance = train.TOLERANCE[summary["settings"]["dtype"]]
    for name, value in reference.items():
        torch.testing.assert_close(weights[name], value, rtol=0, atol=tolerance)


def test_one_node_of_two_ranks_trains_like_one_process(jobs):
    folder, done = jobs
    assert done["one node"]["returncode"] == 0, done["one node"]["output"]
    assert "the same training" in done["one node"]["output"]
    _check_training(folder / "one", nodes=1, per_node=2)


def test_two_nodes_of_two_ranks_train_like_one_process(jobs):
    folder, done = jobs
    for node in ("node a", "node b"):
        assert done[node]["returncode"] == 0, done[node]["output"]
    _check_training(folder / "two", nodes=2, per_node=2)


def test_a_node_that_never_arrives_ends_the_wait_with_a_timeout(jobs):
    _, done = jobs
    lonely = done["lonely"]
    assert lonely["returncode"] == 1, lonely["output"]
    assert lonely["output"].rstrip().endswith("RendezvousTimeoutError"), lonely["output"]
    assert JOIN_TIMEOUT_S < lonely["seconds"] < JOIN_TIMEOUT_S + SLACK_S
    assert "rank 0 of" not in lonely["output"]  # no worker ever started


def test_started_without_torchrun_it_says_which_command_to_run(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as stopped:
        train.main([])
    message = str(stopped.value)  # what Python prints on stderr before it exits with status 1
    assert "\n" not in message and message.startswith("learn_parallel.ladder.train: started")
    assert message.endswith(f"start it with: {' '.join(launch.torchrun_command(2))}")


def _environment(monkeypatch, world: int, local: int) -> None:
    values = dict(RANK=0, LOCAL_RANK=0, WORLD_SIZE=world, LOCAL_WORLD_SIZE=local, GROUP_RANK=0)
    values |= dict(GROUP_WORLD_SIZE=world // local, MASTER_ADDR="localhost", MASTER_PORT=1)
    for name, value in values.items():
        monkeypatch.setenv(name, str(value))


def test_more_ranks_on_a_node_than_gpus_is_refused_in_one_line(monkeypatch):
    place = launch.Launch(0, 0, 8, 4, 0, 2, "localhost:1")
    with pytest.raises(launch.LaunchError, match=r"4 processes on this node .* but 2 GPUs"):
        launch.pick_device(place, "auto", gpus=2)
    with pytest.raises(launch.LaunchError, match=r"no GPU is visible: .* --device cpu"):
        launch.pick_device(place, "cuda", gpus=0)
    assert launch.pick_device(place, "auto", gpus=0) == torch.device("cpu")
    assert launch.pick_device(place, "cuda", gpus=4) == torch.device("cuda", 0)
    _environment(monkeypatch, world=4, local=4)
    with pytest.raises(SystemExit, match=r"^learn_parallel.ladder.train: .*no GPU is visible"):
        train.main(["--device", "cuda"])  # refused before it joins any process group


def test_a_batch_that_does_not_split_evenly_is_refused(monkeypatch):
    _environment(monkeypatch, world=3, local=3)
    with pytest.raises(SystemExit, match=r"--batch 32 does not split evenly over 3 processes"):
        train.main(["--device", "cpu", "--batch", "32"])


def test_the_verdict_can_say_no(capsys):
    args = train.parse(["--steps", "2"])
    untrained = train.build_model(args, args.seed)
    assert not train.verdict(
        args, untrained, [{"difference_from_rank_0": 0.0}], torch.device("cpu")
    )
    assert "NOT the same training" in capsys.readouterr().out


def test_the_chapter_states_the_defaults_that_hold():
    """The cluster section's numbers: ours from the code, torch's from torch itself."""
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout
    from torch.distributed.run import get_args_parser

    chapter = Path(__file__).resolve().parents[2] / "book" / "distributed.ipynb"
    cells = json.loads(chapter.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert f"`--rdzv-conf join_timeout={launch.JOIN_TIMEOUT_S}` above" in text
    assert f"torch's default is {RendezvousTimeout().join.total_seconds():.0f})" in text
    # --timeout is the training module's option: torchrun has none.
    assert "--timeout" not in get_args_parser()._option_string_actions
    assert "the training module's own `--timeout` (`learn_parallel.ladder.train`," in text
    assert f"; {train.parse([]).timeout:.0f} seconds by default; torchrun has no such" in text
    assert f"\n* {c10d_rendezvous_backend.DEFAULT_PORT} is the port the `c10d`" in text
    restarts = get_args_parser().parse_args(["x.py"]).max_restarts
    assert f"`--max-restarts`, {restarts} by\ndefault" in text
