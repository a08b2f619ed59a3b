#!/usr/bin/env bash
# Records every GPU result the book shows, in one run on a multi-GPU machine:
#   bash book/data/record_gpu_runs.sh OUTDIR [DEVICES]      e.g. OUTDIR 1,2,4
# GPU tests, each chapter's per-device measurement (learn_parallel.lab.measure), the
# chain benchmark (scattered vs gather-then-rescatter) and the main benchmark
# (learn_parallel vs torch.nn.DataParallel vs DDP), and with PARTS including
# "notebooks", every chapter executed on the GPUs (needs nbclient and ipykernel); "clone"
# (the two replicate strategies) and "ladder" (single process vs DDP, rung by rung) on 2 GPUs.
# PARTS picks some of them (default: "tests measure chain bench"). Each part keeps going if another fails;
# logs and results end up in OUTDIR/results.tgz.
set -uo pipefail
out=${1:?usage: record_gpu_runs.sh OUTDIR [DEVICES]}
devices=${2:-1,2,4}
parts=" ${PARTS:-tests measure chain bench} "
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
nvidia-smi > "$work/nvidia-smi.txt" 2>&1
python -c "import torch; print(torch.__version__, torch.version.cuda)" > "$work/versions.txt"

if [[ $parts == *" tests "* ]]; then
  timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/ 2>&1 | tee "$work/gpu-tests.log" | tail -25
fi
if [[ $parts == *" measure "* ]]; then
  timeout 300 python -m learn_parallel.lab.measure --out "$work" 2>&1 | tee "$work/measure.log" | tail -15
fi
if [[ $parts == *" chain "* ]]; then
  timeout 240 python -m learn_parallel.lab.chain_bench --out "$work/chain" 2>&1 | tee "$work/chain.log" | tail -15
fi
if [[ $parts == *" bench "* ]]; then
  timeout 420 python -m learn_parallel bench --devices "$devices" --no-progress \
    --out "$work/bench" 2>&1 | tee "$work/bench.log" | tail -40
fi
if [[ $parts == *" clone "* ]]; then
  # Both replicate strategies (broadcast, libtorch's clone) on 2 GPUs: clone/clone.json.
  timeout 240 python -m learn_parallel.lab.ladder --set clone --devices 2 \
    --out "$work/clone" 2>&1 | tee "$work/clone.log" | tail -20
fi
if [[ $parts == *" ladder "* ]]; then
  # torch DP -> ... -> FastDataParallel rungs -> DDP on 2 GPUs: ladder/ladder.json.
  timeout 240 python -m learn_parallel.lab.ladder --set ladder --devices 2 \
    --out "$work/ladder" 2>&1 | tee "$work/ladder.log" | tail -25
fi
if [[ $parts == *" notebooks "* ]]; then
  # Each chapter, unchanged, executed on this machine's GPUs; the executed copies are kept.
  mkdir -p "$work/notebooks"
  (cd book && timeout 480 python - "$work/notebooks" <<'PY'
import sys, time, nbformat
from pathlib import Path
from nbclient import NotebookClient
failed = 0
for path in sorted(Path(".").glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3").execute()
        status = "ok"
    except Exception as error:  # report every chapter, then fail at the end
        status, failed = f"FAILED: {type(error).__name__}: {str(error)[-600:]}", failed + 1
    nbformat.write(nb, Path(sys.argv[1]) / path.name)
    print(f"{path.name}: {status} ({time.perf_counter() - start:.1f} s)", flush=True)
sys.exit(1 if failed else 0)
PY
  ) 2>&1 | tee "$work/notebooks.log" | tail -20
fi
tar czf "$out/results.tgz" -C "$work" .
cp "$work"/*.log "$out/" 2>/dev/null
