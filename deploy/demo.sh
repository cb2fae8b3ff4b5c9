#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts shoald on a temporary socket and state
# directory, runs small real sweeps (Hogwild on Fashion-MNIST, then multi_model, data_loading and
# data_parallel) and prints their tables.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
deploy/build.sh >/dev/null
BIN=build/bin
WORKERS=${SHOAL_DEMO_WORKERS:-1,2}
BATCHES=${SHOAL_DEMO_BATCHES:-5}
DATASET=${SHOAL_DEMO_DATASET:-/usr/share/datasets/fashion-mnist}

tmp=$(mktemp -d /tmp/shoal-demo.XXXXXX)
export SHOAL_SOCKET=$tmp/shoald.sock
"$BIN/shoald" --state-dir "$tmp/state" --log-level warn &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$SHOAL_SOCKET" ] && break; sleep 0.1; done

"$BIN/shoal" node
echo
# A small real sweep over the study's grid: worker counts x start methods x sharing, every point
# three times (interleaved), each cell the median with its spread.
"$BIN/shoal" sweep --workers "$WORKERS" --start fork,spawn,forkserver --share yes,no --device cpu \
  --repeats "${REPEATS:-3}" \
  --batches "$BATCHES" --batch-size 64 --eval-samples 0 --dataset "$DATASET" --wait
echo
# Seed 003's question on the same runtime: three optimisers, two epochs each (cut to 512 samples
# on a small machine), loss and test accuracy against steps, time and epochs.
"$BIN/shoal" sweep --optimizer sgd,adam,adadelta --epochs 2 --epoch-samples 512 --batch-size 64 \
  --eval-samples 500 --dataset "$DATASET" --wait
echo
# Seed 001 on the same runtime: n Linears against n Conv1d and one grouped Conv1d, each variant in
# its own worker (iterations cut for a small machine; the report gives per-iteration figures).
"$BIN/shoal" sweep --kind multi_model --models 1,8 --iterations 100 --wait
echo
# Seed 003's data loading: the trainer fed by 0 or 2 loader processes through a ring of batches in
# shared memory, each sample cropped, flipped and normalised (epochs cut to 512 samples).
"$BIN/shoal" sweep --kind data_loading --loaders 0,2 --epochs 2 --epoch-samples 512 \
  --batch-size 64 --eval-samples 500 --dataset "$DATASET" --wait
echo
# Seed 002's data parallelism: 1 and 2 replicas averaging gradients through c10d/Gloo, the batch
# per worker (weak) or per step (strong); speed-up, compute against communication, bandwidth.
"$BIN/shoal" sweep --kind data_parallel --workers 1,2 --scaling weak,strong --batch-size 32 \
  --batches 20 --eval-samples 0 --wait
