#!/usr/bin/env bash
# Gradient compression between workers (issue #21), two Gloo workers on
# loopback, one core each, ROUNDS alternating rounds:
#   - the all-reduce alone, 1-64 MiB: float32 (ours-gloo) against bfloat16
#     on the wire (ours-gloo-bf16);
#   - seed-MLP samples/s, global batch 64 and 512: MultiWorkerMirroredStrategy
#     with float32 gradients (mwms) and bfloat16 ones (mwms-bf16);
#   - the same on a link limited to LINK_RATE (network namespaces and tc;
#     needs root).
#
#   bench/gradient_compression.sh [BUILD_DIR]     ROUNDS=3
set -euo pipefail
BUILD=${1:-build/release}
ROUNDS=${ROUNDS:-3}
BENCH=$BUILD/bench/multi_worker_bench
[[ -x "$BENCH" ]] || { echo "build $BENCH first (--target multi_worker_bench)" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tf_config() {  # index port0 port1
  echo "{\"cluster\": {\"worker\": [\"127.0.0.1:$2\", \"127.0.0.1:$3\"]}, \"task\": {\"type\": \"worker\", \"index\": $1}}"
}

for ((round = 1; round <= ROUNDS; ++round)); do
  for impl in ours-gloo ours-gloo-bf16; do
    port=$(free_port)
    RANK=1 SIZE=2 PORT=$port OMP_NUM_THREADS=1 taskset -c 1 "$BENCH" allreduce "$impl" >/dev/null &
    RANK=0 SIZE=2 PORT=$port OMP_NUM_THREADS=1 taskset -c 0 "$BENCH" allreduce "$impl"
    wait
  done
  for batch in 64 512; do
    steps=$((batch == 64 ? 1500 : 300))
    for mode in mwms mwms-bf16; do
      p0=$(free_port)
      p1=$(free_port)
      TF_CONFIG=$(tf_config 1 "$p0" "$p1") LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 taskset -c 1 \
        "$BENCH" mlp "$mode" "$batch" "$steps" >/dev/null &
      TF_CONFIG=$(tf_config 0 "$p0" "$p1") LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 taskset -c 0 \
        "$BENCH" mlp "$mode" "$batch" "$steps"
      wait
    done
  done
done

# The same two workers on a link limited to LINK_RATE (default 1gbit): two
# network namespaces joined by a veth pair, each end shaped by tc's token
# bucket. Needs root; skipped where namespaces cannot be made.
LINK_RATE=${LINK_RATE:-1gbit}
TAG="gc$$"
cleanup() {
  for i in 0 1; do
    ip netns pids "${TAG}$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "${TAG}$i" 2>/dev/null || true
  done
}
trap cleanup EXIT
if ! ip netns add "${TAG}0" 2>/dev/null; then
  echo "# link-limited runs skipped: cannot create network namespaces here"
  exit 0
fi
ip netns add "${TAG}1"
ip link add "v${TAG}0" type veth peer name "v${TAG}1"
for i in 0 1; do
  ip link set "v${TAG}$i" netns "${TAG}$i"
  ip -n "${TAG}$i" addr add "10.77.0.$((i + 1))/24" dev "v${TAG}$i"
  ip -n "${TAG}$i" link set "v${TAG}$i" up
  ip -n "${TAG}$i" link set lo up
  ip netns exec "${TAG}$i" tc qdisc add dev "v${TAG}$i" root tbf rate "$LINK_RATE" burst 256kb latency 50ms
done
link_config() {  # index
  echo "{\"cluster\": {\"worker\": [\"10.77.0.1:23456\", \"10.77.0.2:23456\"]}, \"task\": {\"type\": \"worker\", \"index\": $1}}"
}
echo "# two workers on a $LINK_RATE link"
for ((round = 1; round <= ROUNDS; ++round)); do
  for batch in 64 512; do
    steps=$((batch == 64 ? 300 : 100))
    for mode in mwms mwms-bf16; do
      TF_CONFIG=$(link_config 1) LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 \
        ip netns exec "${TAG}1" taskset -c 1 "$BENCH" mlp "$mode" "$batch" "$steps" >/dev/null &
      TF_CONFIG=$(link_config 0) LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 \
        ip netns exec "${TAG}0" taskset -c 0 "$BENCH" mlp "$mode" "$batch" "$steps" |
        sed "s/^mlp /mlp-$LINK_RATE /"
      wait
    done
  done
done
