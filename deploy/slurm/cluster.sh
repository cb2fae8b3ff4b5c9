#!/usr/bin/env bash
# A real two-node Slurm on one machine, for trying Shoal's Slurm paths and for its tests: two
# network namespaces joined by a veth pair are the nodes shoalslurm0 and shoalslurm1 (each its own
# host name), slurmctld and a slurmd on the first, a slurmd on the second, munge for
# authentication. Needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (deploy/install-deps.sh).
#
#   deploy/slurm/cluster.sh up DIR         # starts it; DIR/slurm.conf, DIR/env; returns when idle
#   deploy/slurm/cluster.sh on DIR I CMD.. # execs CMD as node I (its namespace and host name)
#   deploy/slurm/cluster.sh down DIR       # stops everything `up` started, removes DIR
#
# `on` execs, so CMD keeps its pid (a test's daemon started through it is the process it waits
# for). The file system is shared: a path is the same on both nodes and outside them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAMES=(shoalslurm0 shoalslurm1)

up() {
  local dir=$1 tag=$$
  mkdir -p "$dir"
  chmod 755 "$dir"
  local ns=(shoalslurm${tag}a shoalslurm${tag}b) veth=(ss${tag}a ss${tag}b)
  local net=10.215.$((tag % 250))
  printf 'NS0=%s\nNS1=%s\nSLURM_CONF=%s\n' "${ns[0]}" "${ns[1]}" "$dir/slurm.conf" >"$dir/env"
  # munge: one daemon serves both nodes (its socket is a file, reachable from every namespace).
  if ! munge -n </dev/null >/dev/null 2>&1; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
    echo "MUNGED=$(cat /run/munge/munged.pid)" >>"$dir/env"
  fi
  # shellcheck source=deploy/netns-pair.sh
  . "$ROOT/deploy/netns-pair.sh"
  netns_pair_up "${ns[@]}" "${veth[@]}" "$net"
  printf '127.0.0.1 localhost\n%s.1 %s\n%s.2 %s\n' "$net" "${NAMES[0]}" "$net" "${NAMES[1]}" \
    >"$dir/hosts"
  # Both nodes are this machine: its CPUs, boards, sockets, cores and threads as slurmd sees them.
  local hw
  hw=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //; s/ RealMemory=.*//')
  cat >"$dir/slurm.conf" <<EOF
ClusterName=shoaltry
SlurmctldHost=${NAMES[0]}($net.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
ReturnToService=2
SchedulerType=sched/builtin
MpiDefault=none
MinJobAge=30
# Small, so that a 6-point sweep is cut into arrays as a 10,000-point one is at Slurm's default 1001.
MaxArraySize=4
NodeName=${NAMES[0]} NodeAddr=$net.1 $hw State=UNKNOWN
NodeName=${NAMES[1]} NodeAddr=$net.2 $hw State=UNKNOWN
PartitionName=try Nodes=ALL Default=YES MaxTime=30 State=UP
EOF
  mkdir -p "$dir/ctld" "$dir/spool-${NAMES[0]}" "$dir/spool-${NAMES[1]}"
  export SLURM_CONF=$dir/slurm.conf
  # setsid: the daemons outlive this script (and its caller's process group).
  setsid "$0" on "$dir" 0 slurmctld -D -i >"$dir/ctld.out" 2>&1 </dev/null &
  for i in 0 1; do
    setsid "$0" on "$dir" "$i" slurmd -D -N "${NAMES[$i]}" >"$dir/slurmd$i.out" 2>&1 </dev/null &
  done
  for _ in $(seq 150); do
    [ "$("$0" on "$dir" 0 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = 2 ] && break
    sleep 0.2
  done
  echo "slurm: $("$0" on "$dir" 0 sinfo -h -N -o '%N %t' | sort -u | tr '\n' ' ')"
  if [ "$("$0" on "$dir" 0 sinfo -h -N -t idle -o %N | sort -u | wc -l)" != 2 ]; then
    echo "the two nodes did not come up; slurmctld and slurmd said:" >&2
    tail -n 15 "$dir"/*.log "$dir"/*.out >&2 || true
    down "$dir"
    exit 1
  fi
}

# Runs "$@" as node i: in its network namespace, under its own host name, with an /etc/hosts that
# names both nodes. Not `ip netns exec`: it mounts a new /sys, where slurmd finds no cgroups.
on() {
  local dir=$1 i=$2
  shift 2
  # shellcheck disable=SC1091
  . "$dir/env"
  local ns_var=NS$i
  export SLURM_CONF
  exec nsenter --net="/run/netns/${!ns_var}" unshare --mount --uts sh -c \
    "mount --bind '$dir/hosts' /etc/hosts && hostname ${NAMES[$i]} && exec \"\$@\"" sh "$@"
}

down() {
  local dir=$1
  [ -f "$dir/env" ] || return 0
  # shellcheck disable=SC1091
  . "$dir/env"
  for n in "$NS0" "$NS1"; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  done
  [ -z "${MUNGED:-}" ] || kill "$MUNGED" 2>/dev/null || true
  rm -rf "$dir"
}

case "${1:-}" in
  up) up "$2" ;;
  on) shift && on "$@" ;;
  down) down "$2" ;;
  *)
    echo "usage: $0 up DIR | on DIR NODE CMD... | down DIR" >&2
    exit 2
    ;;
esac
