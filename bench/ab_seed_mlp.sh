#!/usr/bin/env bash
# Two builds of Lockstep side by side on the seed MLP (a change's "speed is
# unchanged" figure): samples/s of build A and build B, in alternating
# rounds, for one replica (2 intra-op threads), one worker with 2 replicas
# (one per core), and 2 MPI workers (one per core); then the median and
# range of each.
#
#   bench/ab_seed_mlp.sh BUILD_A BUILD_B [ROUNDS (5)] [BATCH (64)] [STEPS (1500)]
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-5} BATCH=${4:-64} STEPS=${5:-1500}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN=(mpirun -n 2 --bind-to core --map-by core)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {  # label build
  local bench=$2/bench/multi_worker_bench rate
  rate=$("$bench" mlp single "$BATCH" "$STEPS" | awk '{print $(NF-1)}')
  echo "$1 one-replica $rate" >>"$out"
  rate=$("$bench" mlp mwms "$BATCH" "$STEPS" 2 | awk '{print $(NF-1)}')
  echo "$1 two-replicas $rate" >>"$out"
  rate=$(OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$bench" mlp mwms "$BATCH" "$STEPS" | awk '{print $(NF-1)}')
  echo "$1 two-mpi-workers $rate" >>"$out"
}

for round in $(seq 1 "$ROUNDS"); do
  if ((round % 2)); then run A "$A"; run B "$B"; else run B "$B"; run A "$A"; fi
done
python3 - "$out" "$A" "$B" "$BATCH" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"seed MLP, batch {sys.argv[4]}, samples/s: median (min-max) over {len(rows)//6} rounds")
print(f"  A = {sys.argv[2]}\n  B = {sys.argv[3]}")
for config in ("one-replica", "two-replicas", "two-mpi-workers"):
    a = [float(r[2]) for r in rows if r[0] == "A" and r[1] == config]
    b = [float(r[2]) for r in rows if r[0] == "B" and r[1] == config]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"  {config:16s} A {ma:9,.0f} ({min(a):,.0f}-{max(a):,.0f})  "
          f"B {mb:9,.0f} ({min(b):,.0f}-{max(b):,.0f})  B/A {mb/ma:.3f}")
PY
