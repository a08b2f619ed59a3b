"""The findings of the performance and ladder chapters (and parallel_apply's tie check) on the
benchmark's recordings: bench.json, timeline_check.json, recorder_cost.json, worker_overhead,
clone.json, ladder.json.

`_claims_speed.CLAIMS` ties each sentence to one of these; the ones on persistent_workers.json
are in `_findings_threads`, the readers they share in `_recorded_findings`.
"""

from __future__ import annotations

import statistics

from _recorded_findings import _each, _recorded

from learn_parallel.lab.spread import compare
from learn_parallel.lab.timeline import Timeline

WORKLOADS = ("mlp", "conv-cudnn-benchmark-off")  # the benchmark's two, cudnn.benchmark off
DATA_PARALLELS = ("learn_parallel", "torch_dp")


def _steps(group: str) -> dict[tuple[str, int], list[float]]:
    """(implementation, devices) -> every timed step of that benchmark row."""
    rows = _recorded().bench_results(group)
    return {
        (r["implementation"], r["devices"]): r["step_ms_all"] for r in rows if r["status"] == "ok"
    }


def _counts(steps: dict) -> list[int]:
    return sorted({n for _, n in steps if n > 1})


def ddp_beats_both_and_keeps_scaling() -> bool:
    """DDP beats both DataParallels at every count above one; from each count to the next,
    DDP's step shrinks on both workloads; in this one run both DataParallels' read slower on
    ResNet-18, and on the MLP torch's reads slower while learn_parallel's is a tie."""
    grew = {}
    for group in WORKLOADS:
        steps, counts = _steps(group), _counts(_steps(group))
        for n in counts:
            if any(
                compare(steps["ddp", n], steps[i, n], "middle") != "faster" for i in DATA_PARALLELS
            ):
                return False
        for before, n in zip(counts, counts[1:]):
            if compare(steps["ddp", n], steps["ddp", before], "middle") != "faster":
                return False
            for i in DATA_PARALLELS:
                grew[group, i, n] = compare(steps[i, n], steps[i, before], "middle")
    expected = {("conv-cudnn-benchmark-off", i, 4): "slower" for i in DATA_PARALLELS}
    expected |= {("mlp", "torch_dp", 4): "slower", ("mlp", "learn_parallel", 4): "tie"}
    return grew == expected


def replicated_step_keeps_shrinking() -> bool:
    """ReplicatedStep's step is faster at each count than at the count before, both workloads."""
    checked = 0
    for group in WORKLOADS:
        steps = _steps(group)
        counts = sorted(n for impl, n in steps if impl == "replicated")
        for before, n in zip(counts, counts[1:]):
            checked += 1
            if compare(steps["replicated", n], steps["replicated", before], "middle") != "faster":
                return False
    return checked > 0


def learn_parallel_beats_torch_on_resnet() -> bool:
    steps = _steps("conv-cudnn-benchmark-off")
    counts = _counts(steps)
    verdicts = [compare(steps["learn_parallel", n], steps["torch_dp", n], "middle") for n in counts]
    return bool(counts) and set(verdicts) == {"faster"}


def only_torch_dp_loses_to_one_gpu() -> bool:
    """Every wrapper beats one GPU at every count above one, except torch's DataParallel,
    which loses on ResNet-18 at every count and ties on the MLP at four GPUs (only there)."""
    checked, others = 0, {}
    for group in WORKLOADS:
        steps = _steps(group)
        for impl, n in [key for key in steps if key[1] > 1]:
            verdict = compare(steps[impl, n], steps["single", 1], "middle")
            checked += 1
            if verdict != "faster":
                others[group, impl, n] = verdict
    expected = {("conv-cudnn-benchmark-off", "torch_dp", n): "slower" for n in (2, 4)}
    expected[("mlp", "torch_dp", 4)] = "tie"
    return checked > 0 and others == expected


def cudnn_benchmark_multiplies_only_torch() -> bool:
    """With cudnn.benchmark on, torch's DataParallel's median step is several times its step
    with it off at every count above one; learn_parallel's, ReplicatedStep's and DDP's stay
    within a factor of 1.1."""
    on, off = _steps("conv-cudnn-benchmark-on"), _steps("conv-cudnn-benchmark-off")
    for n in _counts(on):
        ratio = {
            i: statistics.median(on[i, n]) / statistics.median(off[i, n])
            for i in ("torch_dp", "learn_parallel", "replicated", "ddp")
        }
        if ratio["torch_dp"] < 3 or not all(
            1 / 1.1 < ratio[i] < 1.1 for i in ("learn_parallel", "replicated", "ddp")
        ):
            return False
    return bool(_counts(on))


def cudnn_benchmark_on_ran_the_off_plans() -> bool:
    """One process ran the setting-on ResNet-18 rows right after the setting-off ones (every
    row but DDP's, in bench.json's order), and wherever a timeline has the GPU work inside
    cuda:0's forward and backward bars, it differs by under a percent between the settings:
    the long-lived threads ran the plans they had kept from the setting-off run."""
    recorded = _recorded()
    ran = [r["group"] for r in recorded.bench["results"] if r["implementation"] != "ddp"]
    order = list(dict.fromkeys(ran))
    off, on = "conv-cudnn-benchmark-off", "conv-cudnn-benchmark-on"
    if order.index(on) != order.index(off) + 1:
        return False
    compared = 0
    for impl in ("single", "learn_parallel"):
        for n in sorted({r["devices"] for r in recorded.bench_results(on)}):
            try:
                pair = [recorded.bench_timeline(g, impl, n) for g in (off, on)]
            except KeyError:
                continue
            for bar in ("forward", "backward"):
                work = [
                    [r.gpu_ms for r in t.records if (r.device, r.phase) == ("cuda:0", bar)]
                    for t in pair
                ]
                if not all(w and None not in w for w in work):
                    continue
                before, after = (statistics.median(w) for w in work)
                compared += 1
                if abs(after - before) >= 0.01 * before:
                    return False
    return compared > 0


def launch_bound_at_most_gpus() -> bool:
    """At the largest count, the first GPU's forward bar is no faster than at the count before
    (whole ranges) while the GPU work inside it fell below three quarters of that count's."""
    recorded, group = _recorded(), "conv-cudnn-benchmark-off"
    counts = sorted({r["devices"] for r in recorded.bench_results(group)})
    forwards = {}
    for n in counts[-2:]:
        timeline = recorded.bench_timeline(group, "learn_parallel", n)
        first = next(row for row in timeline.devices() if row != "host")
        forwards[n] = [r for r in timeline.records if r.device == first and r.phase == "forward"]
    before, last = (forwards[n] for n in counts[-2:])
    work = [statistics.median(r.gpu_ms for r in bars) for bars in (before, last)]
    bars = [[r.duration_ms for r in b] for b in (before, last)]
    return compare(bars[1], bars[0], "range") != "faster" and work[1] < 0.75 * work[0]


def parallel_apply_starts_apart_beyond_the_tie() -> bool:
    """Every GPU's mark minus the host's at a synchronised step's first phase in
    timeline_check.json (steps after the first, as the parallel_apply chapter's cell): twice
    the largest of them (two ties off in opposite directions) is under two fifths of the
    smallest gap between two starts of the chapters' parallel_apply bars."""
    (check,) = _each("timeline_check.json")
    lags = []
    for workload in check["workloads"].values():
        records = workload["synchronized"]["timeline"]["records"]
        for step in sorted({x["step"] for x in records})[1:]:
            mine = [x for x in records if x["step"] == step]
            host = min((x for x in mine if x["device"] == "host"), key=lambda x: x["start_ms"])
            lags += [
                x["start_ms"] - host["start_ms"]
                for x in mine
                if x["device"] != "host" and x["phase"] == host["phase"]
            ]
    timeline = _recorded().timelines["parallel_apply"]
    starts = sorted(r.start_ms for r in timeline.records if r.step == timeline.steps()[-1])
    gap = min(b - a for a, b in zip(starts, starts[1:]))
    return len(lags) >= 8 and 2 * max(abs(lag) for lag in lags) < 2 / 5 * gap


def timeline_check_lag_tells_the_host_ran_ahead() -> bool:
    """timeline_check.json, per workload, medians over the steps after the first (as the
    performance chapter's cell): the GPU rows' lag behind the host row is within 2% of the
    measured step synchronized and over a tenth of it unsynchronized; the gap after the GPUs'
    step before is within 2% of it in both modes; the synchronized span is within a tenth of
    the step, the unsynchronized one over a tenth above it on the MLP only."""
    (check,) = _each("timeline_check.json")
    longer = set()
    for kind, r in check["workloads"].items():
        step = r["measured_median_ms"]
        for mode in ("synchronized", "unsynchronized"):
            spans = [x for x in r[mode]["step_spans"][1:] if "device_lag" in x]
            lag = sorted(x["device_lag"] for x in spans)[len(spans) // 2]
            gap = sorted(x["first_device_start"] - x["previous_device_end"] for x in spans)
            ratio = r[mode]["median_span_ms"] / step
            if abs(gap[len(gap) // 2]) > 0.02 * step:
                return False
            if mode == "synchronized" and (abs(lag) > 0.02 * step or abs(ratio - 1) > 0.1):
                return False
            if mode == "unsynchronized" and lag < 0.1 * step:
                return False
            if mode == "unsynchronized" and ratio > 1.1:
                longer.add(kind)
    return longer == {"mlp"} and len(check["workloads"]) == 2


def recorder_ties_bare_step() -> bool:
    (cost,) = _each("recorder_cost.json")
    runs = cost["workloads"].values()
    verdicts = {compare(r["step_ms"]["recorder"], r["step_ms"]["bare"], "range") for r in runs}
    return verdicts == {"tie"}


def recorder_step_higher_in_most_rounds() -> bool:
    """On every workload the recorded steps' median is above the bare ones', and in more than
    half of the rounds (each a bare step, then a recorded one) the recorded step is slower."""
    (cost,) = _each("recorder_cost.json")
    for r in cost["workloads"].values():
        bare, watched = r["step_ms"]["bare"], r["step_ms"]["recorder"]
        slower = sum(mine > theirs for theirs, mine in zip(bare, watched))
        if statistics.median(watched) <= statistics.median(bare) or 2 * slower <= len(bare):
            return False
    return bool(cost["workloads"])


def persistent_workers_beat_new_threads() -> bool:
    """Over the ranges of both recorded runs, learn_parallel's workers are faster than torch's
    parallel_apply at every count above one, and than a new thread per replica too."""
    recorded = _recorded()
    first, second = recorded.measurement("worker_overhead"), recorded.repeat["worker_overhead"]
    ours, theirs = "persistent workers (learn_parallel)", "torch.nn.parallel.parallel_apply"
    plain = "a new thread per replica per call"
    expected = {(theirs, "2"): "faster", (theirs, "4"): "faster"}
    expected |= {(plain, "2"): "faster", (plain, "4"): "faster"}
    found = {}
    for i, n in enumerate(first.x):
        for name in (theirs, plain):
            if (name, n) in expected:
                mine = [first.series[ours][i], second.series[ours][i]]
                other = [first.series[name][i], second.series[name][i]]
                found[name, n] = compare(mine, other, "range")
    return found == expected


def persistent_workers_slowest_on_one_device() -> bool:
    """At one device learn_parallel's parallel_apply is slower than both others, both runs."""
    recorded = _recorded()
    runs = recorded.measurement("worker_overhead"), recorded.repeat["worker_overhead"]
    ours = "persistent workers (learn_parallel)"
    i = list(runs[0].x).index("1")
    others = [name for name in runs[0].series if name != ours]
    return bool(others) and all(
        run.series[ours][i] > run.series[name][i] for run in runs for name in others
    )


def _plotted_step() -> tuple[Timeline, int, int]:
    """The step the performance chapter plots: the benchmark's ResNet-18 learn_parallel
    timeline (cudnn.benchmark off) on its largest GPU count, its last step, and that count."""
    recorded, group = _recorded(), "conv-cudnn-benchmark-off"
    most = max(r["devices"] for r in recorded.bench_results(group))
    timeline = recorded.bench_timeline(group, "learn_parallel", most)
    return timeline, timeline.steps()[-1], most


def replicate_bars_mostly_waiting() -> bool:
    """In the performance chapter's plotted step, every GPU row's replicate bar holds GPU
    work of less than half its length."""
    timeline, last, _ = _plotted_step()
    bars = [
        r
        for r in timeline.records
        if r.step == last and r.device != "host" and r.phase == "replicate"
    ]
    return bool(bars) and all(r.gpu_ms is not None and r.gpu_ms < 0.5 * r.duration_ms for r in bars)


def replicate_alone_below_the_steps_bar() -> bool:
    """clone.json's lone replicate call (ResNet-18) is shorter than the mean replicate bar of
    the benchmark's learn_parallel step on as many GPUs, on the host row and on cuda:0."""
    from learn_parallel.lab.plots import phase_totals

    recorded = _recorded()
    (clone,) = _each("clone.json")
    n, alone = clone["hardware"]["device_count"], clone["replicate_host_ms"]["conv"]["broadcast"]
    group = next(g["key"] for g in recorded.bench["groups"] if g["key"].startswith("conv"))
    bars = phase_totals(recorded.bench_timeline(group, "learn_parallel", n))
    return all(alone < bars[row]["replicate"] for row in ("host", "cuda:0"))


def step_graphs_verdicts() -> bool:
    """step_graphs against ddp_graphs, the one-thread reference and eager DDP, per machine and
    workload: ties DDP in a graph and the reference, beats eager DDP, on every one of them."""
    from learn_parallel.lab.bridges import verdict

    found = {}
    for report in _each("ladder.json"):
        n = report["hardware"]["device_count"]
        for kind in report["workloads"]:
            rows = {r["rung"]: r for r in report["rows"] if r["workload"] == kind}
            found[n, kind] = tuple(
                verdict(rows["step_graphs"], rows[o])
                for o in ("ddp_graphs", "one_thread_reference", "ddp")
            )
    return len(found) > 1 and set(found.values()) == {("tie", "tie", "faster")}


def _ladder_against_fewer(rungs: tuple[str, ...]) -> dict:
    """(workload, rung) -> the ladders' verdict on the rung on the most GPUs recorded against
    itself on the fewest."""
    from learn_parallel.lab.bridges import verdict

    rows = {}
    for report in _each("ladder.json"):
        for r in report["rows"]:
            if r["status"] == "ok" and r["rung"] in rungs:
                rows[r["workload"], r["rung"], r["devices"]] = r
    found = {}
    for kind, rung, n in rows:
        counts = sorted(c for k, g, c in rows if (k, g) == (kind, rung))
        if n == counts[-1] and len(counts) > 1:
            found[kind, rung] = verdict(rows[kind, rung, n], rows[kind, rung, counts[0]])
    return found


def ladder_ties_each_data_parallel_with_fewer_gpus() -> bool:
    """In the ladders' rounds, each DataParallel (lean_replicate, torch_dp) on the most GPUs
    recorded ties itself on the fewest, on both workloads."""
    found = _ladder_against_fewer(("lean_replicate", "torch_dp"))
    return len(found) == 4 and set(found.values()) == {"tie"}


def ladder_ddp_and_replicated_step_shrink() -> bool:
    """In the ladders' rounds, DDP and ReplicatedStep (step_graphs) on the most GPUs recorded
    are faster than themselves on the fewest, on both workloads."""
    found = _ladder_against_fewer(("ddp", "step_graphs"))
    return len(found) == 4 and set(found.values()) == {"faster"}


def replicate_and_forward_bars_mostly_waiting_on_most_gpus() -> bool:
    """The benchmark's ResNet-18 learn_parallel timeline on its largest GPU count, last step
    (the one the performance chapter plots): on every GPU row, the GPU work inside the
    replicate bar and inside the forward bar is under half of that bar."""
    timeline, last, most = _plotted_step()
    rows = [row for row in timeline.devices() if row != "host"]
    checked = 0
    for row in rows:
        for phase in ("replicate", "forward"):
            bars = [
                r for r in timeline.records if (r.device, r.phase, r.step) == (row, phase, last)
            ]
            if not bars or any(r.gpu_ms is None for r in bars):
                return False
            if sum(r.gpu_ms for r in bars) >= 0.5 * sum(r.duration_ms for r in bars):
                return False
            checked += 1
    return most > 1 and checked == 2 * len(rows) == 2 * most


def longest_idle_gap_is_the_wait_for_the_slowest_forward() -> bool:
    """The performance chapter's forward-share exercise, on cuda:0's last step of the 4-GPU
    (most GPUs) ResNet-18 timeline: the longest idle gap between its phases ends where its
    gather begins, and another GPU's forward bar ends later than cuda:0's (the slowest replica's
    forward, which the gather waits for)."""
    timeline, last, _ = _plotted_step()
    mine = sorted(
        (r for r in timeline.records if r.device == "cuda:0" and r.step == last),
        key=lambda r: r.start_ms,
    )
    gaps, covered = [], mine[0].end_ms  # (gap, the phase after it), phases nested or not
    for r in mine[1:]:
        if r.start_ms > covered:
            gaps.append((r.start_ms - covered, r.phase))
        covered = max(covered, r.end_ms)
    forwards = {
        r.device: r.end_ms
        for r in timeline.records
        if r.step == last and r.phase == "forward" and r.device != "host"
    }
    slowest = max(forwards, key=forwards.get)
    return max(gaps)[1] == "gather" and slowest != "cuda:0"
