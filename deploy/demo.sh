#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts shoald on a temporary socket and state
# directory, runs a small real grid of Hogwild experiments on Fashion-MNIST and prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
deploy/build.sh >/dev/null
BIN=build/bin
WORKERS=${SHOAL_DEMO_WORKERS:-2}
BATCHES=${SHOAL_DEMO_BATCHES:-10}
DATASET=${SHOAL_DEMO_DATASET:-/usr/share/datasets/fashion-mnist}

tmp=$(mktemp -d /tmp/shoal-demo.XXXXXX)
export SHOAL_SOCKET=$tmp/shoald.sock
"$BIN/shoald" --state-dir "$tmp/state" --log-level warn &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$SHOAL_SOCKET" ] && break; sleep 0.1; done

"$BIN/shoal" node
echo
for start in fork spawn; do
  for share in yes no; do
    echo "== $WORKERS workers, start $start, share $share, $BATCHES batches each"
    "$BIN/shoal" submit --workers "$WORKERS" --start "$start" --share "$share" --device cpu \
      --batches "$BATCHES" --batch-size 64 --dataset "$DATASET" --wait --json >/dev/null
  done
done
echo
"$BIN/shoal" list
echo
id=$("$BIN/shoal" list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["experiments"][0]["id"])')
"$BIN/shoal" get "$id"
