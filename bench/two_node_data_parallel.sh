#!/usr/bin/env bash
# data_parallel across two "nodes" on one machine: two network namespaces joined by a veth pair
# (optionally shaped with tc to RATE, e.g. 1gbit), a shoald in each with its own host name, one
# part of the experiment submitted to each. Prints each part's data_parallel figures. Needs root;
# everything it makes (namespaces, link, /etc/netns entries, daemons) is removed on exit.
#
#   bench/two_node_data_parallel.sh [RATE|none] [extra submit flags...]
#   bench/two_node_data_parallel.sh 1gbit --model resnet18_cifar --batch-size 8 --batches 4
set -euo pipefail
RATE=${1:-none}
shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SHOAL_BIN:-$ROOT/build/bin}
TAG=$$
NS=(shoalb${TAG}a shoalb${TAG}b)
VETH=(sb${TAG}a sb${TAG}b)
NET=10.214.$((TAG % 250))
TMP=$(mktemp -d /tmp/shoal-2node.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do { kill -9 "$p" && wait "$p"; } 2>/dev/null || true; done
  for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; rm -rf "/etc/netns/$n"; done
  rm -rf "$TMP"
}
trap cleanup EXIT
ip link add "${VETH[0]}" type veth peer name "${VETH[1]}"
for i in 0 1; do
  ip netns add "${NS[$i]}"
  ip link set "${VETH[$i]}" netns "${NS[$i]}"
  ip -n "${NS[$i]}" addr add "$NET.$((i + 1))/24" dev "${VETH[$i]}"
  ip -n "${NS[$i]}" link set "${VETH[$i]}" up
  ip -n "${NS[$i]}" link set lo up
  [ "$RATE" = none ] || ip netns exec "${NS[$i]}" tc qdisc add dev "${VETH[$i]}" root tbf \
    rate "$RATE" burst 512kbit latency 100ms
  mkdir -p "/etc/netns/${NS[$i]}"
  printf '127.0.0.1 localhost\n%s.1 shoalnode0\n%s.2 shoalnode1\n' "$NET" "$NET" \
    >"/etc/netns/${NS[$i]}/hosts"
  ip netns exec "${NS[$i]}" unshare --uts sh -c "hostname shoalnode$i && exec \"\$@\"" sh \
    "$BIN/shoald" --socket "$TMP/s$i.sock" --state-dir "$TMP/state$i" --log-level warn &
  PIDS+=($!)
done
for i in 0 1; do
  for _ in $(seq 100); do [ -S "$TMP/s$i.sock" ] && break; sleep 0.1; done
done
ids=()
for i in 0 1; do
  ids+=("$("$BIN/shoal" --socket "$TMP/s$i.sock" submit --kind data_parallel --nodes 2 \
    --node-rank "$i" --master shoalnode0:29533 --eval-samples 0 "$@" --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')")
done
echo "link: ${RATE}; each node's part of one experiment:"
for i in 0 1; do
  until "$BIN/shoal" --socket "$TMP/s$i.sock" get "${ids[$i]}" --json | /usr/bin/python3 -c \
    'import json,sys; sys.exit(json.load(sys.stdin)["state"] in ("QUEUED", "RUNNING"))'; do
    sleep 0.5
  done
  "$BIN/shoal" --socket "$TMP/s$i.sock" get "${ids[$i]}" | grep -E "^experiment|replicas|per step|throughput|  error"
done
