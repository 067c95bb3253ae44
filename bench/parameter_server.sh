#!/usr/bin/env bash
# ParameterServerStrategy's figures (issue #20) in one run, every task a
# process of this machine (one core each, round-robin, as lockstep launch
# places them), beside MultiWorkerMirroredStrategy on the same workload:
#   - seed-MLP samples/s at batch 64 (bench/seed_mlp.h's synthetic cached
#     batches): 1 and 2 workers with 1 ps, and their mean staleness;
#     MultiWorkerMirroredStrategy, 2 workers over Gloo, and 1 process;
#   - the coordinator's overhead per scheduled function, in µs;
#   - the ps task's apply throughput, GB/s (a 64 MiB variable, Adam).
#
#   bench/parameter_server.sh [BUILD_DIR]     (default build/release)
set -euo pipefail
BUILD=${1:-build/release}
PS_BENCH=$BUILD/bench/ps_bench
MW_BENCH=$BUILD/bench/multi_worker_bench
export LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# job WORKERS ARGS...: 1 ps task and WORKERS workers serve, the chief runs
# ps_bench ARGS; worker i on core i % 2, the ps task and the chief on the
# next cores.
job() {
  local workers=$1
  shift
  local chief ps list=""
  chief=$(free_port)
  ps=$(free_port)
  local ports=()
  for ((i = 0; i < workers; i++)); do
    ports+=("$(free_port)")
    list+="${list:+, }\"127.0.0.1:${ports[$i]}\""
  done
  local cluster="{\"cluster\": {\"chief\": [\"127.0.0.1:$chief\"], \"worker\": [$list], \"ps\": [\"127.0.0.1:$ps\"]}"
  TF_CONFIG="$cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" taskset -c $((workers % 2)) "$PS_BENCH" &
  for ((i = 0; i < workers; i++)); do
    TF_CONFIG="$cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" taskset -c $((i % 2)) "$PS_BENCH" &
  done
  TF_CONFIG="$cluster, \"task\": {\"type\": \"chief\", \"index\": 0}}" taskset -c $(((workers + 1) % 2)) "$PS_BENCH" "$@"
  wait
}

mw_config() {  # index port0 port1
  echo "{\"cluster\": {\"worker\": [\"127.0.0.1:$2\", \"127.0.0.1:$3\"]}, \"task\": {\"type\": \"worker\", \"index\": $1}}"
}

echo "# seed MLP, batch 64, samples/s"
for round in 1 2; do
  job 1 mlp 64 1500
  job 2 mlp 64 1500
  taskset -c 0 "$MW_BENCH" mlp single 64 1500
  p0=$(free_port)
  p1=$(free_port)
  TF_CONFIG=$(mw_config 1 "$p0" "$p1") taskset -c 1 "$MW_BENCH" mlp mwms 64 1500 >/dev/null &
  TF_CONFIG=$(mw_config 0 "$p0" "$p1") taskset -c 0 "$MW_BENCH" mlp mwms 64 1500 |
    sed 's/^mlp mwms/mlp mwms-gloo/'
  wait
done
echo "# the coordinator's overhead per scheduled function"
for round in 1 2; do
  job 1 overhead 2000
  job 2 overhead 2000
done
echo "# the ps task's apply throughput"
for round in 1 2; do
  job 1 apply 64 20
done
