#!/usr/bin/env bash
# data_parallel across two "nodes" on one machine: two network namespaces joined by a veth pair
# (optionally shaped with tc to RATE, e.g. 1gbit), a shoald in each with its own host name, on TCP
# with TLS (a certificate made here) and a token. One `shoal submit --node-daemons` to node 0's
# daemon runs the experiment on both: it prints the federated record, then each node's part.
# Needs root; everything it makes (namespaces, link, /etc/netns entries, daemons) is removed on exit.
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
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TMP/key.pem" -out "$TMP/cert.pem" -days 1 \
  -subj /CN=shoalnode0 -addext subjectAltName=DNS:shoalnode0,DNS:shoalnode1 2>/dev/null
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
(umask 077 && echo "coordinator $TOKEN" >"$TMP/tokens" && echo "$TOKEN" >"$TMP/peer.tok")
# shellcheck source=deploy/netns-pair.sh
. "$ROOT/deploy/netns-pair.sh"
netns_pair_up "${NS[@]}" "${VETH[@]}" "$NET"
for i in 0 1; do
  [ "$RATE" = none ] || ip netns exec "${NS[$i]}" tc qdisc add dev "${VETH[$i]}" root tbf \
    rate "$RATE" burst 512kbit latency 100ms
  mkdir -p "/etc/netns/${NS[$i]}"
  printf '127.0.0.1 localhost\n%s.1 shoalnode0\n%s.2 shoalnode1\n' "$NET" "$NET" \
    >"/etc/netns/${NS[$i]}/hosts"
  ip netns exec "${NS[$i]}" unshare --uts sh -c "hostname shoalnode$i && exec \"\$@\"" sh \
    "$BIN/shoald" --socket "$TMP/s$i.sock" --state-dir "$TMP/state$i" --log-level warn \
    --listen "$NET.$((i + 1)):7443" --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem" \
    --token-file "$TMP/tokens" --peer-token-file "$TMP/peer.tok" --peer-tls-ca "$TMP/cert.pem" &
  PIDS+=($!)
done
for i in 0 1; do
  for _ in $(seq 100); do [ -S "$TMP/s$i.sock" ] && break; sleep 0.1; done
done
echo "link: ${RATE}; one experiment over both nodes, submitted to node 0's shoald:"
id=$("$BIN/shoal" --socket "$TMP/s0.sock" submit --kind data_parallel \
  --node-daemons shoalnode0:7443,shoalnode1:7443 --eval-samples 0 "$@" --json |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
"$BIN/shoal" --socket "$TMP/s0.sock" watch "$id" | grep -E "^node [01] t=" | awk 'NR % 10 == 1' | cut -c1-150
"$BIN/shoal" --socket "$TMP/s0.sock" get "$id"
for i in 0 1; do
  part=$("$BIN/shoal" --socket "$TMP/s0.sock" get "$id" --json | /usr/bin/python3 -c \
    "import json,sys; print(json.load(sys.stdin)['parts'][$i]['experiment_id'])")
  echo "node $i's part, from its own shoald:"
  "$BIN/shoal" --socket "$TMP/s$i.sock" get "$part" | grep -E "^experiment|replicas|per step|throughput|  error"
done
