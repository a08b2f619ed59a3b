"""The claims on the performance and ladder chapters on the benchmarks' recordings (and the
parallel_apply chapter's on timeline_check.json), each with its check in `_findings_speed`
(or, for the ladder's timelines and its DDP rows beside the benchmark's, here).
"""

from __future__ import annotations

import _findings_speed as findings
from _claim import BENCH, Claim


def _ladders() -> dict:
    from learn_parallel.lab import records

    root = records.recorded_root()
    found = {m.name: records.read_json("ladder.json", m.name) for m in root.iterdir()}
    return {name: report for name, report in found.items() if report}


def _step_graphs_all_reduce_is_after_backward() -> bool:
    """In every step_graphs timeline, each device's all-reduce starts after its graph ends."""
    from learn_parallel.lab.bridges import rung_timeline

    seen = 0
    for report in _ladders().values():
        for kind in report["workloads"]:
            timeline = rung_timeline(report, kind, "step_graphs")
            for step in timeline.steps():
                mine = [r for r in timeline.records if r.step == step and r.device != "host"]
                for device in {r.device for r in mine}:
                    graph = [
                        r
                        for r in mine
                        if r.device == device and "graph" in r.phase and "optimizer" not in r.phase
                    ]
                    reduce = [r for r in mine if r.device == device and r.phase == "all-reduce"]
                    if graph and reduce:
                        seen += 1
                        if min(r.start_ms for r in reduce) < max(r.end_ms for r in graph):
                            return False
    return seen > 0


def _replicated_step_against_ddp_in_both() -> bool:
    """ReplicatedStep is faster than eager DDP in every ladder and in the benchmark's run on as
    many GPUs; the two readings' ratios of the medians differ most on ResNet-18 on four GPUs,
    where the benchmark's DDP median lies inside the ladder's DDP rounds, above their median,
    and the benchmark's ratio is the lower."""
    import statistics

    from _recorded_findings import _recorded

    from learn_parallel.lab.bridges import repeats_of, verdict
    from learn_parallel.lab.spread import compare

    groups, gaps = {"mlp": "mlp", "conv": "conv-cudnn-benchmark-off"}, {}
    for report in _ladders().values():
        for kind in report["workloads"]:
            rows = {r["rung"]: r for r in report["rows"] if r["workload"] == kind}
            top, ddp, n = rows["step_graphs"], rows["ddp"], rows["ddp"]["devices"]
            results = _recorded().bench_results(groups[kind])
            bench = {r["implementation"]: r for r in results if r["devices"] == n}
            said = compare(
                bench["replicated"]["step_ms_all"], bench["ddp"]["step_ms_all"], "middle"
            )
            if verdict(top, ddp) != "faster" or said != "faster":
                return False
            rounds = repeats_of(ddp)
            theirs = statistics.median(repeats_of(top)) / statistics.median(rounds)
            ours = bench["replicated"]["step_ms"] / bench["ddp"]["step_ms"]
            inside = min(rounds) <= bench["ddp"]["step_ms"] <= max(rounds)
            above = bench["ddp"]["step_ms"] > statistics.median(rounds)
            gaps[kind, n] = (abs(ours - theirs), inside and above and ours < theirs)
    return len(gaps) == 4 and max(gaps, key=gaps.get) == ("conv", 4) and gaps["conv", 4][1]


def _forward_work_per_image_grows() -> bool:
    """The GPU work in learn_parallel's first-GPU ResNet-18 forward bar, times the GPU count,
    grows from each recorded count to the next: the slice shrinks, its work per image grows."""
    import statistics

    from _recorded_findings import _recorded

    recorded, group = _recorded(), "conv-cudnn-benchmark-off"
    totals = []
    for n in sorted({r["devices"] for r in recorded.bench_results(group)}):
        timeline = recorded.bench_timeline(group, "learn_parallel", n)
        first = next(row for row in timeline.devices() if row != "host")
        work = [r.gpu_ms for r in timeline.records if r.device == first and r.phase == "forward"]
        totals.append(n * statistics.median(work))
    return len(totals) > 1 and all(a < b for a, b in zip(totals, totals[1:]))


CLAIMS: list[Claim] = [
    Claim(
        "performance",
        "**DDP is faster than both DataParallels** at every GPU count above one, on both "
        "workloads,\n  and its step keeps shrinking as GPUs are added, while neither "
        "DataParallel's step shrinks\n  beyond two GPUs",
        # Neither reading, the benchmark's run or the two ladder runs, has either step shrink.
        lambda: (
            findings.ddp_beats_both_and_keeps_scaling()
            and findings.ladder_ties_each_data_parallel_with_fewer_gpus()
            and findings.ladder_ddp_and_replicated_step_shrink()
        ),
        BENCH + " and ladder.json",
    ),
    Claim(
        "performance",
        "From two GPUs to four, DDP's step shrank and neither\n  DataParallel's did. In the "
        'benchmark\'s one run ("itself on 2") both read slower on ResNet-18,\n  and on the MLP '
        "torch's slower and learn_parallel's a tie",
        findings.ddp_beats_both_and_keeps_scaling,
        BENCH,
    ),
    Claim(
        "performance",
        "in the ladder's rounds (the last eight\n  lines) each DataParallel is a tie with itself "
        "on two GPUs, on both workloads, and DDP and\n  ReplicatedStep are faster than "
        "themselves on two",
        lambda: (
            findings.ladder_ties_each_data_parallel_with_fewer_gpus()
            and findings.ladder_ddp_and_replicated_step_shrink()
        ),
        "ladder.json",
    ),
    Claim(
        "performance",
        "give the same verdicts, with other ratios\n  of the medians; the two readings differ "
        "most on ResNet-18 on four GPUs, where the\n  benchmark's DDP median lies inside the "
        "range of the ladder's DDP rounds, above their median,\n  and the benchmark's ratio is "
        "the lower",
        _replicated_step_against_ddp_in_both,
        BENCH + " and ladder.json",
    ),
    Claim(
        "performance",
        "its step shrinks with\n  every GPU added on both workloads",
        findings.replicated_step_keeps_shrinking,
        BENCH,
    ),
    Claim(
        "performance",
        "**learn_parallel beats torch's DataParallel on ResNet-18**",
        findings.learn_parallel_beats_torch_on_resnet,
        BENCH,
    ),
    Claim(
        "performance",
        "On ResNet-18 learn_parallel is the faster at\n  every GPU count above one",
        findings.learn_parallel_beats_torch_on_resnet,
        BENCH,
    ),
    Claim(
        "performance",
        "except torch's DataParallel, slower than one GPU on\n  ResNet-18 at every count above one "
        "and a tie with it on the MLP at four GPUs:",
        findings.only_torch_dp_loses_to_one_gpu,
        BENCH,
    ),
    Claim(
        "performance",
        "**With `cudnn.benchmark` on, torch's DataParallel multiplies its step**",
        findings.cudnn_benchmark_multiplies_only_torch,
        BENCH,
    ),
    Claim(
        "performance",
        "learn_parallel's and DDP's median steps\n  stay within a factor of 1.1 of theirs with "
        "the setting off, either way",
        findings.cudnn_benchmark_multiplies_only_torch,
        BENCH,
    ),
    Claim(
        "performance",
        "learn_parallel's, ReplicatedStep's and DDP's ratios stay within a factor of 1.1 "
        "either way",
        findings.cudnn_benchmark_multiplies_only_torch,
        BENCH,
    ),
    Claim(
        "performance",
        "learn_parallel's threads live for the whole process, which ran the setting-on "
        "steps right\n  after the setting-off ones",
        findings.cudnn_benchmark_on_ran_the_off_plans,
        BENCH + ": its rows' order",
    ),
    Claim(
        "performance",
        "One process ran every group but DDP's, the\nsetting-on group right after the setting-off "
        "one",
        findings.cudnn_benchmark_on_ran_the_off_plans,
        BENCH + ": its rows' order",
    ),
    Claim(
        "performance",
        "where a\ntimeline has the GPU work inside `cuda:0`'s forward and backward bars, it "
        "differs by under a\npercent between the settings",
        findings.cudnn_benchmark_on_ran_the_off_plans,
        BENCH + ": its single and learn_parallel timelines, both settings",
    ),
    Claim(
        "performance",
        "**At the most GPUs recorded, learn_parallel's forward is launch-bound**",
        findings.launch_bound_at_most_gpus,
        BENCH + ": its learn_parallel timelines",
    ),
    Claim(
        "performance",
        "At the most GPUs recorded it is\nnot even shorter than at the count before",
        findings.launch_bound_at_most_gpus,
        BENCH + ": its learn_parallel timelines",
    ),
    Claim(
        "performance",
        "The replicate call timed alone took less than the replicate bar of the benchmark's step "
        "on\nas many GPUs",
        findings.replicate_alone_below_the_steps_bar,
        "clone.json and " + BENCH,
    ),
    Claim(
        "ladder",
        "In the recordings above, `step_graphs` ties DDP in a graph and the one-thread "
        "reference on\nevery machine and workload, and it is faster than eager DDP on every one",
        findings.step_graphs_verdicts,
        "ladder.json of every machine",
    ),
    Claim(
        "ladder",
        "even where that share is largest (the\nlast line) DDP in a graph, which overlaps it, did "
        "not beat `step_graphs`",
        findings.step_graphs_verdicts,
        "ladder.json of every machine",
    ),
    Claim(
        "performance",
        "it is a small part of every replicate bar",
        findings.replicate_bars_mostly_waiting,
        BENCH + ": the plotted timeline",
    ),
    Claim(
        "performance",
        'the lag printed after\n"begin", near zero in the synchronised steps and positive in '
        "the unsynchronised ones, on both\nworkloads",
        findings.timeline_check_lag_tells_the_host_ran_ahead,
        "timeline_check.json",
    ),
    Claim(
        "performance",
        "the unsynchronised span is more than a tenth longer than the step on the MLP only. The "
        "last\nnumber, how long after the GPUs finished the step before their rows begin, is "
        "near zero in both\nmodes",
        findings.timeline_check_lag_tells_the_host_ran_ahead,
        "timeline_check.json",
    ),
    Claim(
        "parallel_apply",
        "There twice the largest such distance is under two fifths of the smallest gap\nbetween "
        "two bars' starts here",
        findings.parallel_apply_starts_apart_beyond_the_tie,
        "timeline_check.json; chapters.json: the parallel_apply timeline",
    ),
    Claim(
        "performance",
        "With the recorder on, both workloads' steps are a tie with the bare ones",
        findings.recorder_ties_bare_step,
        "recorder_cost.json",
    ),
    Claim(
        "performance",
        "on both workloads the recorded step's\nmedian is the higher one and the recorded step "
        "was the slower in most rounds",
        findings.recorder_step_higher_in_most_rounds,
        "recorder_cost.json",
    ),
    Claim(
        "performance",
        "learn_parallel's persistent workers are faster than torch's\n`parallel_apply` by more "
        "than the change from one run to the next; against a plain new thread\nper replica they "
        "are faster at two devices and at four too",
        findings.persistent_workers_beat_new_threads,
        "chapters.json and chapters-repeat.json: worker_overhead",
    ),
    Claim(
        "performance",
        "At one device\nlearn_parallel's is the slowest of the three in both runs",
        findings.persistent_workers_slowest_on_one_device,
        "chapters.json and chapters-repeat.json: worker_overhead",
    ),
    Claim(
        "ladder",
        "the all-reduce starts when the last device's backward graph ends",
        lambda: _step_graphs_all_reduce_is_after_backward(),
        "ladder.json of every recorded machine: step_graphs' timelines",
    ),
    Claim(
        "performance",
        "and on ResNet-18 it does (the GPU work in learn_parallel's\nfirst-GPU forward bar, "
        "printed under the phase breakdown at each count, times the count, grows\nas the slice "
        "shrinks)",
        lambda: _forward_work_per_image_grows(),
        BENCH + ": its learn_parallel timelines",
    ),
    Claim(
        "performance",
        "The\nrecorded ResNet-18 step below, on the most GPUs recorded, shows that there it was "
        "not: the GPU\nwork inside every GPU's replicate and forward bars is under half of the "
        "bar",
        findings.replicate_and_forward_bars_mostly_waiting_on_most_gpus,
        BENCH + ": its learn_parallel timeline on the most GPUs",
    ),
]
