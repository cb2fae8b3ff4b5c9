# Sourced by scripts that make two "nodes" on one machine: netns_pair_up NS0 NS1 VETH0 VETH1 NET
# makes namespaces NS0 and NS1 joined by the veth pair VETH0/VETH1, with addresses NET.1 and NET.2
# (/24) and loopback up. The caller removes them (ip netns del takes the pair with it).
netns_pair_up() {
  local ns=("$1" "$2") veth=("$3" "$4") net=$5 i
  ip link add "${veth[0]}" type veth peer name "${veth[1]}"
  for i in 0 1; do
    ip netns add "${ns[$i]}"
    ip link set "${veth[$i]}" netns "${ns[$i]}"
    ip -n "${ns[$i]}" addr add "$net.$((i + 1))/24" dev "${veth[$i]}"
    ip -n "${ns[$i]}" link set "${veth[$i]}" up
    ip -n "${ns[$i]}" link set lo up
  done
}
