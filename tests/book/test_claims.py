"""Every measured number or verdict in the chapters' prose is tied to its recording.

A chapter prints what it measured from a cell that reads the recording (or its live run).
Where the prose itself must carry a number or a verdict about a recording, the sentence is
registered in `CLAIMS` with a function that checks it against the recording, so a new
recording that disagrees fails here instead of leaving the sentence wrong.

``test_no_unregistered_measured_number`` reads every Markdown cell (solutions excepted)
and finds each time (ms, µs, s), ratio (1.9x), percentage and memory amount; each must sit
inside a registered claim, or in `NOT_MEASURED` (a setting or a size, with the reason).
Verdicts ("faster", "a tie") come from `learn_parallel.lab.spread.compare` over
interleaved repeats, in the cells or in the claims' checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import _recorded_findings as findings
import pytest
from _book import BOOK


@dataclass(frozen=True)
class Claim:
    chapter: str
    text: str  # a verbatim piece of the chapter's Markdown
    holds: Callable[[], bool]  # checks the text against the recording it speaks of
    recording: str  # which recording, for the reader of this file


def _recorded():
    from learn_parallel.lab.measure import load_recorded

    return load_recorded()  # the machine the chapters read


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


BENCH = "bench.json of the chapters' machine"
WORKERS = "persistent_workers.json"
CLAIMS: list[Claim] = [
    # -- intro, devices, source_device, scatter, replicate, gather, glossary
    # -- parallel_apply, data_parallel, distributed, tuple_parallel, options, pitfalls
    # -- performance, ladder, libtorch_replicate, teaching
    Claim(
        "performance",
        "**DDP is faster than both DataParallels** at every GPU count above one, on both "
        "workloads,\n  and its step keeps shrinking as GPUs are added, while neither "
        "DataParallel's step shrinks\n  beyond two GPUs (both grow on ResNet-18; on the MLP "
        "torch's grows and learn_parallel's is a\n  tie with its two-GPU step)",
        findings.ddp_beats_both_and_keeps_scaling,
        BENCH,
    ),
    Claim(
        "performance",
        "From two GPUs to four, DDP's step shrank and neither\n  DataParallel's did (\"itself on "
        "2\": both grew on ResNet-18; on the MLP torch's grew and\n  learn_parallel's was a tie)",
        findings.ddp_beats_both_and_keeps_scaling,
        BENCH,
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
        "except torch's DataParallel, slower than one GPU on\n  ResNet-18 at every count and a "
        "tie with it on the MLP at four GPUs:",
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
        "devices",
        "five rounds a\nrung, the number a verdict needs) finds every rung's median step slower "
        "after a profiler than\nin a clean process, but only one of the eleven by more than the "
        "rounds' spread",
        findings.profiler_tax_slows_every_rung,
        "profiler_tax.json",
    ),
    Claim(
        "devices",
        "one found every rung's median slower too\nbut only two beyond the rounds' spread, and the "
        "other six medians slower and five faster, one\nbeyond the spread",
        findings.profiler_tax_earlier_runs,
        "book/data/logs/earlier/profiler_tax-*.json",
    ),
    Claim(
        "devices",
        "a cost that every rung's median showed in two runs of\nthree, from under a hundredth "
        "to about a tenth of a step, uneven between rungs, and beyond\nthe spread of five "
        "rounds in one rung of eleven",
        findings.profiler_tax_up_to_a_tenth_in_two_runs_of_three,
        "profiler_tax.json; book/data/logs/earlier/profiler_tax-*.json",
    ),
    Claim(
        "devices",
        "this cell, unchanged, ran without an error on four H200 GPUs",
        findings.devices_chapter_ran_on_four_gpus,
        "book/data/logs/checks-after-recording/notebooks-4gpu.log",
    ),
    Claim(
        "devices",
        "disagree on the fastest GPU and on the\nslowest: cuda:0, the GPU the loop times first, "
        "is the fastest in the first run and the slowest\nin the second",
        findings.matmul_runs_disagree_on_the_fastest_and_the_slowest_gpu,
        "chapters.json and chapters-repeat.json: matmul",
    ),
    Claim(
        "intro",
        "the two runs order the GPUs differently (the GPU slowest in one run is not the slowest "
        "in the\nother)",
        findings.replica_forward_runs_disagree_on_the_slowest_gpu,
        "chapters.json and chapters-repeat.json: replica_forward",
    ),
    Claim(
        "scatter",
        "Each bar is more than twice its floor",
        findings.scatter_copies_above_twice_their_floor,
        "chapters.json and chapters-repeat.json: scatter_copy; floors.json",
    ),
    Claim(
        "source_device",
        "the second run, printed below, is within a tenth of the first at every\nsize",
        findings.source_check_repeat_within_a_tenth,
        "chapters.json and chapters-repeat.json: source_check",
    ),
    Claim(
        "intro",
        "every\nchapter ran on a host with one of its H200 GPUs visible "
        "(`CUDA_VISIBLE_DEVICES=0`): 17 of 17\nexecuted",
        findings.one_gpu_run_executed_every_chapter,
        "book/data/logs/earlier/notebooks-1gpu-fd11fe4.log",
    ),
    Claim(
        "performance",
        "On ResNet-18 the caller's thread was slower than the persistent threads",
        findings.caller_thread_slower_on_resnet,
        WORKERS,
    ),
    Claim(
        "performance",
        "That many GPUs is the benchmark's\nlargest count, where the benchmark's forward bar is "
        "mostly waiting",
        findings.control_ran_where_the_forward_is_launch_bound,
        WORKERS + " and " + BENCH + ": its learn_parallel timelines",
    ),
    Claim(
        "performance",
        "more than its repeat, below the threshold",
        findings.matmul_first_call_above_its_repeat,
        WORKERS + ": first_call",
    ),
    Claim(
        "performance",
        "its synchronizations fit\n  the trials (the cell below counts them against the "
        "searches), and its `cudaFree` and\n  `cudaMalloc` calls, of which the persistent step "
        "makes none",
        findings.benchmark_searches_fit_the_synchronizations,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "each new thread\n  searches again for every forward convolution shape, timing up to\n"
        "  `torch.backends.cudnn.benchmark_limit` candidate plans (10 by default)",
        findings.benchmark_searches_fit_the_synchronizations,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "A fresh thread per replica made every workload's step slower than persistent threads",
        findings.fresh_threads_cost_most_on_resnet_with_benchmark,
        WORKERS,
    ),
    Claim(
        "performance",
        "the setting whose first calls in a new thread\ncost the most (the convolution's and the "
        "whole forward's lines). With it off, the convolution's\nfirst call still costs more "
        "than later ones, below the threshold, while a whole forward's first\ncall, which meets "
        "every convolution shape, is above it",
        findings.fresh_threads_cost_most_on_resnet_with_benchmark,
        WORKERS + ": runs and first_call",
    ),
    Claim(
        "performance",
        "the same convolution\ncalls, with the same GPU time when `cudnn.benchmark` is off, "
        "cost many times the host time\nwhen they are made from fresh threads",
        findings.fresh_threads_pay_host_time_in_the_convolution,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "with it off (this bullet's runs), a whole forward's first call in a new\n  thread, "
        "timed alone, accounts for more than half of the new threads' extra host time but not\n"
        "  all, the profile finds most of that time inside the convolution calls",
        findings.whole_forward_probe_accounts_for_most_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "`cudnn.benchmark` on, each new thread searches again for every shape's plan, as often "
        "as the\n  profile below counts",
        findings.benchmark_searches_fit_the_synchronizations,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "With `cudnn.benchmark` on, the probe's cost times the shapes is of the order of the "
        "fresh\nthreads' extra time (below it)",
        findings.probe_accounts_for_under_half_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "With it off, the same sum\naccounts for less than half of that extra time",
        findings.probe_accounts_for_under_half_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "and the whole forward's first call for more\nthan half of it but not all: a thread alone "
        "pays most of the cost in its first forward, and\nthe profile finds it inside the "
        "convolution calls",
        findings.whole_forward_probe_accounts_for_most_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "The\nwhole forward, timed alone in one new thread, costs less than half of either extra "
        "and less\nthan `conv1`'s sum: `conv1` costs more than the average shape, and the fresh "
        "threads, searching\nat the same time, spent longer per thread in their convolutions "
        "than a lone thread's whole\nfirst forward takes",
        findings.whole_forward_probe_under_half_with_benchmark_on,
        WORKERS + ": first_call, profile and runs",
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
        "ladder",
        "the performance chapter's one-shape probe, summed over the model's\nshapes, accounts "
        "for less than half of the new threads' extra host time; a whole ResNet-18\nforward, "
        "probed the same way, pays more than that sum in its first call in a new thread",
        findings.whole_forward_pays_more_than_the_probe_sum,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "ladder",
        "by the performance chapter's probe less than half of the cost with `cudnn.benchmark` off",
        findings.whole_forward_pays_more_than_the_probe_sum,
        WORKERS + ": first_call, profile and runs",
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
        "replicate",
        "on the recording's GPUs the lines above show\n`broadcast_coalesced` no faster than the "
        "copies one after another",
        findings.broadcast_coalesced_no_faster_than_copies,
        "floors.json: replicate_copies",
    ),
    Claim(
        "replicate",
        "The broadcast's floor is a third of the copies'",
        findings.broadcast_coalesced_is_two_nccl_calls,
        "floors.json: replicate_copies, collectives",
    ),
    Claim(
        "replicate",
        "NCCL itself takes about twice the floor to\nbroadcast one flat buffer of these bytes, and "
        "a broadcast of 1 KiB, next to nothing to move,\ntakes about a third as long as that",
        findings.broadcast_coalesced_is_two_nccl_calls,
        "floors.json: replicate_copies, collectives",
    ),
    Claim(
        "replicate",
        "times for one flat buffer per chunk (the line that says so) come to most of what\n"
        "`broadcast_coalesced` took",
        findings.broadcast_coalesced_is_two_nccl_calls,
        "floors.json: replicate_copies, collectives",
    ),
    Claim(
        "replicate",
        "At these sizes the cost every call pays, whatever it\nmoves, is a large part of an NCCL "
        "call's time (the 1 KiB broadcast takes over a third as long\nas the larger chunk's and "
        "over half as long as the smaller's), and the bars lie far nearer the\ntwo calls' time "
        "than the link floor",
        findings.nccl_calls_set_the_replicate_bars,
        "chapters.json: replicate_copy; floors.json: collectives",
    ),
    Claim(
        "distributed",
        "On both workloads the difference printed is more\nthan two gradient copies, not one",
        findings.ddp_peak_gap_is_more_than_two_gradient_copies,
        "distributed.json",
    ),
    Claim(
        "options",
        "keeping the feature map scattered was the faster chain at every device\n"
        "count, and gave the same outputs",
        findings.scattered_chain_faster_and_same,
        "chain_bench.json",
    ),
    Claim(
        "options",
        "that\ntrip can cost almost as much as the whole step without it",
        # The regathered chain's extra time is 75-100 % of the scattered chain's step.
        lambda: (
            bool(_recorded().chain_bench)
            and all(
                0.75 <= r["regathered_median_ms"] / r["scattered_median_ms"] - 1 < 1
                for r in _recorded().chain_bench["results"]
            )
        ),
        "chain_bench.json",
    ),
    Claim(
        "glossary",
        "With `benchmark` on, a search for every\nconvolution shape in every new thread, each "
        "search followed by torch emptying its cache of CUDA\nmemory, fits the extra time it "
        "measures for torch's DataParallel",
        # The performance chapter's probe x shapes, over the fresh threads' extra time.
        lambda: all(0.5 < s < 2 for s in findings._probe_shares("on")),
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "glossary",
        "that chapter's one-shape probe, summed over ResNet-18's convolution shapes, accounts\n"
        "for less than half of the new threads' extra host time",
        lambda: all(s < 0.5 for s in findings._probe_shares("off")),
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "tuple_parallel",
        "TupleParallel's step is a tie with DataParallel's at one, two and four\ndevices (the "
        "ranges of their round medians overlap), in the measurement run again right after\n"
        "(`chapters-repeat.json`) too",
        findings.tuple_parallel_ties,
        "chapters.json and chapters-repeat.json: tuple_vs_data_parallel",
    ),
    Claim(
        "distributed",
        "On four GPUs under torchrun the aim is missed, by the ratio printed",
        findings.torchrun_misses_the_aim_on_four_gpus,
        "torchrun.json",
    ),
    Claim(
        "libtorch_replicate",
        "costs more host time per step than\n  filling shallow copies",
        findings.clone_costs_more_host_time,
        "clone.json: replicate_host_ms",
    ),
    Claim(
        "ladder",
        "the all-reduce starts when the last device's backward graph ends",
        lambda: _step_graphs_all_reduce_is_after_backward(),
        "ladder.json of every recorded machine: step_graphs' timelines",
    ),
    Claim(
        "libtorch_replicate",
        "In the recording, clone's step is the slower one (the table's verdicts)",
        findings.clone_step_slower,
        "clone.json: the rows' rounds",
    ),
]

# Numbers in prose that were not measured: settings, sizes, shapes (chapter, text, why).
NOT_MEASURED: list[tuple[str, str, str]] = [
    ("distributed", "25 MiB", "DDP's default bucket_cap_mb, a setting"),
    ("distributed", "1 MiB", "the bucket size the chapter chooses, a setting"),
    ("distributed", "0.3 MiB", "the bucket cap the live run passes, a setting"),
    ("ladder", "25 MiB", "the bucket cap the rungs use, a setting"),
    ("performance", "10 MiB", "torch.cuda.comm's buffer_size for coalesced calls, a setting"),
    ("scatter", "16 MiB", "the size of the batch the measurement scatters (4096 x 1024 floats)"),
    ("tuple_parallel", "8 MiB", "the size of the batch the cell builds"),
    ("tuple_parallel", "4 MiB", "the size of the scatter chapter's slice (1024 x 1024 floats)"),
    ("teaching", "60 s", "the grader's default --timeout per cell, a setting"),
    ("teaching", "600 s", "the grader's default --notebook-timeout, a setting"),
    ("teaching", "4 GiB", "the grader's default --memory and its /tmp size, settings"),
    ("parallel_apply", "5 ms", "Python's default switch interval, a setting"),
    ("pitfalls", "<map object at 0x...>", "an address in the text torch's gather returns"),
    ("glossary", "<map object at 0x...>", "an address in the text torch's gather returns"),
]

MEASURED = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:ms|µs|us|s|%|x|×|MiB|MB|GiB|GB|GB/s|TB/s)(?![\w/])"
)
SHAPE = re.compile(r"\d+\s?x\s?\d")  # 512 x 1024: a shape, not a ratio


def _markdown(chapter: str) -> str:
    cells = json.loads((BOOK / f"{chapter}.ipynb").read_text())["cells"]
    return "\n\n".join(
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "markdown" and "<summary>Solution" not in "".join(c["source"])
    )


CHAPTERS = sorted(p.stem for p in BOOK.glob("*.ipynb"))


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.chapter}: {c.text[:40]}")
def test_each_claim_is_in_its_chapter_and_true_of_its_recording(claim):
    assert claim.text in _markdown(claim.chapter), f"{claim.chapter} no longer says it"
    assert claim.holds(), f"{claim.chapter}: the recording ({claim.recording}) disagrees"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_unregistered_measured_number(chapter):
    text = _markdown(chapter)
    covered = [c.text for c in CLAIMS if c.chapter == chapter]
    covered += [t for ch, t, _ in NOT_MEASURED if ch == chapter]
    loose = []
    for match in MEASURED.finditer(text):
        if SHAPE.match(text, match.start()):
            continue
        around = text[max(0, match.start() - 200) : match.end() + 200]
        if not any(c in around and match.group(0) in c for c in covered):
            loose.append(match.group(0))
    assert not loose, (
        f"{chapter}: numbers typed into the prose without a recording behind them: {loose}. "
        "Print them from the recording in a cell, or register the sentence in CLAIMS."
    )


def test_the_scanner_finds_typed_measurements_and_skips_shapes():
    found = [m.group(0) for m in MEASURED.finditer("took 24.99 ms, 1.9x DDP, 7 % and 671 MiB")]
    assert found == ["24.99 ms", "1.9x", "7 %", "671 MiB"]
    assert SHAPE.match("512 x 1024") and not SHAPE.match("1.9x")


def test_the_ladder_chapter_numbers_its_rungs_as_the_ladder_orders_them():
    # Every "rung N" of the prose names, close by, the rung that is N-th in LADDER.
    from learn_parallel.lab.ladder_rungs import LADDER

    text = _markdown("ladder")
    numbered = list(re.finditer(r"\b[Rr]ung (\d+)\b", text))
    assert numbered, "the ladder chapter numbers no rung any more: drop this test"
    for found in numbered:
        name = LADDER[int(found[1]) - 1].name
        around = text[max(0, found.start() - 80) : found.end() + 80]
        assert name in around or name.replace("_", " ") in around, (found[0], around)
