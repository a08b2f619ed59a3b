"""The findings of the pieces' chapters (intro to distributed), checked against their
recordings: chapters.json and its repeat, floors.json, profiler_tax.json, the logs.

`_claims_pieces.CLAIMS` ties each sentence to one of these; the readers they share are in
`_recorded_findings`.
"""

from __future__ import annotations

import json
import re
import statistics

from _recorded_findings import LOGS, _each, _recorded

from learn_parallel.lab.spread import compare


def torchrun_misses_the_aim_on_four_gpus() -> bool:
    """Under torchrun on four GPUs, ours is slower than torch's by more than the 1.2 aim."""
    for rec in _each("torchrun.json"):
        ok = [r for r in rec["runs"] if r["gpus"] == 4 and r["status"] == "ok"]
        ours, theirs = ([r["median_ms"] for r in ok if r["ddp"] == d] for d in ("ours", "torch"))
        if ours and theirs:
            return statistics.median(ours) / statistics.median(theirs) > 1.2
    return False


def broadcast_coalesced_slower_than_copies() -> bool:
    """floors.json (the chapters' machine): every broadcast_coalesced sample took longer than
    every one of the one-after-another copies (the ranges do not overlap), so the spread rule
    calls it slower."""
    from learn_parallel.lab import floors

    run = floors.load(_recorded().machine).record["replicate_copies"]
    ours, copies = run["broadcast_coalesced_ms"], run["one_after_another_ms"]
    return min(ours) > max(copies) and compare(ours, copies) == "slower"


def _replicate_chunks() -> list[int]:
    """Bytes of the chunks torch's C++ cuts the replicate chapter's MLP into (four
    nn.Linear(1024, 1024), float32); a chunk closes once it holds buffer_size or more."""
    chunks = [0]
    for nbytes in [4 * 1024 * 1024, 4 * 1024] * 4:
        if chunks[-1] >= 10 * 2**20:
            chunks.append(0)
        chunks[-1] += nbytes
    return chunks


def nccl_calls_set_the_replicate_bars() -> bool:
    """floors.json and chapters.json (replicate_copy): NCCL's 1 KiB broadcast takes over a third
    as long as its broadcast of the larger chunk (not half: "a large part", not most) and over
    half as long as that of the smaller, and every bar to another GPU is nearer (by over half)
    the chunks' NCCL times summed than its link floor."""
    from learn_parallel.lab import floors

    recorded = _recorded()
    found = floors.load(recorded.machine)
    copy = recorded.measurement("replicate_copy")
    size = found.counts("replicate_copy", len(copy.x))["parameters"]
    calls = [found.collective_ms("broadcast", b) for b in _replicate_chunks()]
    tiny = found.collective_ms("broadcast", 1024)
    bars = list(enumerate(copy.series["copy"]))[1:]
    floor = [size / (found.copy_gb_s(0, k) * 1e9) * 1e3 for k, _ in bars]
    nearer = all(abs(ms - sum(calls)) < abs(ms - f) / 2 for (_, ms), f in zip(bars, floor))
    if len(calls) != 2:
        return False
    shares = 1 / 3 < tiny / max(calls) < 0.5 and tiny / min(calls) > 0.5
    return shares and nearer


def replicate_bars_ran_with_nccl_2_28_9() -> bool:
    """floors.json names NCCL 2.28.9, and it and chapters.json (the replicate bars) were recorded
    at one commit, on one machine, with one torch build."""
    from learn_parallel.lab import records

    machine = _recorded().machine
    floor, bars = (records.read_json(n, machine) for n in ("floors.json", "chapters.json"))
    same = all(floor[k] == bars[k] for k in ("commit", "machine", "torch_version"))
    return same and floor["collectives"]["nccl_version"] == "2.28.9"


def chapter_bars_ran_torch_2_11_0() -> bool:
    """chapters.json and its repeat (the replicate and gather bars) were recorded with torch
    2.11.0, the version whose source the chapters link for those bars."""
    from learn_parallel.lab import records

    machine = _recorded().machine
    runs = [records.read_json(n, machine) for n in ("chapters.json", "chapters-repeat.json")]
    return all(run["torch_version"].split("+")[0] == "2.11.0" for run in runs)


def broadcast_coalesced_is_two_nccl_calls() -> bool:
    """floors.json (the chapters' machine): a broadcast's floor (the bytes once at the first
    GPU's fastest link) is a third of the copies' (n - 1 = 3 copies at the links' harmonic
    mean); NCCL's flat broadcast of the bytes takes about twice that floor and its 1 KiB
    broadcast about a third as long; NCCL's times at the two chunks' sizes sum to most of
    broadcast_coalesced's median, not more."""
    from learn_parallel.lab import floors

    found = floors.load(_recorded().machine)
    run = found.record["replicate_copies"]
    n, size = run["devices"], run["bytes"]
    links = [found.copy_gb_s(0, k) for k in range(1, n)]
    copies = (n - 1) * size / (len(links) / sum(1 / v for v in links))
    once = size / max(links)
    flat = found.collective_ms("broadcast", size)
    calls = sum(found.collective_ms("broadcast", b) for b in _replicate_chunks())
    took = statistics.median(run["broadcast_coalesced_ms"])
    return (
        n == 4
        and 0.3 < once / copies < 0.37
        and 1.7 < flat / (once / 1e9 * 1e3) < 2.4
        and 0.28 < found.collective_ms("broadcast", 1024) / flat < 0.4
        and 0.5 < calls / took <= 1
    )


def ddp_peak_gap_is_more_than_two_gradient_copies() -> bool:
    """distributed.json: torch's peak minus ours exceeds two float32 gradient copies."""
    found = 0
    for rec in _each("distributed.json"):
        for entry in rec.get("workloads", {}).values():
            peaks = {
                i: entry["results"][i].get("peak_memory_mb_per_rank") for i in ("ours", "torch")
            }
            if peaks["ours"] and peaks["torch"]:
                found += 1
                if peaks["torch"][0] - peaks["ours"][0] <= 2 * entry["parameters"] * 4 / 2**20:
                    return False
    return found > 0


def dp_second_gpu_loss_and_optimizer_hold_no_work() -> bool:
    """distributed.json: in every DataParallel timeline, each loss and optimizer bar of
    `cuda:1` (the step marks both on every device) holds no profiled GPU work."""
    bars = [
        r
        for rec in _each("distributed.json")
        for entry in rec.get("workloads", {}).values()
        for r in entry.get("dp_timeline", {}).get("records", [])
        if r["device"] == "cuda:1" and r["phase"] in ("loss", "optimizer")
    ]
    phases = {r["phase"] for r in bars}
    return phases == {"loss", "optimizer"} and all(r["gpu_ms"] == 0 for r in bars)


def profiler_tax_slows_every_rung() -> bool:
    """Five rounds a rung; every taxed median above its clean one; one of eleven verdicts
    slower, the other ten ties."""
    (tax,) = _each("profiler_tax.json")
    rungs = tax["rungs"].values()
    five = all(len(r["taxed"]) == len(r["clean"]) == 5 for r in rungs)
    higher = all(statistics.median(r["taxed"]) > statistics.median(r["clean"]) for r in rungs)
    verdicts = [compare(r["taxed"], r["clean"]) for r in rungs]
    return (
        five
        and higher
        and len(verdicts) == 11
        and verdicts.count("slower") == 1 == 11 - verdicts.count("tie")
    )


def _earlier_profiler_taxes() -> list[dict]:
    """The two earlier profiler-tax runs, kept as logs."""
    paths = sorted((LOGS / "earlier").glob("profiler_tax-*.json"))
    return [json.loads(path.read_text()) for path in paths]


def profiler_tax_earlier_runs() -> bool:
    """The two earlier runs kept as logs: one with all eleven taxed medians higher and two
    verdicts slower; the other six higher, five lower, one verdict slower."""
    found = []
    for run in _earlier_profiler_taxes():
        rungs = run["rungs"].values()
        higher = sum(statistics.median(r["taxed"]) > statistics.median(r["clean"]) for r in rungs)
        lower = sum(statistics.median(r["taxed"]) < statistics.median(r["clean"]) for r in rungs)
        slower = [compare(r["taxed"], r["clean"]) for r in rungs].count("slower")
        found.append((higher, lower, slower))
    return sorted(found) == [(6, 5, 1), (11, 0, 2)]


def profiler_tax_up_to_a_tenth_in_two_runs_of_three() -> bool:
    """The shipped run and the two earlier ones: in two, every taxed median is above its clean
    one, the smallest excess under 1% of a step in each and the largest 9-11% (about a tenth),
    more than twice the smallest (uneven between rungs); in the third, some taxed medians are
    below; and the shipped run's five rounds find one rung of eleven slower."""
    runs = _each("profiler_tax.json") + _earlier_profiler_taxes()
    excess = [
        sorted(statistics.median(r["taxed"]) / statistics.median(r["clean"]) - 1 for r in rungs)
        for rungs in (run["rungs"].values() for run in runs)
    ]
    seen = [e for e in excess if 0 < e[0] < 0.01 and 2 * e[0] < e[-1]]
    return (
        len(runs) == 3
        and len(seen) == 2
        and 0.09 < max(e[-1] for e in seen) < 0.11
        and sum(e[0] < 0 for e in excess) == 1
        and profiler_tax_slows_every_rung()
    )


def devices_chapter_ran_on_four_gpus() -> bool:
    """notebooks-4gpu.log: the devices chapter ran to its end (ok) on the four H200 GPUs."""
    log = (LOGS / "checks-after-recording" / "notebooks-4gpu.log").read_text()
    _, found, rest = log.partition("\ndevices.ipynb: ok (")
    block = rest.split(".ipynb: ", 1)[0]  # the lines the chapter printed, up to the next one
    return bool(found) and "4 devices: cuda:0 (NVIDIA H200)" in block and "4 GPUs:" in block


def devices_chapter_ran_on_two_gpus() -> bool:
    """The 2-GPU call of 6f652e5: the devices chapter ok among 17 of 17, on two H200s."""
    folder = LOGS / "checks-2026-11-29" / "2gpu-6f652e5"
    log = (folder / "notebooks-call.log").read_text()
    gpus = (folder / "nvidia-smi.txt").read_text()
    return (
        "\ndevices.ipynb: ok (" in log
        and "17 of 17 chapters ok" in log
        and gpus.count("NVIDIA H200") == 2
    )


def one_gpu_run_executed_every_chapter() -> bool:
    """checks-2026-11-29/1gpu-6d94f9a: 17 chapters, each ok, on one H200 with torch 2.11."""
    folder = LOGS / "checks-2026-11-29" / "1gpu-6d94f9a"
    log = (folder / "notebooks.log").read_text()
    ran = re.findall(r"^(\S+\.ipynb): (\S+)", log, re.MULTILINE)
    return (
        len(ran) == 17
        and all(status == "ok" for _, status in ran)
        and "as this machine has 1 GPU" in log
        and (folder / "nvidia-smi.txt").read_text().count("NVIDIA H200") == 1
        and (folder / "versions.txt").read_text().startswith("2.11.")
    )


def scatter_copies_above_twice_their_floor() -> bool:
    """chapters.json and its repeat, scatter_copy: every copy's bar, in both runs, more than
    twice its slice's bytes over floors.json's rate between the two GPUs."""
    from learn_parallel.lab import floors

    recorded = _recorded()
    found = floors.load(recorded.machine)
    runs = [r["scatter_copy"] for r in (recorded.measurements, recorded.repeat)]
    size = 4096 * 1024 * 4 // len(runs[0].x)  # the listing's batch, one slice per GPU
    ratios = [
        run.series["copy"][k] / (size / (found.copy_gb_s(0, k) * 1e9) * 1e6)
        for run in runs
        for k in range(1, len(run.x))
    ]
    return len(ratios) == 6 and min(ratios) > 2


def matmul_runs_disagree_on_the_fastest_and_the_slowest_gpu() -> bool:
    """chapters.json and its repeat, matmul: the fastest GPU differs, and so does the slowest;
    cuda:0 is the fastest in the first run and the slowest in the second."""
    ranked = _ranked("matmul", "matmul")
    return ranked[0][0] == ranked[1][-1] == "cuda:0" and ranked[0][-1] != ranked[1][-1]


def _ranked(key: str, series: str) -> list[list[str]]:
    """chapters.json and its repeat: per run, the GPUs of measurement ``key``, fastest first."""
    recorded = _recorded()
    runs = [r[key] for r in (recorded.measurements, recorded.repeat)]
    return [[d for _, d in sorted(zip(run.series[series], run.x))] for run in runs]


def replica_forward_runs_disagree_on_the_slowest_gpu() -> bool:
    """chapters.json and its repeat, replica_forward: the slowest GPU differs between the runs."""
    ranked = _ranked("replica_forward", "forward")
    return ranked[0][-1] != ranked[1][-1]


def source_check_repeat_within_a_tenth() -> bool:
    """chapters.json and its repeat, source_check: run 2 within 10% of run 1 at every size."""
    recorded = _recorded()
    first, second = (
        r["source_check"].series["check"] for r in (recorded.measurements, recorded.repeat)
    )
    return len(first) == len(second) == 5 and all(
        abs(b / a - 1) < 0.1 for a, b in zip(first, second)
    )


def profiler_tax_ran_on_the_benchmarks_mlp() -> bool:
    """The shipped profiler-tax run and the two earlier ones all timed the benchmark's MLP at
    its GPU size (workload mlp, not --quick)."""
    runs = _each("profiler_tax.json") + _earlier_profiler_taxes()
    return len(runs) == 3 and all(
        r["settings"]["workload"] == "mlp" and not r["settings"]["quick"] for r in runs
    )
