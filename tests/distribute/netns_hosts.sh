# Three "hosts" for the tests across hosts (sourced): network namespaces
# ${TAG}w0..2, each with its own address 10.77.0.1..3 on a bridge in
# ${TAG}br (veth pairs, iproute2), and `cut_link I` to take host I off the
# bridge (`mend_link I` to put it back). Needs root: netns_make_hosts exits 77 (skipped) where
# namespaces cannot be made. The caller sets TAG (unique per run) and calls
# netns_cleanup on exit, which kills whatever still runs in them.
BRIDGE_NS="${TAG}br"

netns_cleanup() {
  for i in 0 1 2; do
    ip netns pids "${TAG}w$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "${TAG}w$i" 2>/dev/null || true
  done
  ip netns del "$BRIDGE_NS" 2>/dev/null || true
}

netns_make_hosts() {
  if ! ip netns add "$BRIDGE_NS" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here (needs root and iproute2)"
    exit 77
  fi
  ip -n "$BRIDGE_NS" link add br0 type bridge
  ip -n "$BRIDGE_NS" link set br0 up
  local i ns
  for i in 0 1 2; do
    ns="${TAG}w$i"
    ip netns add "$ns"
    ip link add "v${TAG}$i" type veth peer name "b${TAG}$i"
    ip link set "v${TAG}$i" netns "$ns"
    ip link set "b${TAG}$i" netns "$BRIDGE_NS"
    ip -n "$BRIDGE_NS" link set "b${TAG}$i" master br0 up
    ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev "v${TAG}$i"
    ip -n "$ns" link set "v${TAG}$i" up
    ip -n "$ns" link set lo up
  done
}

# Host $1's link goes down: its processes live on, unreachable; mend_link
# brings it back.
cut_link() { ip -n "$BRIDGE_NS" link set "b${TAG}$1" down; }
mend_link() { ip -n "$BRIDGE_NS" link set "b${TAG}$1" up; }

TF_CLUSTER='"cluster": {"worker": ["10.77.0.1:2222", "10.77.0.2:2222", "10.77.0.3:2222"]}'
