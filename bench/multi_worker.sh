#!/usr/bin/env bash
# Multi-worker figures (issue #7) in one run, every process on this machine:
#   - all-reduce, 2 ranks, 1-64 MiB (BENCH_SIZES_KIB to choose): our Gloo and
#     MPI communicators against bare Gloo (gloo::allreduce, and Gloo's
#     halving-doubling, on the calling thread) and bare MPI_Allreduce, and
#     one loopback TCP stream;
#   - seed-MLP samples/s (global batch 64 and 512): 1 worker x 1 replica,
#     1 worker x 2 replicas, 2 workers x 1 replica over Gloo and over MPI;
#   - time for the survivor to fail after its peer is killed (kill -9).
#
#   bench/multi_worker.sh [BUILD_DIR]     (default build/release)
set -euo pipefail
BUILD=${1:-build/release}
BENCH=$BUILD/bench/multi_worker_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN=(mpirun -n 2 --bind-to core --map-by core)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

gloo_pair() {  # impl: two ranks, one per core
  local port
  port=$(free_port)
  RANK=1 SIZE=2 PORT=$port OMP_NUM_THREADS=1 taskset -c 1 "$BENCH" allreduce "$1" >/dev/null &
  RANK=0 SIZE=2 PORT=$port OMP_NUM_THREADS=1 taskset -c 0 "$BENCH" allreduce "$1"
  wait
}

echo "# all-reduce, 2 ranks (impl size_MiB ms/op MB/s)"
"$BENCH" tcp
for round in 1 2; do
  gloo_pair bare-gloo
  gloo_pair ours-gloo
  gloo_pair bare-gloo-hd
  "${MPIRUN[@]}" "$BENCH" allreduce bare-mpi
  "${MPIRUN[@]}" "$BENCH" allreduce ours-mpi
done

tf_config() {  # ports... index
  local idx=$1 p0=$2 p1=$3
  echo "{\"cluster\": {\"worker\": [\"127.0.0.1:$p0\", \"127.0.0.1:$p1\"]}, \"task\": {\"type\": \"worker\", \"index\": $idx}}"
}

echo "# seed MLP, samples/s"
for batch in 64 512; do
  steps=$((batch == 64 ? 1500 : 300))
  for round in 1 2; do
    OMP_NUM_THREADS=1 taskset -c 0 "$BENCH" mlp single "$batch" "$steps"
    "$BENCH" mlp single "$batch" "$steps" | sed 's/^mlp single/mlp single-2-threads/'
    "$BENCH" mlp mwms "$batch" "$steps" 2
    p0=$(free_port)
    p1=$(free_port)
    TF_CONFIG=$(tf_config 1 "$p0" "$p1") LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 taskset -c 1 \
      "$BENCH" mlp mwms "$batch" "$steps" >/dev/null &
    TF_CONFIG=$(tf_config 0 "$p0" "$p1") LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 taskset -c 0 \
      "$BENCH" mlp mwms "$batch" "$steps" | sed 's/^mlp mwms/mlp mwms-gloo/'
    wait
    OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$BENCH" mlp mwms "$batch" "$steps" | sed 's/^mlp mwms/mlp mwms-mpi/'
  done
done

echo "# time from kill -9 of worker 1 to worker 0's exit (Gloo, 5 trials)"
for trial in 1 2 3 4 5; do
  p0=$(free_port)
  p1=$(free_port)
  TF_CONFIG=$(tf_config 0 "$p0" "$p1") LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 \
    "$BENCH" mlp mwms 64 1000000 >/dev/null 2>&1 &
  w0=$!
  TF_CONFIG=$(tf_config 1 "$p0" "$p1") LOCKSTEP_JOB_TOKEN=bench-token-0123456789 OMP_NUM_THREADS=1 \
    "$BENCH" mlp mwms 64 1000000 >/dev/null 2>&1 &
  w1=$!
  sleep 2
  kill -9 "$w1"
  t0=$(date +%s%N)
  wait "$w0" || true
  echo "lost-worker detection: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  wait "$w1" 2>/dev/null || true
done
