#!/usr/bin/env bash
# Records every GPU result the book shows, in one run on a multi-GPU machine:
#   bash book/data/record_gpu_runs.sh OUTDIR [DEVICES]      e.g. OUTDIR 1,2,4
# GPU tests, each chapter's per-device measurement (experiments/measure.py, run twice:
# chapters.json and chapters-repeat.json), the chain benchmark (scattered vs
# gather-then-rescatter) and the main benchmark (learn_parallel vs torch.nn.DataParallel vs
# DDP), and with PARTS including "notebooks", every chapter executed on the GPUs (needs
# nbclient and ipykernel). PARTS picks some of them (default: "tests measure chain bench");
# more parts: "workers" (fresh vs persistent worker threads), "timeline" (recorded spans vs
# measured steps), "gatherprobe" (torch's gather on odd outputs), "trace" (Perfetto traces
# of 2 steps), "ddp" (our DDP vs torch's), "host_time" (host time of one forward; BEFORE=DIR
# also times an older checkout), "clone" (the two replicate strategies) and "ladder" (single
# process vs DDP, rung by rung), the last four on 2 GPUs. Each part keeps going if another
# fails.
#
# Run it from the repository root: the drivers are python -m experiments.<name> (experiments/).
# OUTDIR/<machine>/ (machine e.g. h200-x4, or $MACHINE) comes out in the layout of
# learn_parallel/lab/recorded/<machine>/, the package data the chapters read: copy that
# folder there. The benchmark's plots and the executed notebooks go to
# OUTDIR/<machine>-extras/ (not shipped); everything is also in OUTDIR/results.tgz.
set -uo pipefail
out=${1:?usage: record_gpu_runs.sh OUTDIR [DEVICES]}
devices=${2:-1,2,4}
parts=" ${PARTS:-tests measure chain bench} "
# NVLink multicast off for every program this starts (learn_parallel.lab.processes.NCCL_ENV says why).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
machine=${MACHINE:-$(python -c "import torch; print(torch.cuda.get_device_name(0).split()[-1].lower() + f'-x{torch.cuda.device_count()}')")}
rec="$out/$machine"
extras="$out/$machine-extras"
mkdir -p "$rec" "$extras"
work="$extras"  # the evidence and bridge parts write here; their JSON is copied into the package
nvidia-smi > "$rec/nvidia-smi.txt" 2>&1
python -c "import torch; print(torch.__version__, torch.version.cuda)" > "$rec/versions.txt"

if [[ $parts == *" tests "* ]]; then
  # On one GPU this runs the tests marked one_gpu and skips those that need two. The README's
  # first example (tests/book/test_readme.py) runs on the real GPU too.
  timeout 300 python -m pytest -m gpu -q -rs -p no:cacheprovider tests/ 2>&1 | tee "$rec/gpu-tests.log" | tail -25
  timeout 120 python -m pytest -q -p no:cacheprovider tests/book/test_readme.py 2>&1 | tee -a "$rec/gpu-tests.log" | tail -3
fi
if [[ $parts == *" measure "* ]]; then
  timeout 300 python -m experiments.measure --out "$rec" 2>&1 | tee "$extras/measure.log" | tail -15
  # A second run right after the first: how much host-side timings move between runs.
  timeout 300 python -m experiments.measure --out "$extras/repeat" 2>&1 | tail -3 \
    && mv "$extras/repeat/chapters.json" "$rec/chapters-repeat.json"
fi
if [[ $parts == *" chain "* ]]; then
  timeout 240 python -m experiments.chain_bench --out "$extras/chain" 2>&1 | tee "$rec/chain.log" | tail -15
  cp "$extras/chain/chain_bench.json" "$rec/" 2>/dev/null
fi
if [[ $parts == *" bench "* ]]; then
  timeout 420 python -m experiments.bench --devices "$devices" --no-progress \
    --out "$extras/bench" 2>&1 | tee "$rec/bench.log" | tail -40
  cp "$extras/bench/bench.json" "$rec/" 2>/dev/null
fi
if [[ $parts == *" workers "* ]]; then
  # Why persistent workers win: fresh vs persistent threads, cudnn.benchmark off/on, a profile.
  timeout 200 python -m experiments.persistent_workers --out "$work/workers" --devices 2 \
    2>&1 | grep -v '^USDT' | tee "$work/workers.log" | tail -40
fi
if [[ $parts == *" timeline "* ]]; then
  # Recorded step spans vs measured step times, with and without syncs between recorded
  # steps, and the event/host clock alignment; what recording costs (Recorder vs
  # torch.profiler, experiments/recorder_cost.py); then the GPU test that checks the spans.
  timeout 150 python -m experiments.timeline_check --out "$work/timeline" --devices 2 \
    2>&1 | tee "$work/timeline.log" | tail -40
  timeout 150 python -m experiments.recorder_cost --out "$work/timeline" --devices 2 2>&1 \
    | grep -v "^USDT" | tee "$work/recorder_cost.log" | tail -30
  timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_gpu_timeline.py 2>&1 \
    | tee "$work/timeline-tests.log" | tail -15
fi
if [[ $parts == *" gatherprobe "* ]]; then
  # The real torch.nn.parallel.gather on strings, ints, a dataclass, a (str, tensor) tuple.
  timeout 60 python -m experiments.gather_probe --out "$work/gather_probe" 2>&1 \
    | tee "$work/gather_probe.log" | tail -20
fi
if [[ $parts == *" trace "* ]]; then
  # Chrome/Perfetto traces of two ResNet-18 steps on 2 GPUs: learn_parallel and torch's DP.
  timeout 200 python -m experiments.bench --devices 2 --workloads conv --cudnn-benchmark off \
    --implementations learn_parallel,torch_dp --warmup 3 --steps 5 --timeline-steps 0 \
    --no-plots --no-progress --out "$work/trace" --trace "$work/trace/trace.json" 2>&1 \
    | grep -v '^USDT' | tee "$work/trace.log" | tail -15
  gzip -f "$work"/trace/trace-*.json 2>/dev/null  # ui.perfetto.dev opens .json.gz as well
fi
if [[ $parts == *" ddp "* ]]; then
  # learn_parallel.DistributedDataParallel vs torch's DDP vs learn_parallel.DataParallel on
  # 2 GPUs (ResNet-18 and the MLP), with per-rank timelines; plus its GPU tests.
  mkdir -p "$work/ddp"
  timeout 90 python -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_gpu_distributed.py 2>&1 \
    | tee "$work/ddp-gpu-tests.log" | tail -15
  timeout 150 python -m experiments.ddp_timeline --out "$work/ddp" --world 2 --steps 30 \
    --timeout 120 2>&1 | tee "$work/ddp.log" | tail -25
fi
if [[ $parts == *" host_time "* ]]; then
  # Host time of one DataParallel forward (ResNet-18 when torchvision imports, batch 512,
  # every visible GPU) for this tree and, with BEFORE=DIR (a checkout of an older commit),
  # for that one too, alternated three times: OUTDIR/host_time/{after,before}-N.json.
  mkdir -p "$work/host_time"
  for round in 1 2 3; do
    timeout 120 python -m experiments.host_time --json \
      > "$work/host_time/after-$round.json" 2>> "$work/host_time.log"
    if [[ -n ${BEFORE:-} ]]; then
      mkdir -p "$BEFORE/experiments" && cp experiments/host_time.py "$BEFORE/experiments/"
      (cd "$BEFORE" && timeout 120 python -m experiments.host_time --json) \
        > "$work/host_time/before-$round.json" 2>> "$work/host_time.log"
    fi
  done
  grep -h '"host_ms_median"\|"package"\|"to_device' "$work"/host_time/*.json | tee -a "$work/host_time.log"
fi
if [[ $parts == *" clone "* ]]; then
  # Both replicate strategies (broadcast, libtorch's clone) on 2 GPUs: clone/clone.json.
  timeout 240 python -m experiments.ladder --set clone --devices 2 \
    --out "$work/clone" 2>&1 | tee "$work/clone.log" | tail -20
fi
if [[ $parts == *" ladder "* ]]; then
  # torch DP -> ... -> FastDataParallel rungs -> DDP on 2 GPUs: ladder/ladder.json.
  timeout 240 python -m experiments.ladder --set ladder --devices 2 \
    --out "$work/ladder" 2>&1 | tee "$work/ladder.log" | tail -25
fi
if [[ $parts == *" notebooks "* ]]; then
  # Each chapter, unchanged, executed on this machine's GPUs, JOBS chapters at a time (each
  # in its own kernel; default 1; CHAPTERS="a.ipynb b.ipynb" picks some); the executed copies are kept.
  mkdir -p "$extras/notebooks/logs"
  cat > "$extras/notebooks/run_one.py" <<'PY'
import sys, time, nbformat
from pathlib import Path
from nbclient import NotebookClient

def said(nb, words):
    """The printed lines of the executed chapter that contain one of ``words``."""
    lines = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            lines += [f"    {line}" for line in text.splitlines() if any(w in line for w in words)]
    return lines

path, out = Path(sys.argv[1]), Path(sys.argv[2])
nb = nbformat.read(path, as_version=4)
start = time.perf_counter()
failed = False
try:
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    status = "ok"
except Exception as error:  # report the chapter, then fail
    status, failed = f"FAILED: {type(error).__name__}: {str(error)[-600:]}", True
nbformat.write(nb, out / path.name)
print(f"{path.name}: {status} ({time.perf_counter() - start:.1f} s)", flush=True)
# What ran live and what came from a recording: the plan's lines, the cells that say so.
for line in said(nb, ["devices:", "Simulated devices", "GPUs:", "baselines", "recorded",
                      "showing the recorded run", "ranks"]):
    print(line[:160], flush=True)
sys.exit(1 if failed else 0)
PY
  (cd book && ls ${CHAPTERS:-*.ipynb} | timeout 480 xargs -P "${JOBS:-1}" -I{} sh -c \
    'python "$0/run_one.py" {} "$0" > "$0/logs/{}.log" 2>&1' "$extras/notebooks")
  cat "$extras"/notebooks/logs/*.log | tee "$extras/notebooks.log" | grep 'ipynb:'
  echo "$(grep -c ': ok (' "$extras/notebooks.log") of $(grep -c '^[a-z_]*.ipynb: ' "$extras/notebooks.log") chapters ok"
fi
tar czf "$out/results.tgz" -C "$out" "$machine" "$machine-extras"
