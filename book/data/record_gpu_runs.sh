#!/usr/bin/env bash
# Records every GPU result the book shows, in one run on a multi-GPU machine:
#   bash book/data/record_gpu_runs.sh OUTDIR [DEVICES]      e.g. OUTDIR 1,2,4
# GPU tests, the chain benchmark (scattered vs gather-then-rescatter) and the main
# benchmark (learn_parallel vs torch.nn.DataParallel vs DDP). Each part keeps going
# if another fails; logs and results end up in OUTDIR/results.tgz.
set -uo pipefail
out=${1:?usage: record_gpu_runs.sh OUTDIR [DEVICES]}
devices=${2:-1,2,4}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
nvidia-smi > "$work/nvidia-smi.txt" 2>&1
python -c "import torch; print(torch.__version__, torch.version.cuda)" > "$work/versions.txt"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/ 2>&1 | tee "$work/gpu-tests.log" | tail -25
fi
timeout 240 python -m learn_parallel.chain_bench --out "$work/chain" 2>&1 | tee "$work/chain.log" | tail -15
timeout 420 python -m learn_parallel bench --devices "$devices" --no-progress \
  --out "$work/bench" 2>&1 | tee "$work/bench.log" | tail -40
tar czf "$out/results.tgz" -C "$work" .
cp "$work"/*.log "$out/" 2>/dev/null
