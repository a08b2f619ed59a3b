"""The claims on the pieces' chapters, intro to distributed (intro, devices, source_device,
scatter, replicate, distributed, and performance's profiler tax, whose checks read the same
recordings), each with its check in `_findings_pieces`.
"""

from __future__ import annotations

import _findings_pieces as findings
from _claim import Claim

CLAIMS: list[Claim] = [
    Claim(
        "performance",
        "five rounds a\nrung, the number a verdict needs) finds every rung's median step slower "
        "after a profiler than\nin a clean process, but only one of the eleven by more than the "
        "rounds' spread",
        findings.profiler_tax_slows_every_rung,
        "profiler_tax.json",
    ),
    Claim(
        "performance",
        "host-clock step times of the ladder's rungs on the benchmark's MLP,\non two GPUs of "
        "the 4-GPU host",
        findings.profiler_tax_ran_on_the_benchmarks_mlp,
        "profiler_tax.json",
    ),
    Claim(
        "performance",
        "Of two earlier\nruns on the same MLP, kept as logs",
        findings.profiler_tax_ran_on_the_benchmarks_mlp,
        "book/data/logs/earlier/profiler_tax-*.json",
    ),
    Claim(
        "performance",
        "one found every rung's median slower too\nbut only two beyond the rounds' spread, and the "
        "other six medians slower and five faster, one\nbeyond the spread",
        findings.profiler_tax_earlier_runs,
        "book/data/logs/earlier/profiler_tax-*.json",
    ),
    Claim(
        "performance",
        "a cost that every rung's median showed in two runs of\nthree, from under a hundredth "
        "to about a tenth of a step, uneven between rungs, and beyond\nthe spread of five "
        "rounds in one rung of eleven",
        findings.profiler_tax_up_to_a_tenth_in_two_runs_of_three,
        "profiler_tax.json; book/data/logs/earlier/profiler_tax-*.json",
    ),
    Claim(
        "devices",
        "the first cell, unchanged, ran without an error on four H200 GPUs",
        findings.devices_chapter_ran_on_four_gpus,
        "book/data/logs/checks-after-recording/notebooks-4gpu.log",
    ),
    Claim(
        "devices",
        "Both ran without an error on two H200 GPUs with the chapters\nof `6f652e5`",
        findings.devices_chapter_ran_on_two_gpus,
        "book/data/logs/checks-2026-11-29/2gpu-6f652e5/",
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
        "every chapter ran on a machine with one H200 GPU (torch 2.11): 17 of 17\nexecuted",
        findings.one_gpu_run_executed_every_chapter,
        "book/data/logs/checks-2026-11-29/1gpu-6d94f9a/",
    ),
    Claim(
        "replicate",
        "`broadcast_coalesced` took longer than the copies one after another, for these bytes: "
        "each of\nits samples took longer than every one of theirs (the two ranges above do not "
        "overlap), so the\nspread rule calls it slower",
        findings.broadcast_coalesced_slower_than_copies,
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
        "NCCL itself\ntakes about twice the floor to broadcast one flat buffer of these bytes, and "
        "a broadcast of\n1 KiB, next to nothing to move, takes about a third as long as that",
        findings.broadcast_coalesced_is_two_nccl_calls,
        "floors.json: replicate_copies, collectives",
    ),
    Claim(
        "replicate",
        "times for one flat buffer per chunk (the\nline that says so) come to most of what "
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
        "replicate",
        "in NCCL 2.28.9 (the version `floors.json` names on the same\nhost)",
        findings.replicate_bars_ran_with_nccl_2_28_9,
        "floors.json: collectives; chapters.json",
    ),
    Claim(
        "replicate",
        "The recorded bars ran torch 2.11.0 (the version `chapters.json` names), so this section "
        "links\ntorch's source at that version.",
        findings.chapter_bars_ran_torch_2_11_0,
        "chapters.json",
    ),
    Claim(
        "gather",
        "The recording ran torch 2.11.0 (the version\n`chapters.json` names), so the link to the "
        "copy it made is to that version's source.",
        findings.chapter_bars_ran_torch_2_11_0,
        "chapters.json",
    ),
    Claim(
        "distributed",
        "on both\nworkloads the difference printed is more than two.",
        findings.ddp_peak_gap_is_more_than_two_gradient_copies,
        "distributed.json",
    ),
    Claim(
        "distributed",
        "in the recording below, `cuda:1`'s loss and optimizer bars hold none of\nthat GPU's work",
        findings.dp_second_gpu_loss_and_optimizer_hold_no_work,
        "distributed.json",
    ),
    Claim(
        "distributed",
        "On four GPUs under torchrun the aim is missed, by the ratio printed",
        findings.torchrun_misses_the_aim_on_four_gpus,
        "torchrun.json",
    ),
]
