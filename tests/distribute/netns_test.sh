#!/usr/bin/env bash
# Multi-worker training across hosts: three network namespaces, each with its
# own address on a bridge (veth pairs, iproute2), one worker in each.
#   1. The job trains; the three workers end with identical weights.
#   2. A second job loses worker 2's link mid-training: workers 0 and 1 fail
#      within the collective timeout + 2 s, naming worker 2 and its address.
# Needs root (network namespaces); exits 77 (skipped) where they cannot be made.
#
#   netns_test.sh MULTI_WORKER_TRAIN WORK_DIR
set -euo pipefail

TRAIN=$1
WORK=$2
TAG="ls$$"
TIMEOUT_MS=4000

rm -rf "$WORK"
mkdir -p "$WORK"

# shellcheck source=netns_hosts.sh
source "$(dirname "$0")/netns_hosts.sh"
trap netns_cleanup EXIT
netns_make_hosts

start_worker() {  # index, log, extra args...; appends the pid to pids
  local i=$1 log=$2
  shift 2
  ip netns exec "${TAG}w$i" env \
    TF_CONFIG="{$TF_CLUSTER, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
    LOCKSTEP_JOB_TOKEN="netns-test-$TAG" OMP_NUM_THREADS=1 \
    "$TRAIN" --timeout-ms "$TIMEOUT_MS" "$@" >"$log" 2>&1 &
  pids+=($!)
}

# 1. A whole job across the three hosts.
pids=()
for i in 0 1 2; do
  start_worker "$i" "$WORK/train$i.log" --out "$WORK/w$i.bin"
done
for i in 0 1 2; do
  if ! wait "${pids[$i]}"; then
    echo "FAIL: worker $i of the job across namespaces failed:"
    cat "$WORK/train$i.log"
    exit 1
  fi
done
cmp "$WORK/w0.bin" "$WORK/w1.bin"
cmp "$WORK/w0.bin" "$WORK/w2.bin"
echo "ok: 3 workers on 3 hosts trained to identical weights"

# 2. Worker 2's link goes down while the job trains.
pids=()
for i in 0 1 2; do
  start_worker "$i" "$WORK/cut$i.log" --epochs 400
done
# Let training start (all three past their first epoch line), then cut.
for _ in $(seq 1 200); do
  if grep -q "Epoch 2/" "$WORK/cut0.log" 2>/dev/null; then break; fi
  sleep 0.05
done
grep -q "Epoch 2/" "$WORK/cut0.log" || { echo "FAIL: the job did not start"; cat "$WORK"/cut*.log; exit 1; }
cut_link 2
cut_at=$(date +%s%N)
for i in 0 1; do
  code=0
  wait "${pids[$i]}" || code=$?
  elapsed_ms=$(( ($(date +%s%N) - cut_at) / 1000000 ))
  if [[ $code -ne 3 ]]; then
    echo "FAIL: worker $i exited with $code after the link went down (expected 3)"
    cat "$WORK/cut$i.log"
    exit 1
  fi
  # Named at the heartbeat timeout (TIMEOUT_MS / 2), before the collective's
  # own deadline (issue #41: the chief's store names the lost worker, and
  # every worker's collectives are aborted then).
  if (( elapsed_ms > TIMEOUT_MS )); then
    echo "FAIL: worker $i took $elapsed_ms ms to fail (bound: the collective deadline, $TIMEOUT_MS ms)"
    exit 1
  fi
  if ! grep -q "worker 2 (10.77.0.3:2222) was lost: no heartbeat" "$WORK/cut$i.log"; then
    echo "FAIL: worker $i's error does not name the unreachable worker:"
    tail -3 "$WORK/cut$i.log"
    exit 1
  fi
  echo "ok: worker $i failed after $elapsed_ms ms: $(tail -1 "$WORK/cut$i.log" | cut -c1-220)"
done
# Worker 2 cannot reach anyone: it fails too, and says it lost the chief.
code=0
wait "${pids[2]}" || code=$?
grep -q "lost contact with the chief" "$WORK/cut2.log" || {
  echo "FAIL: worker 2 ($code):"
  tail -3 "$WORK/cut2.log"
  exit 1
}
echo "ok: worker 2 exited with $code: lost contact with the chief"
echo PASS
