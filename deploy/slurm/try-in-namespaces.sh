#!/usr/bin/env bash
# Runs data_parallel.sbatch under a real Slurm on one machine: two network namespaces joined by a
# veth pair are the nodes shoalslurm0 and shoalslurm1 (each its own host name), with slurmctld and
# a slurmd on the first and a slurmd on the second, munge for authentication. Then
#   sbatch -N2 -W data_parallel.sbatch ARGS...
# and prints the job's output. Needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (deploy/install-deps.sh). Everything it starts or makes is removed on exit.
#
#   deploy/slurm/try-in-namespaces.sh --workers 1 --batch-size 32 --batches 8 --threads 1
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TAG=$$
NS=(shoalslurm${TAG}a shoalslurm${TAG}b)
VETH=(ss${TAG}a ss${TAG}b)
NAMES=(shoalslurm0 shoalslurm1)
NET=10.215.$((TAG % 250))
TMP=$(mktemp -d /tmp/shoal-slurm-try.XXXXXX)
chmod 755 "$TMP"
PIDS=()
MUNGED=""  # munged's pid when this script started it
cleanup() {
  [ -z "$MUNGED" ] || kill "$MUNGED" 2>/dev/null || true
  for p in "${PIDS[@]}"; do { kill "$p" && wait "$p"; } 2>/dev/null || true; done
  for n in "${NS[@]}"; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# munge: one daemon serves both nodes (its socket is a file, reachable from every namespace).
if ! munge -n </dev/null >/dev/null 2>&1; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged --force
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
  MUNGED=$(cat /run/munge/munged.pid)
fi

# shellcheck source=deploy/netns-pair.sh
. "$ROOT/deploy/netns-pair.sh"
netns_pair_up "${NS[@]}" "${VETH[@]}" "$NET"
printf '127.0.0.1 localhost\n%s.1 %s\n%s.2 %s\n' "$NET" "${NAMES[0]}" "$NET" "${NAMES[1]}" \
  >"$TMP/hosts"

# Both nodes are this machine: its CPUs, boards, sockets, cores and threads as slurmd sees them.
HW=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //; s/ RealMemory=.*//')
cat >"$TMP/slurm.conf" <<EOF
ClusterName=shoaltry
SlurmctldHost=${NAMES[0]}($NET.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$TMP/ctld
SlurmdSpoolDir=$TMP/spool-%n
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd-%n.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
ReturnToService=2
SchedulerType=sched/builtin
MpiDefault=none
NodeName=${NAMES[0]} NodeAddr=$NET.1 $HW State=UNKNOWN
NodeName=${NAMES[1]} NodeAddr=$NET.2 $HW State=UNKNOWN
PartitionName=try Nodes=ALL Default=YES MaxTime=30 State=UP
EOF
export SLURM_CONF=$TMP/slurm.conf
mkdir -p "$TMP/ctld" "$TMP/spool-${NAMES[0]}" "$TMP/spool-${NAMES[1]}"

# Runs "$@" as node i: in its network namespace, under its own host name, with an /etc/hosts
# that names both nodes. Not `ip netns exec`: it mounts a new /sys, where slurmd finds no cgroups.
on() {
  local i=$1
  shift
  nsenter --net="/run/netns/${NS[$i]}" unshare --mount --uts sh -c \
    "mount --bind $TMP/hosts /etc/hosts && hostname ${NAMES[$i]} && exec \"\$@\"" sh "$@"
}
on 0 slurmctld -D -i >"$TMP/ctld.out" 2>&1 &
PIDS+=($!)
for i in 0 1; do
  on "$i" slurmd -D -N "${NAMES[$i]}" >"$TMP/slurmd$i.out" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 150); do
  [ "$(on 0 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = 2 ] && break
  sleep 0.2
done
echo "slurm: $(on 0 sinfo -h -N -o '%N %t' | sort -u | tr '\n' ' ')"
if [ "$(on 0 sinfo -h -N -t idle -o %N | sort -u | wc -l)" != 2 ]; then
  echo "the two nodes did not come up; slurmctld and slurmd said:" >&2
  tail -n 15 "$TMP"/*.log "$TMP"/*.out >&2
  exit 1
fi

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
