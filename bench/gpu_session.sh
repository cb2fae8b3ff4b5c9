#!/usr/bin/env bash
# What a GPU session measures, in parts that each fit one 10-minute call of a lent GPU machine
# (deploy/make-gpu-bundle.sh first, here; the checkout with .gpu-bundle/ travels there):
#
#   bench/gpu_session.sh check DIR      builds shoal-worker, runs bench/gpu_check.py, then seed
#                                       004's table on CUDA stages (bench/gpu_pipeline_seed.py,
#                                       cut after SHOAL_PIPELINE_S seconds, 200 by default)
#   bench/gpu_session.sh gpu-check DIR  bench/gpu_check.py alone
#   bench/gpu_session.sh cuda-sync DIR  --cuda-sync events, phases and step, 16 workers, twice
#   bench/gpu_session.sh sweep-a DIR    the study's grid beside PyTorch (as users run it and at
#                                       its best), through the one harness
#                                       (bench/hogwild_vs_pytorch.py --device cuda), spawn
#   bench/gpu_session.sh sweep-b DIR    the grid, forkserver
#   bench/gpu_session.sh sweep-c DIR    the grid, fork (private weights: shared is impossible)
#   bench/gpu_session.sh user-model DIR issue 59's first call: the cuda-sync (events, phases,
#                                       step), model-file and command checks of gpu_check.py,
#                                       then a user's resnet50 on CUDA beside PyTorch's eager
#                                       Hogwild through the harness (bench/user_model_vs_pytorch.py
#                                       --device cuda); each stage held to its own time
#                                       (SHOAL_CHECK_S, SHOAL_BENCH_S) so that the part always
#                                       ends, packed, inside one call
#   bench/gpu_session.sh finish DIR     what the 2026-11-24 session left, in one call: every
#                                       gpu_check.py check (TF32 off), one CUDA pipeline with
#                                       PyTorch's default TF32 (the loss it moves), then sweep-c
#                                       with each PyTorch point held to SHOAL_POINT_TIMEOUT_S
#                                       (45 s: a fork point hung twice); 5 min 20 s on an H100
#                                       on 2026-11-26, the worker's build included
#
# On an H100 (2026-11-24) check took 5 min 12 s with the build; the sweeps then (one shoal sweep
# and one PyTorch side) 5 min each. Through the harness a grid runs three sides a point, each run
# on a shoald of its own, so a part now runs 3 worker counts (1, 4, 16; not yet timed on a GPU),
# each PyTorch or Shoal run held to SHOAL_POINT_TIMEOUT_S and the whole to SHOAL_BENCH_S; what ran
# is in raw.jsonl as it ends, and summary.md is written at the end (or, if cut short, by running
# the same command again there: it resumes the plan). Each part writes DIR/PART/ and packs it
# into DIR/PART.tgz (one file to bring back: the device tool returns at most 8); each prints
# what it measured.
set -uo pipefail
part=${1:?part: check, gpu-check, cuda-sync, sweep-a, sweep-b, sweep-c, user-model or finish}
out=$(realpath -m "${2:?a directory for the results}/$part")  # before the cd below
cd "$(dirname "$0")/.."
mkdir -p "$out"
q=$(printf %q "$out")  # $out inside the command lines the node's shell reads
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' \
  >>"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

# Runs a command line under deploy/gpu-node.sh (the worker built once, then incrementally), and
# keeps the daemon's log as $2.
# A part's status is its first failing command's.
node() {
  deploy/gpu-node.sh bash -c "$1"' ; rc=$?; cp "$SHOAL_DIR/shoald.log" '"$q/$2"'; exit $rc'
  local rc=$?
  [ $status -ne 0 ] || status=$rc
}

# The grid beside PyTorch for the start methods and sharing given, through the one harness.
grid() {
  node "timeout ${SHOAL_BENCH_S:-540} python3 bench/hogwild_vs_pytorch.py --device cuda \
    --dataset synthetic --start $1 --share $2 --workers ${SHOAL_GRID_WORKERS:-1,4,16} \
    --batches 200 --repeats 1 --run-timeout ${SHOAL_POINT_TIMEOUT_S:-120} \
    --bin \$SHOAL_BIN_DIR --worker-bin \$SHOAL_WORKER_PATH --out $q/sweep" \
    shoald-sweep.log > >(tee "$out/sweep.log") 2>&1
}

# The Shoal experiments of a sweep's JSON, one line each.
summary() {
  python3 - "$1" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().strip().splitlines()
if not lines:
    sys.exit(f"{sys.argv[1]}: no sweep (its log says why)")
for e in json.loads(lines[-1])["experiments"]:
    s, r = e["spec"], e.get("result") or {}
    print(f"cuda_sync {s['cuda_sync']:6} share {s['share']!s:5} {s['workers']} workers: "
          f"{e['state']} {r.get('samples_per_sec') or 0:.0f} samples/s, "
          f"GPU util {r.get('gpu_util_mean_percent') or 0:.0f}%")
EOF
}

# bench/gpu_check.py with the arguments given. TF32 off: it compares CUDA pipelines' losses with
# the CPU's to 1e-3; with PyTorch's default (cuDNN convolutions in TF32) a 2-stage AmoebaNet's
# first loss was 0.6% off.
gpu_check() {
  NVIDIA_TF32_OVERRIDE=0 node "python3 bench/gpu_check.py $*" shoald-check.log \
    > >(tee "$out/gpu_check.log") 2>&1
}

case $part in
  user-model)
    NVIDIA_TF32_OVERRIDE=0 node "timeout ${SHOAL_CHECK_S:-240} python3 bench/gpu_check.py \
      --only cuda-sync,model-file,command" shoald-check.log > >(tee "$out/gpu_check.log") 2>&1
    node "timeout ${SHOAL_BENCH_S:-300} python3 bench/user_model_vs_pytorch.py --device cuda \
      --model resnet50 --input 3,224,224 --start spawn --workers 1,2 --share yes,no \
      --batch-size 32 --batches 60 --repeats 1 --run-timeout ${SHOAL_POINT_TIMEOUT_S:-90} \
      --bin \$SHOAL_BIN_DIR --worker-bin \$SHOAL_WORKER_PATH --out $q/user_model" \
      shoald-bench.log > >(tee "$out/user_model.log") 2>&1
    ;;
  finish)
    gpu_check
    # The same 2-stage pipeline with TF32 as PyTorch defaults it: how far it moves the loss
    # gpu_check compared with TF32 off (the CPU's loss is in gpu_check.log).
    node "\$SHOAL submit --kind pipeline --device cuda --dataset synthetic --layers 18 \
      --filters 64 --batch-size 8 --batches 1 --stages 2 --chunks 4 --checkpoint except_last \
      --start spawn --wait --json >$q/pipeline_tf32.json" shoald-tf32.log 2>&1
    python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))
print("pipeline spawn 2 stages, TF32 as PyTorch defaults it:", e["state"],
      "loss", (e.get("result") or {}).get("last_loss"))' "$out/pipeline_tf32.json" || status=1
    SHOAL_POINT_TIMEOUT_S=${SHOAL_POINT_TIMEOUT_S:-45} grid fork no
    ;;
  check | gpu-check)
    gpu_check
    if [ "$part" = check ]; then
      node "timeout ${SHOAL_PIPELINE_S:-200} python3 bench/gpu_pipeline_seed.py --out $q/pipeline" \
        shoald-pipeline.log > >(tee "$out/pipeline_seed.log") 2>&1
    fi
    ;;
  cuda-sync)
    for i in 1 2; do
      node "\$SHOAL sweep --workers 16 --start spawn --share no,yes --cuda-sync events,phases,step \
        --device cuda --dataset synthetic --batches 200 --eval-samples 0 \
        --sample-interval-ms 100 --wait --json >$q/cuda_sync_$i.json" shoald-sync-$i.log 2>&1
      summary "$out/cuda_sync_$i.json" || status=1
    done
    ;;
  sweep-a) grid spawn yes,no ;;
  sweep-b) grid forkserver yes,no ;;
  sweep-c) grid fork no ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
if ls /dev/shm | grep '^shoal\.'; then
  echo "LEFT in /dev/shm"
  status=1
fi
tar czf "$out.tgz" -C "$(dirname "$out")" "$part" && rm -rf "$out"
exit $status
