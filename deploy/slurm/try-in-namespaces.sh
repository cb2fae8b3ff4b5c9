#!/usr/bin/env bash
# Runs one experiment across two nodes under a real Slurm on one machine (deploy/slurm/cluster.sh:
# the nodes shoalslurm0 and shoalslurm1, each a network namespace with its own host name): shoald
# on node 0, then
#   shoal submit --slurm --partition try --nodes 2 ARGS... --wait
# (one Slurm job of two nodes, srun placing a part on each; docs/cluster.md) and prints its record.
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge (deploy/install-deps.sh).
# Everything it starts or makes is removed on exit.
#
#   deploy/slurm/try-in-namespaces.sh --kind data_parallel --workers 2 --batches 8 --dataset synthetic
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${SHOAL_BIN_DIR:-$ROOT/build/bin}
TMP=$(mktemp -d /tmp/shoal-slurm-try.XXXXXX)
DAEMON=
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
  "$ROOT/deploy/slurm/cluster.sh" down "$TMP"
}
trap cleanup EXIT
"$ROOT/deploy/slurm/cluster.sh" up "$TMP"
"$ROOT/deploy/slurm/cluster.sh" on "$TMP" 0 "$BIN/shoald" --socket "$TMP/s.sock" \
  --state-dir "$TMP/state" --log-level warn &
DAEMON=$!
for _ in $(seq 100); do [ -S "$TMP/s.sock" ] && break; sleep 0.1; done
rc=0
"$BIN/shoal" --socket "$TMP/s.sock" submit --slurm --partition try --nodes 2 "$@" --wait || rc=$?
"$ROOT/deploy/slurm/cluster.sh" on "$TMP" 0 squeue -h | grep . && { echo "a job outlived the run" >&2; rc=1; }
exit $rc
