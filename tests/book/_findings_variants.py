"""The findings of the variants' chapters (tuple_parallel, options, libtorch_replicate),
checked against their recordings: chapters.json, chain_bench.json, clone.json; and the line
ranges libtorch_replicate and the glossary cite in torch's C++ headers, checked against the
copies the torch 2.13.0 wheel installs.

`_claims_variants.CLAIMS` ties each sentence to one of these; the readers they share are in
`_recorded_findings`.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
import torch
from _book import BOOK
from _recorded_findings import _each, _recorded

from learn_parallel.lab.spread import compare


def ladder_host_near_step_on_four_gpus_only() -> bool:
    """Every rung with a host time, but the two whole-step graphs, has it within a tenth of its
    step (the median of its rounds) on 4 GPUs, and below that on 2 GPUs."""
    shares: dict[int, list[float]] = {}
    for ladder in _each("ladder.json"):
        for row in ladder["rows"]:
            if "host_ms" in row and row["rung"] not in ("step_graphs", "one_thread_reference"):
                step = statistics.median(row["repeats"])
                shares.setdefault(row["devices"], []).append(row["host_ms"] / step)
    return (
        sorted(shares) == [2, 4]
        and all(s >= 0.9 for s in shares[4])
        and all(s < 0.9 for s in shares[2])
    )


def clone_costs_more_host_time() -> bool:
    found = [ms for clone in _each("clone.json") for ms in clone["replicate_host_ms"].values()]
    return bool(found) and all(ms["clone"] > ms["broadcast"] for ms in found)


def clone_step_slower() -> bool:
    """In every clone set, clone's step is slower than broadcast's by the ladder's verdict."""
    from learn_parallel.lab.bridges import verdict

    found = 0
    for clone in _each("clone.json"):
        rows = {(r["workload"], r["rung"]): r for r in clone["rows"]}
        for kind in clone["workloads"]:
            found += 1
            if verdict(rows[kind, "clone"], rows[kind, "broadcast"]) != "slower":
                return False
    return found > 0


def clone_step_not_all_host_time() -> bool:
    """In every clone set and workload, clone's extra step time is more than its extra host
    time of the step: some of it comes after the step returned."""
    found = 0
    for clone in _each("clone.json"):
        rows = {(r["workload"], r["rung"]): r for r in clone["rows"]}
        for kind in clone["workloads"]:
            found += 1
            slow, fast = rows[kind, "clone"], rows[kind, "broadcast"]
            if slow["step_ms"] - fast["step_ms"] <= slow["host_ms"] - fast["host_ms"]:
                return False
    return found > 0


def scattered_chain_faster_and_same() -> bool:
    chain = _recorded().chain_bench
    results = chain["results"] if chain else []
    return bool(results) and all(
        compare(r["scattered_steps_ms"], r["regathered_steps_ms"], "middle") == "faster"
        and r["max_abs_output_difference"] == 0.0
        for r in results
    )


def tuple_parallel_ties() -> bool:
    """A tie at one, two and four devices (round medians' ranges, `compare`), in the run and
    in its repeat."""
    recorded = _recorded()
    for runs in (recorded.measurements, recorded.repeat):
        run = runs.get("tuple_vs_data_parallel")
        if run is None or not run.repeats:
            return False
        pairs = zip(run.repeats["TupleParallel"], run.repeats["DataParallel"])
        verdicts = dict(zip(run.x, (compare(tp, dp) for tp, dp in pairs)))
        if verdicts != {"1": "tie", "2": "tie", "4": "tie"}:
            return False
    return True


_DP = "torch/csrc/api/include/torch/nn/parallel/data_parallel.h"
_CLONE = "torch/csrc/api/include/torch/nn/cloneable.h"
# Each header range the chapters cite: a piece of its first line, pieces found inside it, and
# a piece of its last line, at the line numbers of torch's sources.
HEADER_LINES: dict[tuple[str, int, int], tuple[str, tuple[str, ...], str]] = {
    (_DP, 27, 56): ("// Note [Replicating Modules]", ("load_params()",), "not even ddp."),
    (_DP, 36, 38): ("ReduceAdd can ONLY be used", ("Forward",), "history at all"),
    (_DP, 60, 97): ("struct ReduceAdd", ("// TODO: use nccl reduce",), "};"),
    (_DP, 67, 69): ("TORCH_CHECK(", ("compute_requires_grad(inputs)",), "ReduceAdd can only"),
    (_DP, 104, 139): ("template", ("set_history(replicas[i]->parameters_",), "}"),
    (_DP, 109, 116): ("for (auto& parameter", ("set_history(replicas[i]->parameters_",), "}"),
    (_DP, 118, 119): ("for (auto& buffer", (), "if (buffer.value().requires_grad())"),
    (_DP, 147, 161): ("template", ("module->clone(device)", "return replicas;"), "}"),
    (_DP, 184, 187): ("/// 2. If a list of devices", ("current default device",), "device."),
    (_DP, 188, 237): ("template", ("at::parallel_for(", "return outputs;"), "}"),
    (_DP, 223, 234): ("} catch (...) {", ("current_exception()", "rethrow_exception"), "}"),
    (_DP, 251, 292): ("template", ("Tensor data_parallel(",), "}"),
    (_DP, 258, 270): ("if (!devices) {", ("device_count()", "output_device = devices"), "}"),
    (_DP, 272, 276): ("if (devices->size() == 1) {", ("module->to(",), "}"),
    (_DP, 278, 285): ("autograd::Scatter scatter(", ("devices->resize(",), "}"),
    (_DP, 289, 291): ("autograd::Gather(*output_device, dim)", ("fmap<",), ".front();"),
    (_CLONE, 34, 78): ("clone(", ("NoGradGuard", "copy->reset();", "set_data(data)"), "}"),
    (_CLONE, 74, 76): ("for (const auto& child : children_)", ("clone_(",), "}"),
    (_CLONE, 81, 91): ("void clone_(Module& other", ("other.clone(device)",), "}"),
    ("aten/src/ATen/ParallelOpenMP.h", 16, 52): ("template", ("#pragma omp parallel",), "}"),
    ("aten/src/ATen/ParallelOpenMP.h", 40, 41): ("ThreadIdGuard tid_guard(tid)", (), "f(begin_tid"),
    ("aten/src/ATen/Parallel-inl.h", 22, 31): ("numiter", ("in_parallel_region()",), "}"),
    ("aten/src/ATen/Parallel-inl.h", 33, 37): ("invoke_parallel(", ("ParallelGuard guard",), "});"),
    ("aten/src/ATen/cuda/detail/DeviceThreadHandles.h", 1, 14): (
        "// Some stateful GPU libraries",
        ("handle pool",),
        "efficient with DataParallel.",
    ),
}
GUARD = "#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)"  # the build's line


def cited_header_lines_hold(chapter: str) -> bool:
    """Every header range ``chapter`` cites at v2.13.0 holds what `HEADER_LINES` says, in
    the torch wheel's copy, where the build's `GUARD` line on top sits each line one lower."""
    if not torch.__version__.startswith("2.13.0"):
        pytest.skip(f"the citations are of torch 2.13.0, this is {torch.__version__}")
    cells = json.loads((BOOK / f"{chapter}.ipynb").read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    cited = re.findall(r"blob/v2\.13\.0/([\w/.-]+\.h)#L(\d+)-L(\d+)", text)
    include = Path(torch.__file__).parent / "include"
    for path, first, last in cited:
        start, end = int(first), int(last)
        if (path, start, end) not in HEADER_LINES:
            return False
        lines = (include / path.removeprefix("aten/src/")).read_text().splitlines()
        span = lines[start : end + 1]  # source line n is line n + 1 of the wheel's copy
        head, inside, tail = HEADER_LINES[path, start, end]
        if lines[0] != GUARD or head not in span[0] or tail not in span[-1]:
            return False
        if not all(piece in "\n".join(span) for piece in inside):
            return False
    return bool(cited)
