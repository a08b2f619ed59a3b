#!/usr/bin/env bash
# Records every GPU result the book shows, from one commit, on one multi-GPU host:
#   COMMIT=<sha> PARTS="..." bash book/data/record_gpu_runs.sh OUTDIR
# Each run writes OUTDIR/<machine>/, named after the GPUs this process sees (h100-x4, or
# h100-x2 under CUDA_VISIBLE_DEVICES=0,1), in the layout of learn_parallel/lab/recorded/
# (copy its files there), and logs to OUTDIR/logs/<machine>/ (not shipped). Every JSON is
# stamped (learn_parallel.lab.provenance): the commit (COMMIT where it is set, else git's
# HEAD where this is the package's own checkout), the date, the machine as its hardware names itself,
# the versions, the hashes of the files it measured, and the parts of this script that ran
# meanwhile on the host (OUTDIR/run-log.jsonl: runs of the script side by side on disjoint
# GPUs share OUTDIR). Every part uses all the GPUs it sees. Parts (PARTS, default "tests"),
# each independent of the others' failures:
#   tests        pytest -m gpu, then the README's tests, tests/book/test_readme.py (its first
#                example runs on the GPU)
#   floors       copy and NCCL bandwidths, matmul and conv throughput, bytes and FLOPs counted
#   measure      every chapter's per-device measurement, twice (chapters.json, -repeat)
#   chain        the chain benchmark          bench    one device, both DataParallels, DDP
#   ladder       rung by rung up to DDP       clone    the two replicate strategies
#   ddp          our DDP beside torch's       workers  fresh vs persistent worker threads
#   timeline     recorded spans vs steps      recorder what recording a step costs
#   gatherprobe  torch's gather on odd outputs
#   torchrun     our DDP beside torch's under torchrun, one process per GPU, at 1, 2, 4 ... all
#                of the visible GPUs (learn_parallel.ladder.train; torchrun.json)
#   host_time    host time of one DataParallel forward, ids parsed per forward (log only)
#   trace        Perfetto traces of two ResNet-18 steps (learn_parallel, torch's DataParallel)
#   profilertax  steps timed after a profiler ran vs in a clean process (book/data/README.md)
#   notebooks    every chapter executed unchanged, JOBS at a time (needs nbclient, ipykernel)
# LADDER_ARGS, TORCHRUN_ARGS and PROFILERTAX_ARGS add options to those parts (--no-gpu-work,
# --counts 4 --repeats 2 ...). PACK=NAME.tgz packs OUTDIR into OUTDIR/NAME.tgz after every part,
# once the files that part ships are in OUTDIR/<machine>/ (bench.json copied and
# chapters-repeat.json moved there from the logs, the traces gzipped there): one file to
# fetch, and the parts that finished kept when a command is cut off; lanes that share OUTDIR
# each take their own NAME.
# book/data/README.md says which runs made the shipped recordings, and how to record again.
set -uo pipefail
out=${1:?usage: record_gpu_runs.sh OUTDIR}
parts=" ${PARTS:-tests} "
# NVLink multicast off for every program this starts (learn_parallel.lab.processes.NCCL_ENV).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 LEARN_PARALLEL_COMMIT=${COMMIT:-}
ngpu=$(python -c "import torch; print(torch.cuda.device_count())")
devices=${DEVICES:-$(python -c "n = $ngpu; print(','.join(str(k) for k in (1, 2, 4, 8, 16) if k < n) + f',{n}')")}
# The folder: the GPU's model and count, h100-x4 for "NVIDIA H100 80GB HBM3" (the chapters
# find each file in whichever folder holds it).
machine=$(python -c "import torch; w = torch.cuda.get_device_name(0).split(); print(f'{(w[1] if w[0] == \"NVIDIA\" and len(w) > 1 else w[-1]).lower()}-x$ngpu')")
mkdir -p "$out/$machine" "$out/logs/$machine"
rec=$(cd "$out/$machine" && pwd) logs=$(cd "$out/logs/$machine" && pwd)
export LEARN_PARALLEL_RUN_LOG=$(cd "$out" && pwd)/run-log.jsonl
{ nvidia-smi; nvidia-smi topo -m; } > "$logs/nvidia-smi.txt" 2>&1  # topo: how the GPUs are linked
python -c "import torch; print(torch.__version__, torch.version.cuda)" > "$logs/versions.txt"
has() { [[ $parts == *" $1 "* ]]; }
mark() {  # one line of the run log: this part's start or end, its GPUs
  printf '{"id": "%s", "part": "%s", "event": "%s", "gpus": "%s", "time": %s}\n' "$1" "$2" "$3" \
    "${CUDA_VISIBLE_DEVICES:-all}" "$(date +%s.%N)" >> "$LEARN_PARALLEL_RUN_LOG"
}
pack() {  # OUT packed into OUT/$PACK where PACK is set: what ran survives a cut-off command
  [[ -n ${PACK:-} ]] || return 0
  local packed
  packed=$(mktemp) && tar czf "$packed" -C "$out" --exclude='*.tgz' . 2>/dev/null
  mv -f "$packed" "$out/$PACK"
}
run() {  # one part: logged, bounded by a timeout, its start and end in the run log, then packed
  local name=$1 limit=$2 id="$1@$(hostname)-$$-$SECONDS" status; shift 2; echo "== $name"
  mark "$id" "$name" start
  # -k 30: a part that outlives the timeout's TERM is killed 30 s later; --line-buffered: the
  # log shows a part's lines as it prints them, not when it ends
  LEARN_PARALLEL_PART=$id timeout -k 30 "$limit" "$@" 2>&1 | grep --line-buffered -v '^USDT' \
    | tee "$logs/$name.log" | tail -"${TAIL:-25}"
  status=$?
  mark "$id" "$name" end
  pack
  return $status
}

has tests && run gpu-tests 400 python -m pytest -m gpu -q -rs -s -p no:cacheprovider tests/
has tests && run readme 120 python -m pytest -q -p no:cacheprovider tests/book/test_readme.py
has floors && run floors 150 python -m experiments.floors --out "$rec"
has measure && run measure 400 python -m experiments.measure --out "$rec"
has measure && run measure-repeat 400 python -m experiments.measure --out "$logs/repeat" \
  && mv "$logs/repeat/chapters.json" "$rec/chapters-repeat.json" && pack  # again, with it
has chain && run chain 300 python -m experiments.chain_bench --out "$rec"
has bench && run bench 560 python -m experiments.bench --devices "$devices" --no-progress \
  --out "$logs/bench" && cp "$logs/bench/bench.json" "$rec/" && pack  # again, with it
has ladder && run ladder 560 python -m experiments.ladder --set ladder --devices "$ngpu" --out "$rec" \
  ${LADDER_ARGS:-}
has clone && run clone 240 python -m experiments.ladder --set clone --devices "$ngpu" --out "$rec"
has ddp && run ddp 200 python -m experiments.ddp_timeline --out "$rec" --world "$ngpu" --steps 30 --timeout 150
has workers && run workers 240 python -m experiments.persistent_workers --out "$rec" --devices "$ngpu"
has timeline && run timeline 150 python -m experiments.timeline_check --out "$rec" --devices "$ngpu"
has recorder && run recorder 150 python -m experiments.recorder_cost --out "$rec" --devices "$ngpu"
has gatherprobe && run gatherprobe 60 python -m experiments.gather_probe --out "$rec"
has torchrun && run torchrun 560 python -m experiments.torchrun_times --out "$rec" ${TORCHRUN_ARGS:-}
has host_time && run host_time 200 python -m experiments.host_time --json
if has trace; then
  run trace 200 python -m experiments.bench --devices "$ngpu" --workloads conv --cudnn-benchmark off \
    --implementations learn_parallel,torch_dp --warmup 3 --steps 5 --timeline-steps 0 \
    --no-gpu-work --no-plots --no-progress --out "$logs/trace" --trace "$logs/trace/trace.json"
  for f in "$logs"/trace/trace-*.json; do [[ -f $f ]] && gzip -c "$f" > "$rec/$(basename "$f").gz"; done
  pack  # again, with the gzipped traces
fi
has profilertax && run profilertax 400 python -m experiments.profiler_tax --out "$rec" --devices "$ngpu" \
  ${PROFILERTAX_ARGS:-}
if has notebooks; then
  # Each chapter, unchanged, in its own kernel, JOBS at a time; what each printed about its
  # devices goes to notebooks.log (CHAPTERS="a.ipynb b.ipynb" picks some).
  mkdir -p "$logs/notebooks"
  (cd book && ls ${CHAPTERS:-*.ipynb} | timeout 540 xargs -P "${JOBS:-1}" -I{} sh -c \
    'python data/run_chapter.py {} "$0" > "$0/{}.log" 2>&1' "$logs/notebooks")
  cat "$logs"/notebooks/*.log > "$logs/notebooks.log"
  grep 'ipynb:' "$logs/notebooks.log"
  echo "$(grep -c ': ok (' "$logs/notebooks.log") of $(cd book && ls ${CHAPTERS:-*.ipynb} | wc -l) chapters ok"
fi
exit 0
