#!/usr/bin/env bash
# Records every GPU result the book shows, from one commit, on one multi-GPU host:
#   COMMIT=<sha> PARTS="..." bash book/data/record_gpu_runs.sh OUTDIR
# Each run writes OUTDIR/<machine>/, named after the GPUs this process sees (h200-x4, or
# h200-x2 under CUDA_VISIBLE_DEVICES=0,1), in the layout of learn_parallel/lab/recorded/
# (copy its JSON files there), and logs to OUTDIR/logs/<machine>/ (not shipped). Every JSON
# is stamped (learn_parallel.lab.provenance): COMMIT (default: git's HEAD here), the date,
# the machine as its hardware names itself, the versions, and the hashes of the files it
# measured. Parts (PARTS, default "tests"), each independent of the others' failures:
#   tests        pytest -m gpu, then the README's first example on the GPU
#   floors       copy and NCCL bandwidths, matmul and conv throughput, bytes and FLOPs counted
#   measure      every chapter's per-device measurement, twice (chapters.json, -repeat)
#   chain        the chain benchmark (scattered vs gathered and scattered again)
#   bench        one device, learn_parallel, torch's DataParallel, DDP at DEVICES (1,2,4)
#   ladder       one process rung by rung up to DDP, on every visible GPU
#   clone        the two replicate strategies            ddp      our DDP beside torch's
#   workers      fresh vs persistent worker threads      timeline recorded spans vs steps
#   recorder     what recording a step costs             gatherprobe  torch's gather on odd outputs
#   torchrun     our DDP beside torch's under torchrun, one process per GPU, at 1, 2, 4 ... all
#                of the visible GPUs (learn_parallel.ladder.train; torchrun.json)
#   trace        Perfetto traces of two ResNet-18 steps (learn_parallel, torch's DataParallel)
#   host_time    host time of one DataParallel forward, ids parsed per forward (log only)
#   notebooks    every chapter executed unchanged, JOBS at a time (needs nbclient, ipykernel)
# book/data/README.md says which runs made the shipped recordings.
set -uo pipefail
out=${1:?usage: record_gpu_runs.sh OUTDIR}
parts=" ${PARTS:-tests} "
devices=${DEVICES:-1,2,4}
# NVLink multicast off for every program this starts (learn_parallel.lab.processes.NCCL_ENV).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 LEARN_PARALLEL_COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null)}
machine=$(python -c "import torch; n = torch.cuda.get_device_name(0).split()[-1].lower(); print(f'{n}-x{torch.cuda.device_count()}')")
mkdir -p "$out/$machine" "$out/logs/$machine"
rec=$(cd "$out/$machine" && pwd) logs=$(cd "$out/logs/$machine" && pwd)
{ nvidia-smi; nvidia-smi topo -m; } > "$logs/nvidia-smi.txt" 2>&1  # topo: how the GPUs are linked
python -c "import torch; print(torch.__version__, torch.version.cuda)" > "$logs/versions.txt"
has() { [[ $parts == *" $1 "* ]]; }
run() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" 2>&1 | grep -v '^USDT' | tee "$logs/$name.log" | tail -${TAIL:-25}; }

has tests && run gpu-tests 400 python -m pytest -m gpu -q -rs -p no:cacheprovider tests/
has tests && run readme 120 python -m pytest -q -p no:cacheprovider tests/book/test_readme.py
has floors && run floors 150 python -m experiments.floors --out "$rec"
has measure && run measure 400 python -m experiments.measure --out "$rec"
has measure && run measure-repeat 400 python -m experiments.measure --out "$logs/repeat" \
  && mv "$logs/repeat/chapters.json" "$rec/chapters-repeat.json"
has chain && run chain 300 python -m experiments.chain_bench --out "$rec"
has bench && run bench 560 python -m experiments.bench --devices "$devices" --no-progress \
  --out "$logs/bench" && cp "$logs/bench/bench.json" "$rec/"
has ladder && run ladder 560 python -m experiments.ladder --set ladder \
  --devices "$(python -c 'import torch; print(torch.cuda.device_count())')" --out "$rec"
has clone && run clone 240 python -m experiments.ladder --set clone --devices 2 --out "$rec"
has ddp && run ddp 200 python -m experiments.ddp_timeline --out "$rec" --world 2 --steps 30 --timeout 150
has workers && run workers 240 python -m experiments.persistent_workers --out "$rec" --devices 2
has timeline && run timeline 150 python -m experiments.timeline_check --out "$rec" --devices 2
has recorder && run recorder 150 python -m experiments.recorder_cost --out "$rec" --devices 2
has gatherprobe && run gatherprobe 60 python -m experiments.gather_probe --out "$rec"
has torchrun && run torchrun 560 python -m experiments.torchrun_times --out "$rec"
has host_time && run host_time 200 python -m experiments.host_time --json
if has trace; then
  run trace 200 python -m experiments.bench --devices 2 --workloads conv --cudnn-benchmark off \
    --implementations learn_parallel,torch_dp --warmup 3 --steps 5 --timeline-steps 0 \
    --no-plots --no-progress --out "$logs/trace" --trace "$logs/trace/trace.json"
  for f in "$logs"/trace/trace-*.json; do gzip -c "$f" > "$rec/$(basename "$f").gz"; done
fi
if has notebooks; then
  # Each chapter, unchanged, in its own kernel, JOBS at a time; what each printed about its
  # devices goes to notebooks.log (CHAPTERS="a.ipynb b.ipynb" picks some).
  mkdir -p "$logs/notebooks"
  (cd book && ls ${CHAPTERS:-*.ipynb} | timeout 540 xargs -P "${JOBS:-1}" -I{} sh -c \
    'python data/run_chapter.py {} "$0" > "$0/{}.log" 2>&1' "$logs/notebooks")
  cat "$logs"/notebooks/*.log > "$logs/notebooks.log"
  grep 'ipynb:' "$logs/notebooks.log"
  echo "$(grep -c ': ok (' "$logs/notebooks.log") of $(ls book/${CHAPTERS:-*.ipynb} | wc -l) chapters ok"
fi
tar czf "$out/results.tgz" -C "$out" "$machine" "logs/$machine"
