"""The findings on persistent_workers.json: fresh threads against persistent ones, the
first-call probes and the profile, as the performance, ladder and glossary chapters state them.

`_claims_threads.CLAIMS` ties each sentence to one of these; the readers they share are in
`_recorded_findings`.
"""

from __future__ import annotations

import re
import statistics

from _recorded_findings import _each, _recorded

from learn_parallel.lab.spread import compare


def _workers() -> dict[tuple[str, bool, str], list[float]]:
    (workers,) = _each("persistent_workers.json")
    return {
        (r["workload"], r["cudnn_benchmark"], r["runner"]): r["step_ms"] for r in workers["runs"]
    }


def fresh_threads_cost_most_on_resnet_with_benchmark() -> bool:
    """Fresh threads are slower than persistent ones for every workload and setting, by the
    largest factor on ResNet-18 with cudnn.benchmark on; of the one-convolution probes only
    that setting's is above the first-call threshold, both whole-forward probes are, and each
    probe's first-call extra is larger with the setting on."""
    runs = _workers()
    cases = sorted({(w, b) for w, b, _ in runs})
    factor = {}
    for case in cases:
        fresh, kept = runs[(*case, "fresh threads")], runs[(*case, "persistent threads")]
        if compare(fresh, kept, "middle") != "slower":
            return False
        factor[case] = statistics.median(fresh) / statistics.median(kept)
    (workers,) = _each("persistent_workers.json")
    costly = {
        what
        for what, r in workers["first_call"].items()
        if statistics.median(r["first_call_in_new_thread_ms"])
        > 2 * statistics.median(r["second_call_same_thread_ms"]) + 0.5
    }
    forwards = {w for w in workers["first_call"] if w.startswith("resnet18 forward")}

    def extra(what: str) -> float:
        r = workers["first_call"][what]
        first = statistics.median(r["first_call_in_new_thread_ms"])
        return first - statistics.median(r["second_call_same_thread_ms"])

    pairs = [("conv, cudnn.benchmark on", "conv, cudnn.benchmark off")]
    pairs += [(w, w.replace(" on", " off")) for w in forwards if w.endswith(" on")]
    return (
        max(factor, key=factor.get) == ("resnet18", True)
        and costly == {"conv, cudnn.benchmark on"} | forwards
        and len(forwards) == 2
        and all(extra(on) > extra(off) for on, off in pairs)
        and extra("conv, cudnn.benchmark off") > 0
    )


def _convolution_rows(workers: dict, setting: str) -> tuple[dict, dict]:
    """The profile's aten::cudnn_convolution rows, fresh threads and persistent ones, with
    cudnn.benchmark ``setting`` ("on" or "off")."""
    events = workers["profile"]["events"]
    return tuple(
        events[f"{k}, cudnn.benchmark {setting}"]["aten::cudnn_convolution"]
        for k in ("fresh threads", "persistent")
    )


def fresh_threads_pay_host_time_in_the_convolution() -> bool:
    """With cudnn.benchmark off, the profiled cuDNN convolution has as many calls and the same
    GPU time (within a tenth) in both runners, and over five times the CPU time in fresh ones."""
    (workers,) = _each("persistent_workers.json")
    fresh, kept = _convolution_rows(workers, "off")
    same_gpu = abs(fresh["gpu_us"] - kept["gpu_us"]) <= 0.1 * kept["gpu_us"]
    return fresh["count"] == kept["count"] and same_gpu and fresh["cpu_us"] > 5 * kept["cpu_us"]


# ResNet-18's distinct forward convolution shapes: conv1, layer1's 3 x 3, and in each of
# layers 2-4 a stride-2 3 x 3, a 3 x 3 and a 1 x 1 downsample (the performance chapter counts
# them from torchvision's layout).
RESNET18_CONV_SHAPES = 11


def _probe_shares(setting: str) -> list[float]:
    """conv1's first-call extra in a new thread times the shapes, over the fresh threads'
    extra: per replica thread in the profile's convolution row, and in the forwards' host time."""
    (workers,) = _each("persistent_workers.json")
    probe = workers["first_call"][f"conv, cudnn.benchmark {setting}"]
    extra = statistics.median(probe["first_call_in_new_thread_ms"])
    extra -= statistics.median(probe["second_call_same_thread_ms"])
    per_thread, forwards = _fresh_extras(workers, setting, "cpu_us")
    return [extra * RESNET18_CONV_SHAPES / total for total in (per_thread, forwards)]


def _fresh_extras(workers: dict, setting: str, field: str) -> tuple[float, float]:
    """The fresh threads' extra over persistent ones, in ms: ``field`` of the profile's
    aten::cudnn_convolution row per replica thread, and the ResNet-18 forwards' host time."""
    fresh, kept = (row[field] for row in _convolution_rows(workers, setting))
    per_thread = (fresh - kept) / 1e3 / workers["hardware"]["device_count"]
    runs = {(r["workload"], r["cudnn_benchmark"], r["runner"]): r for r in workers["runs"]}
    on = setting == "on"
    forwards = runs["resnet18", on, "fresh threads"]["median_forwards_host_ms"]
    forwards -= runs["resnet18", on, "persistent threads"]["median_forwards_host_ms"]
    return per_thread, forwards


def probe_accounts_for_under_half_with_benchmark_off() -> bool:
    """With cudnn.benchmark off, the probe summed over the shapes is under half of both
    extras; with it on, below both and over half of them (of their order)."""
    return all(s < 0.5 for s in _probe_shares("off")) and all(
        0.5 < s < 1 for s in _probe_shares("on")
    )


def _forward_probe_shares(setting: str) -> list[float]:
    """A whole ResNet-18 forward's first-call extra in a new thread (medians) over the fresh
    threads' extras: per replica thread in the profile's convolution row, and in the forwards'
    host time (the two that `_probe_shares` divides by)."""
    (workers,) = _each("persistent_workers.json")
    first_call = workers["first_call"]
    (what,) = [w for w in first_call if re.fullmatch(f"resnet18 forward.* {setting}", w)]

    def extra(key: str) -> float:
        first = statistics.median(first_call[key]["first_call_in_new_thread_ms"])
        return first - statistics.median(first_call[key]["second_call_same_thread_ms"])

    # _probe_shares gives conv1's extra x the shapes over each total: recover the totals.
    summed = extra(f"conv, cudnn.benchmark {setting}") * RESNET18_CONV_SHAPES
    return [extra(what) / (summed / share) for share in _probe_shares(setting)]


def whole_forward_probe_accounts_for_most_with_benchmark_off() -> bool:
    """With cudnn.benchmark off, a whole forward's first-call extra is over half of both
    fresh-thread extras and under all of them; the profile's extra CPU time in the convolution
    per replica thread is over half of the forwards' extra host time."""
    per_thread_share, forwards_share = _probe_shares("off")
    in_conv = forwards_share / per_thread_share  # per-thread conv extra over forwards' extra
    return all(0.5 < s < 1 for s in _forward_probe_shares("off")) and in_conv > 0.5


def whole_forward_probe_under_half_with_benchmark_on() -> bool:
    """With cudnn.benchmark on, a whole forward's first-call extra, timed alone, is under half
    of both fresh-thread extras (so under the profile's per replica thread: each fresh thread
    spent longer in its convolutions than a lone one's whole first forward takes), and under
    conv1's extra summed over the shapes."""
    whole, conv1 = _forward_probe_shares("on"), _probe_shares("on")
    return all(s < 0.5 for s in whole) and all(w < c for w, c in zip(whole, conv1))


def whole_forward_pays_more_than_the_probe_sum() -> bool:
    """With cudnn.benchmark off: the conv1 probe summed over the shapes is under half of both
    fresh-thread extras, and a whole ResNet-18 forward's first-call extra in a new thread
    (medians) is above that sum."""
    (workers,) = _each("persistent_workers.json")

    def extra(what: str) -> float:
        probe = workers["first_call"][what]
        first = statistics.median(probe["first_call_in_new_thread_ms"])
        return first - statistics.median(probe["second_call_same_thread_ms"])

    (whole,) = [w for w in workers["first_call"] if re.fullmatch(r"resnet18 forward.* off", w)]
    summed = extra("conv, cudnn.benchmark off") * RESNET18_CONV_SHAPES
    return all(s < 0.5 for s in _probe_shares("off")) and extra(whole) > summed


def probes_ran_on_256_rows_against_a_128_row_share() -> bool:
    """The whole-forward probes' keys name 256 rows (conv1's probe runs on as many:
    experiments/worker_probes.py), and the profiled step's batch over its 4 GPUs is 128 rows."""
    (workers,) = _each("persistent_workers.json")
    keys = [w for w in workers["first_call"] if w.startswith("resnet18 forward")]
    rows = {re.search(r"(\d+) rows", k).group(1) for k in keys}
    batch = int(re.search(r"batch (\d+)", workers["profile"]["workload"]).group(1))
    gpus = workers["hardware"]["device_count"]
    return len(keys) == 2 and rows == {"256"} and gpus == 4 and batch // gpus == 128


def _caller_against_persistent(workload: str) -> str:
    """The control's verdict, cudnn.benchmark off: every forward in the caller's thread
    against one persistent thread per GPU, by the middle halves of their steps."""
    runs = _workers()
    caller, kept = (runs[workload, False, r] for r in ("caller thread", "persistent threads"))
    return compare(caller, kept, "middle")


def caller_thread_slower_on_resnet() -> bool:
    return _caller_against_persistent("resnet18") == "slower"


def caller_thread_faster_on_mlp() -> bool:
    return _caller_against_persistent("mlp") == "faster"


def control_ran_where_the_forward_is_launch_bound() -> bool:
    """persistent_workers.json ran on the benchmark's largest GPU count, where its
    learn_parallel forward bar on cuda:0 holds GPU work of under half of it (medians of the
    timeline's steps)."""
    (workers,) = _each("persistent_workers.json")
    recorded, group = _recorded(), "conv-cudnn-benchmark-off"
    most = max(r["devices"] for r in recorded.bench_results(group))

    def share(n: int) -> float:
        timeline = recorded.bench_timeline(group, "learn_parallel", n)
        bars = [r for r in timeline.records if r.device == "cuda:0" and r.phase == "forward"]
        work = statistics.median(r.gpu_ms for r in bars)
        return work / statistics.median(r.duration_ms for r in bars)

    return workers["hardware"]["device_count"] == most and share(most) < 0.5


def matmul_first_call_above_its_repeat() -> bool:
    """The probe's matmul: its first call in a new thread above its repeat (medians), and below
    the performance chapter's threshold (first > 2 * again + 0.5)."""
    (workers,) = _each("persistent_workers.json")
    probe = workers["first_call"]["matmul 2048 x 2048"]
    first = statistics.median(probe["first_call_in_new_thread_ms"])
    again = statistics.median(probe["second_call_same_thread_ms"])
    return again < first <= 2 * again + 0.5


def benchmark_searches_fit_the_synchronizations() -> bool:
    """cudnn.benchmark on, the fresh-thread step's extra synchronizations against one search per
    shape and replica thread, each timing 10 plans (benchmark_limit's default): 10 event waits
    and 1 + 10 device synchronizations per search; its cudaMalloc and cudaFree calls, none in
    the persistent step."""
    (workers,) = _each("persistent_workers.json")
    rows = {r["name"]: r for r in workers["profile"]["diff"]["cudnn.benchmark on"]}
    more = {name: r["count"] - r["count_other"] for name, r in rows.items()}
    searches = RESNET18_CONV_SHAPES * workers["hardware"]["device_count"]
    allocator = [rows[name] for name in ("cudaMalloc", "cudaFree")]
    return (
        more["cudaEventSynchronize"] == 10 * searches
        and more["cudaDeviceSynchronize"] == (1 + 10) * searches
        and all(r["count"] > 0 and r["count_other"] == 0 for r in allocator)
    )


def frees_come_to_about_one_per_search_and_gpu() -> bool:
    """cudnn.benchmark on: the fresh-thread step's extra cudaFree calls over the searches (one
    per shape and replica thread) times the GPUs each search empties lie within 0.9-1.2."""
    (workers,) = _each("persistent_workers.json")
    rows = {r["name"]: r for r in workers["profile"]["diff"]["cudnn.benchmark on"]}
    frees = rows["cudaFree"]["count"] - rows["cudaFree"]["count_other"]
    gpus = workers["hardware"]["device_count"]
    return 0.9 <= frees / (RESNET18_CONV_SHAPES * gpus * gpus) <= 1.2


def benchmark_extra_is_the_operators_own_work() -> bool:
    """cudnn.benchmark on: the fresh threads' extra cudaFree, cudaMalloc and synchronizations
    took under a tenth of the convolution's extra CPU time, and so did all the operator calls
    (CPU minus self); its extra self time per replica thread is over half the forwards' extra."""
    (workers,) = _each("persistent_workers.json")
    rows = {r["name"]: r for r in workers["profile"]["diff"]["cudnn.benchmark on"]}
    named = ("cudaFree", "cudaMalloc", "cudaDeviceSynchronize", "cudaEventSynchronize")
    spent = sum(rows[n]["extra_cpu_us"] for n in named)
    fresh, kept = _convolution_rows(workers, "on")
    extra = fresh["cpu_us"] - kept["cpu_us"]
    inner = (fresh["cpu_us"] - fresh["self_cpu_us"]) - (kept["cpu_us"] - kept["self_cpu_us"])
    own, forwards = _fresh_extras(workers, "on", "self_cpu_us")
    return spent < extra / 10 and 0 <= inner < extra / 10 and own > forwards / 2


def convolution_own_time_holds_nearly_all_with_benchmark_off() -> bool:
    """cudnn.benchmark off: the fresh threads' extra self CPU time in aten::cudnn_convolution,
    per replica thread, is over 90% of the forwards' extra host time (and not above it); conv1's
    probe summed over the shapes is under half of it, a whole forward's over half, under all."""
    (workers,) = _each("persistent_workers.json")
    per_thread, forwards = _fresh_extras(workers, "off", "self_cpu_us")
    return (
        0.9 < per_thread / forwards <= 1
        and _probe_shares("off")[1] < 0.5
        and 0.5 < _forward_probe_shares("off")[1] < 1
    )


def _on_against_off(runner: str) -> tuple[float, str]:
    """ResNet-18, one runner: its median step with cudnn.benchmark on over its median step
    with it off, and the verdict on their middle halves."""
    runs = _workers()
    off, on = (runs["resnet18", b, runner] for b in (False, True))
    return statistics.median(on) / statistics.median(off), compare(on, off, "middle")


def new_persistent_threads_stepped_longer_with_the_setting_on() -> bool:
    """ResNet-18, cudnn.benchmark on against off: the persistent threads' median step 1.45x
    (to two decimals), middle halves apart; the caller's thread's 1.11x, slower too, by less.
    The caller's setting-off run came before its setting-on run (the runs' order), on the same
    workload, so it could find the setting-off plans."""
    (workers,) = _each("persistent_workers.json")
    order = [(r["workload"], r["cudnn_benchmark"], r["runner"]) for r in workers["runs"]]
    caller = [
        r for r in workers["runs"] if (r["workload"], r["runner"]) == ("resnet18", "caller thread")
    ]
    kept, kept_says = _on_against_off("persistent threads")
    calls, calls_says = _on_against_off("caller thread")
    return (
        round(kept, 2) == 1.45
        and kept_says == "slower"
        and round(calls, 2) == 1.11
        and calls_says == "slower"
        and calls < kept
        and order.index(("resnet18", False, "caller thread"))
        < order.index(("resnet18", True, "caller thread"))
        and len({r["describe"] for r in caller}) == 1
    )


def searched_plans_took_about_the_same_gpu_time() -> bool:
    """The profile's persistent steps: aten::cudnn_convolution as many calls, and its GPU time
    with cudnn.benchmark on within 5% of its GPU time with it off."""
    (workers,) = _each("persistent_workers.json")
    on, off = (_convolution_rows(workers, setting)[1] for setting in ("on", "off"))
    return on["count"] == off["count"] and abs(on["gpu_us"] - off["gpu_us"]) <= 0.05 * off["gpu_us"]
