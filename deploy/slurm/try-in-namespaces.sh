#!/usr/bin/env bash
# Runs data_parallel.sbatch under a real Slurm on one machine (deploy/slurm/cluster.sh: the nodes
# shoalslurm0 and shoalslurm1, each a network namespace with its own host name). Then
#   sbatch -N2 -W data_parallel.sbatch ARGS...
# and prints the job's output. Needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (deploy/install-deps.sh). Everything it starts or makes is removed on exit.
#
#   deploy/slurm/try-in-namespaces.sh --workers 1 --batch-size 32 --batches 8 --threads 1
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d /tmp/shoal-slurm-try.XXXXXX)
trap '"$ROOT/deploy/slurm/cluster.sh" down "$TMP"' EXIT
"$ROOT/deploy/slurm/cluster.sh" up "$TMP"
on() { "$ROOT/deploy/slurm/cluster.sh" on "$TMP" "$@"; }

cd "$ROOT"
dirs() { { compgen -G '/tmp/shoal-slurm.*' || true; } | wc -l; }  # what the job's tasks make in /tmp
before=$(dirs)
rc=0
on 0 sbatch -N2 -W -o "$TMP/job-%j.out" deploy/slurm/data_parallel.sbatch "$@" >"$TMP/sbatch.out" \
  2>&1 || rc=$?
cat "$TMP/sbatch.out"
cat "$TMP"/job-*.out 2>/dev/null || { echo "no job output; slurmctld said:"; tail -20 "$TMP/slurmctld.log"; }
echo "sbatch exit: $rc"
# The job's daemons are gone and their directories with them.
left=$(($(dirs) - before))
# The job's daemons only (their state under /tmp/shoal-slurm.*): other daemons may run beside it.
pgrep -f 'shoald --socket /tmp/shoal-slurm\.' >/dev/null && { echo "a shoald outlived the job" >&2; rc=1; }
[ "$left" -eq 0 ] || { echo "$left shoald directories outlived the job" >&2; rc=1; }
exit $rc
