"""``python -m experiments.bench`` end to end, on simulated devices and gloo DDP processes.

What these prove: the command runs to the end and writes bench.json, the plots and a
table in which every implementation has a row for every device count (torch's
DataParallel runs on simulated devices too; DDP's processes really start); the plots and
the table name the devices that ran; what cannot run is refused in one line before
anything runs; ``--help`` explains every option; and ``python -m learn_parallel bench``
says where the benchmark went. No test here asserts any speed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import bench as cli
from experiments import benchmark as bench
from experiments.bench_report import UNLIKE, summary_table
from learn_parallel.lab import provenance
from learn_parallel.lab.timeline import PHASES, Timeline

ROOT = Path(__file__).resolve().parents[2]
TOO_MANY = (
    "argument --devices: 9 devices asked for, but there are only 4 simulated devices; "
    "set LEARN_PARALLEL_SIMULATED_DEVICES=9 to simulate more"
)


def _run(*argv: str, gpus: bool = False, **env: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    if "LEARN_PARALLEL_SIMULATED_DEVICES" not in env:
        environment.pop("LEARN_PARALLEL_SIMULATED_DEVICES", None)
    if not gpus:
        environment["CUDA_VISIBLE_DEVICES"] = ""  # simulated devices, even on a GPU machine
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _bench(out: Path, *options: str, gpus: bool = False) -> tuple[dict, str]:
    done = _run(
        "experiments.bench", "--quick", "--no-progress", "--out", str(out), *options, gpus=gpus
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "bench.json").read_text()), done.stdout


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("bench")
    report, stdout = _bench(out)
    return out, report, stdout


def test_report_has_metadata(quick_run):
    _, report, _ = quick_run
    meta = report["meta"]
    assert report["schema"] == bench.SCHEMA
    assert meta["command"].startswith("python -m experiments.bench --quick")
    assert meta["hardware"]["label"] == "2 simulated CPU devices"  # the most that ran
    assert report["commit"] is None or len(report["commit"]) == 40  # provenance.stamp
    name = "learn_parallel/scatter_gather.py"
    assert report["measured"][name] == provenance.file_hashes([name])[name]
    assert report["measured"]["experiments/benchmark.py"] != "missing"
    assert report["command"] == meta["command"]
    assert meta["torch_version"] and meta["date"]
    assert meta["settings"]["devices"] == [1, 2]


def test_every_implementation_and_device_count_has_a_row(quick_run):
    _, report, _ = quick_run
    assert [g["key"] for g in report["groups"]] == ["mlp", "conv"]
    for group in report["groups"]:
        rows = {
            (r["implementation"], r["devices"]): r
            for r in report["results"]
            if r["group"] == group["key"]
        }
        assert set(rows) == {
            ("single", 1),
            *(
                (impl, n)
                for impl in ("learn_parallel", "torch_dp", "replicated", "ddp")
                for n in (1, 2)
            ),
        }
        for row in rows.values():
            assert row["status"] == "ok", row
            assert row["step_ms"] > 0 and row["samples_per_s"] > 0
            assert len(row["step_ms_all"]) == report["meta"]["settings"]["steps"]
        assert rows["ddp", 2]["note"] == "2 process(es), gloo, one CPU process per device"


def test_learn_parallel_timelines_cover_every_device(quick_run):
    _, report, _ = quick_run
    recorded = {(t["group"], t["implementation"], t["devices"]) for t in report["timelines"]}
    for group in ("mlp", "conv"):
        assert {(group, "learn_parallel", 1), (group, "learn_parallel", 2)} <= recorded
    wide = next(t for t in report["timelines"] if t["devices"] == 2)
    timeline = Timeline.from_dict(wide["timeline"])
    assert timeline.devices() == ["sim:0", "sim:1"]
    for device in timeline.devices():
        # every phase the recorder knows, backward's parts included, on every device
        assert {r.phase for r in timeline.records if r.device == device} == set(PHASES)


def test_plots_and_table_are_written_and_name_what_ran(quick_run):
    out, report, stdout = quick_run
    for group in ("mlp", "conv"):
        for kind in ("scaling", "step-time", "timeline", "phases"):
            name = f"{group}-{kind}.png"
            assert name in report["plots"]
            assert (out / name).stat().st_size > 1000
    assert "samples/s" in stdout and "n/a" not in stdout
    assert "CPU timings: one thread per simulated device" in stdout


def _table_rows(stdout: str) -> dict[tuple[str, int, str], list[str]]:
    """The printed table's rows: (workload line, devices, implementation) -> its columns."""
    rows, heading = {}, None
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] in bench.IMPLEMENTATIONS and heading:
            rows[heading, int(words[1]), words[0]] = words[2:]
        elif line.startswith(("MLP", "small CNN")):
            heading = line
    return rows


def test_every_row_says_where_it_ran_and_unlike_rows_get_no_ratio(quick_run):
    """DDP has no simulated devices: its processes ran on the plain CPU, so it is no row of
    the simulated table's kind, and no ratio is printed between it and the others."""
    _, report, stdout = quick_run
    assert {(r["implementation"], r["ran_on"]) for r in report["results"]} == {
        *((impl, "sim") for impl in ("single", "learn_parallel", "torch_dp", "replicated")),
        ("ddp", "cpu"),
    }
    rows = _table_rows(stdout)
    # Each workload's heading names the clock its rows were timed with.
    assert "MLP 4 x 128, batch 64 x 128  (host clock)" in {heading for heading, _, _ in rows}
    assert len(rows) == 2 * 9
    for (_, _, impl), columns in rows.items():
        if impl == "ddp":  # ran on, step ms, samples/s, ÷ torch DP, ÷ DDP
            assert columns[:2] == ["CPU", "process"] and columns[-2:] == [UNLIKE, "1.00"]
        else:
            assert columns[0] == "simulated" and columns[-1] == UNLIKE
            float(columns[-2])  # a ratio to torch's DataParallel, which ran on the same kind
    assert "ran on 'simulated': simulated devices, threads of one process on the CPU (2 " in stdout
    assert "ran on 'CPU process': plain CPU processes, one per device, talking through gloo\n" in (
        stdout
    )
    assert f"{UNLIKE}: the two rows ran on different kinds of device; no ratio." in stdout


def test_the_plots_name_where_each_implementation_ran(quick_run):
    import matplotlib

    matplotlib.use("Agg")
    from learn_parallel.lab import plots

    _, report, _ = quick_run
    rows = [r for r in report["results"] if r["group"] == "mlp"]
    for draw in (plots.plot_scaling, plots.plot_implementations):
        fig = draw(rows, report["meta"]["hardware"]["label"], "MLP")
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "DistributedDataParallel\n(on plain CPU processes, gloo)" in labels, labels
        assert "learn_parallel.DataParallel\n(on simulated devices)" in labels, labels
        title = ax.get_title()
        assert title.endswith(
            "\nDistributedDataParallel ran elsewhere (see the legend): not comparable"
        )
        matplotlib.pyplot.close(fig)
    one_kind = [r for r in rows if r["implementation"] != "ddp"]
    fig = plots.plot_implementations(one_kind, "2 simulated CPU devices", "MLP")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "learn_parallel.DataParallel" in labels and "elsewhere" not in fig.axes[0].get_title()
    matplotlib.pyplot.close(fig)


def test_rows_of_one_kind_get_every_ratio():
    """On GPUs DDP's processes run on the GPUs too: every ratio is printed."""
    group = {"key": "mlp", "title": "MLP"}
    results = [
        {
            "group": "mlp",
            "implementation": impl,
            "devices": 2,
            "status": "ok",
            "ran_on": "cuda",
            "step_ms": ms,
            "samples_per_s": 1.0,
            "note": "",
        }
        for impl, ms in (("learn_parallel", 3.0), ("torch_dp", 4.0), ("ddp", 2.0))
    ]
    meta = {"hardware": {"label": "2 x H200"}, "clock": "host clock, GPUs synchronized"}
    report = {"groups": [group], "results": results, "meta": meta}
    rows = _table_rows(summary_table(report))
    heading = "MLP  (host clock, GPUs synchronized)"
    assert rows[heading, 2, "learn_parallel"][-2:] == ["0.75", "1.50"]
    assert rows[heading, 2, "ddp"][-2:] == ["0.50", "1.00"]
    assert UNLIKE not in summary_table(report)


def test_the_plots_have_room_for_their_rows_and_legend(quick_run):
    """The timeline and phase plots: a two-line title, and a figure tall enough that the
    device rows do not overlap and the legend of every phase fits."""
    import matplotlib

    matplotlib.use("Agg")
    from learn_parallel.lab import plots

    _, report, _ = quick_run
    wide = next(t for t in report["timelines"] if t["devices"] == 2)
    timeline = Timeline.from_dict(wide["timeline"])
    for fig in (
        plots.plot_timeline(timeline, title="one line"),
        plots.plot_phase_breakdown(timeline, title="one line"),
    ):
        ax = fig.axes[0]
        assert ax.get_title().count("\n") == 1
        fig.canvas.draw()
        legend = ax.get_legend().get_window_extent()
        assert legend.y0 >= 0 and legend.y1 <= fig.bbox.height  # inside the figure
        labels = [t.get_window_extent() for t in ax.get_yticklabels()]
        assert labels[0].y0 > labels[1].y1  # the device rows' labels do not overlap
        matplotlib.pyplot.close(fig)


def test_help_says_what_it_does_and_explains_every_option():
    parser = cli.build_parser()
    assert parser.description == cli.DESCRIPTION and cli.DESCRIPTION.count(". ") == 0
    for action in parser._actions:
        assert action.help, action.option_strings
    text = parser.format_help()
    assert "usage: python -m experiments.bench [options]" in text and "`" not in text
    flat = " ".join(text.split())
    for name, what in cli.MEASURED.items():
        assert f"{name} ({what})" in flat
    assert list(cli.MEASURED) == list(bench.IMPLEMENTATIONS)
    assert f"default: all {len(bench.IMPLEMENTATIONS)}" in flat


def _one_error_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    usage, error = err.strip().splitlines()
    assert usage.startswith("usage: python -m experiments.bench")
    return error.removeprefix("python -m experiments.bench: error: ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--devices", "1,2,9"], TOO_MANY),
        (["--devices", "0,2"], "argument --devices: device counts must be 1 or more"),
        (["--workloads", "mlp,gpt"], "argument --workloads: unknown gpt; choose from"),
        (["--implementations", "dp"], "argument --implementations: unknown dp; choose from"),
    ],
)
def test_bad_arguments_get_one_line(capsys, argv, message):
    assert _one_error_line(capsys, argv).startswith(message)


def test_a_bad_device_count_variable_gets_one_line(capsys, monkeypatch):
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", "abc")
    error = _one_error_line(capsys, [])
    assert error.startswith("LEARN_PARALLEL_SIMULATED_DEVICES='abc' is not a positive integer")


def test_resnet18_without_torchvision_is_one_line_naming_the_package(capsys, monkeypatch):
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda name: None if name == "torchvision" else real(name)
    )
    assert _one_error_line(capsys, ["--conv-model", "resnet18"]) == (
        "argument --conv-model: resnet18 needs torchvision, which is not installed "
        "(pip install torchvision, or --conv-model small_cnn)"
    )


def test_the_package_command_says_where_the_benchmark_went():
    done = _run("learn_parallel", "bench", "--devices", "1,2")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "The benchmark runs from a clone of the repository: python -m experiments.bench --help "
        "(it is not part of the installed package)."
    )


@pytest.mark.gpu
def test_quick_bench_on_gpus(tmp_path):
    report, _ = _bench(tmp_path, "--devices", "1,2", "--cudnn-benchmark", "off", gpus=True)
    assert " x " in report["meta"]["hardware"]["label"]
    rows = [r for r in report["results"] if r["devices"] == 2]
    assert {r["implementation"] for r in rows} == {
        "learn_parallel",
        "torch_dp",
        "replicated",
        "ddp",
    }
    assert all(r["status"] == "ok" and r["step_ms"] > 0 for r in rows), rows
    timeline = Timeline.from_dict(report["timelines"][-1]["timeline"])
    assert "host" in timeline.devices() and set(timeline.clocks.values()) == {"host", "cuda-event"}
