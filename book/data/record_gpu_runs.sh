#!/usr/bin/env bash
# Records every GPU result the book shows, in one run on a multi-GPU machine:
#   bash book/data/record_gpu_runs.sh OUTDIR [DEVICES]      e.g. OUTDIR 1,2,4
# GPU tests, each chapter's per-device measurement (learn_parallel.lab.measure, run twice:
# chapters.json and chapters-repeat.json), the chain benchmark (scattered vs
# gather-then-rescatter) and the main benchmark (learn_parallel vs torch.nn.DataParallel vs
# DDP), and with PARTS including "notebooks", every chapter executed on the GPUs (needs
# nbclient and ipykernel). PARTS picks some of them (default: "tests measure chain bench");
# each part keeps going if another fails.
#
# OUTDIR/<machine>/ (machine e.g. h200-x4, or $MACHINE) comes out in the layout of
# learn_parallel/lab/recorded/<machine>/, the package data the chapters read: copy that
# folder there. The benchmark's plots and the executed notebooks go to
# OUTDIR/<machine>-extras/ (not shipped); everything is also in OUTDIR/results.tgz.
set -uo pipefail
out=${1:?usage: record_gpu_runs.sh OUTDIR [DEVICES]}
devices=${2:-1,2,4}
parts=" ${PARTS:-tests measure chain bench} "
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
machine=${MACHINE:-$(python -c "import torch; print(torch.cuda.get_device_name(0).split()[-1].lower() + f'-x{torch.cuda.device_count()}')")}
rec="$out/$machine"
extras="$out/$machine-extras"
mkdir -p "$rec" "$extras"
nvidia-smi > "$rec/nvidia-smi.txt" 2>&1
python -c "import torch; print(torch.__version__, torch.version.cuda)" > "$rec/versions.txt"

if [[ $parts == *" tests "* ]]; then
  timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/ 2>&1 | tee "$rec/gpu-tests.log" | tail -25
fi
if [[ $parts == *" measure "* ]]; then
  timeout 300 python -m learn_parallel.lab.measure --out "$rec" 2>&1 | tee "$extras/measure.log" | tail -15
  # A second run right after the first: how much host-side timings move between runs.
  timeout 300 python -m learn_parallel.lab.measure --out "$extras/repeat" 2>&1 | tail -3 \
    && mv "$extras/repeat/chapters.json" "$rec/chapters-repeat.json"
fi
if [[ $parts == *" chain "* ]]; then
  timeout 240 python -m learn_parallel.lab.chain_bench --out "$extras/chain" 2>&1 | tee "$rec/chain.log" | tail -15
  cp "$extras/chain/chain_bench.json" "$rec/" 2>/dev/null
fi
if [[ $parts == *" bench "* ]]; then
  timeout 420 python -m learn_parallel bench --devices "$devices" --no-progress \
    --out "$extras/bench" 2>&1 | tee "$rec/bench.log" | tail -40
  cp "$extras/bench/bench.json" "$rec/" 2>/dev/null
fi
if [[ $parts == *" notebooks "* ]]; then
  # Each chapter, unchanged, executed on this machine's GPUs; the executed copies are kept.
  mkdir -p "$extras/notebooks"
  (cd book && timeout 480 python - "$extras/notebooks" <<'PY'
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
  ) 2>&1 | tee "$extras/notebooks.log" | tail -20
fi
tar czf "$out/results.tgz" -C "$out" "$machine" "$machine-extras"
