#!/usr/bin/env bash
# Lockstep against its peers on the same machine, the same workloads, in one
# run (issue #8). Each round runs every system once per workload, one after
# the other, so they share the machine's state; the table gives samples/s,
# test accuracy and peak resident memory, and Lockstep's ratio to each peer.
#
#   bench/compare.sh [BUILD_DIR]            (default build/release; builds nothing)
#
# Environment:
#   COMPARE_ROUNDS=N        rounds (default 1); the table shows each run's median
#   COMPARE_SEEDS="1 2 3"   the seed of each round's training runs (round r takes
#                           the r-th, cycling; default 42): with several, the
#                           table gives test accuracy as mean ± sd over them
#   COMPARE_WORKLOADS="..." subset of: mlp64 mlp512 cnn64 allreduce input
#                           mobilenet224 mobilenet96 (MobileNetV2 alpha 1.0 at
#                           224, batch 32; alpha 0.35 at 96, batch 64: issue
#                           #19 — not in the default set, minutes each)
#                           lstm transformer (token ids [64, 80] through an
#                           LSTM(128) or one transformer encoder block, 30
#                           steps: issue #37; TensorFlow only, not default)
#   TORCH_PYTHON, TF_PYTHON interpreters for the peers (default /usr/bin/python3,
#                           then /opt/tf-venv/bin/python; bench/peers/install.sh
#                           makes both)
#   COMPARE_OUT=FILE        also keep every RESULT line there (JSON lines)
#
# Each peer runs at its fastest configuration here, found in the same run:
# PyTorch single-process with 1 and with 2 intra-op threads and DDP over
# gloo; TensorFlow without a strategy with 1 and 2 threads and the guide's
# MirroredStrategy. The peers' commands (only theirs) run without the
# environment's OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which slowed
# OpenBLAS under torch (issue #21). The table gives each figure's median
# and min–max over the rounds, marks each peer's fastest configuration, and
# states Lockstep's best against it.
#
# A peer that cannot run is named with the reason, and the rest goes on; the
# script fails only if Lockstep itself fails.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-build/release}
WORKLOADS_BIN=$BUILD/bench/workloads
ROUNDS=${COMPARE_ROUNDS:-1}
read -r -a SEEDS <<<"${COMPARE_SEEDS:-42}"
SELECTED=${COMPARE_WORKLOADS:-"mlp64 mlp512 cnn64 allreduce input"}
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}
TF_PYTHON=${TF_PYTHON:-/opt/tf-venv/bin/python}
PY=/usr/bin/python3  # for the table and JSON helpers (needs no peer installed)
OUT=${COMPARE_OUT:-$(mktemp)}
: >"$OUT"

if [[ ! -x $WORKLOADS_BIN ]]; then
  echo "compare.sh: $WORKLOADS_BIN not found; build first (make build-release)" >&2
  exit 1
fi

declare -A available
check_peer() {  # name python module
  local why
  if ! command -v "$2" >/dev/null 2>&1 && [[ ! -x $2 ]]; then
    why="no interpreter $2"
  elif ! why=$("$2" -c "import $3" 2>&1 | tail -1); then
    :
  else
    available[$1]=1
    return
  fi
  echo "peer $1: not run ($why); bench/peers/install.sh installs it"
}
check_peer pytorch "$TORCH_PYTHON" torch
check_peer tensorflow "$TF_PYTHON" tensorflow

peer() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }

run() {  # label command...
  local line
  line=$("${@:2}" 2>"$OUT.err" | grep '^RESULT ' | tail -1)
  if [[ -z $line ]]; then
    echo "  $1: failed ($(tail -1 "$OUT.err"))" >&2
    return 1
  fi
  echo "${line#RESULT }" | "$PY" -c "import json,sys; r=json.load(sys.stdin); r['label']='$1'; print(json.dumps(r))" >>"$OUT"
}

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Lockstep's Gloo communicator (MultiWorkerMirroredStrategy's), 2 processes
# one per core: the same library and transport as PyTorch's DDP gloo.
lockstep_gloo_allreduce() {
  local port
  port=$(free_port)
  RANK=1 SIZE=2 PORT=$port OMP_NUM_THREADS=1 taskset -c 1 "$BUILD/bench/multi_worker_bench" \
    allreduce ours-gloo >/dev/null &
  RANK=0 SIZE=2 PORT=$port OMP_NUM_THREADS=1 taskset -c 0 "$BUILD/bench/multi_worker_bench" \
    allreduce ours-gloo |
    awk 'BEGIN { printf "RESULT {\"system\": \"lockstep\", \"workload\": \"allreduce\", \"mode\": \"Gloo communicator, 2 processes\", \"allreduce_MBps\": {" }
         { printf "%s\"%s\": %s", (NR > 1 ? ", " : ""), $3, $5 }
         END { print "}}" }'
  wait
}

for ((round = 1; round <= ROUNDS; round++)); do
  seed=${SEEDS[$(((round - 1) % ${#SEEDS[@]}))]}
  for w in $SELECTED; do
    case $w in
      mlp64) args=(--workload mlp --batch 64 --epochs 2 --seed "$seed") ;;
      mlp512) args=(--workload mlp --batch 512 --epochs 2 --seed "$seed") ;;
      cnn64) args=(--workload cnn --batch 64 --epochs 1 --seed "$seed") ;;
      allreduce) args=(--workload allreduce --sizes-mib 1,4,16,64) ;;
      input) args=(--workload input --batch 64) ;;
      mobilenet224) args=(--workload mobilenet --alpha 1.0 --size 224 --batch 32 --steps 4 --seed "$seed") ;;
      mobilenet96) args=(--workload mobilenet --alpha 0.35 --size 96 --batch 64 --steps 10 --seed "$seed") ;;
      lstm | transformer) args=(--workload "$w" --batch 64 --steps 30 --warmup 3 --seed "$seed") ;;
      *) echo "compare.sh: unknown workload $w" >&2; exit 2 ;;
    esac
    echo "round $round: $w" >&2
    if [[ $w == allreduce || $w == input ]]; then
      run "$w lockstep" "$WORKLOADS_BIN" "${args[@]}" || exit 1
      [[ $w == allreduce ]] && { run "$w lockstep gloo" lockstep_gloo_allreduce || exit 1; }
      [[ -n ${available[pytorch]:-} ]] && run "$w pytorch" peer "$TORCH_PYTHON" "$HERE/peers/torch_workloads.py" "${args[@]}"
      [[ -n ${available[tensorflow]:-} ]] && run "$w tensorflow" peer "$TF_PYTHON" "$HERE/peers/tf_workloads.py" "${args[@]}"
      continue
    fi
    run "$w lockstep mirrored" "$WORKLOADS_BIN" "${args[@]}" --mode mirrored || exit 1
    run "$w lockstep one-replica" "$WORKLOADS_BIN" "${args[@]}" --mode one-replica || exit 1
    if [[ $w == lstm || $w == transformer ]]; then
      # The issue's peer is TensorFlow (Keras 3, jit_compile "auto"): each
      # thread layout and the guide's MirroredStrategy. PyTorch's side of
      # these two is not written yet.
      run "$w lockstep single" "$WORKLOADS_BIN" "${args[@]}" --mode single || exit 1
      if [[ -n ${available[tensorflow]:-} ]]; then
        for t in 1 2; do
          run "$w tensorflow single-t$t" peer "$TF_PYTHON" "$HERE/peers/tf_workloads.py" "${args[@]}" --mode single --threads "$t"
        done
        run "$w tensorflow mirrored" peer "$TF_PYTHON" "$HERE/peers/tf_workloads.py" "${args[@]}" --mode mirrored
      fi
      continue
    fi
    if [[ $w == mobilenet* ]]; then
      # Every system in the thread layouts that can be its fastest here: on
      # a loaded 2-core machine one thread can beat two (a spinning OpenMP
      # barrier waits for a descheduled core).
      run "$w lockstep single 1-thread" env OMP_NUM_THREADS=1 "$WORKLOADS_BIN" "${args[@]}" --mode single || exit 1
      for t in 1 2; do
        [[ -n ${available[pytorch]:-} ]] && run "$w pytorch single-t$t" peer "$TORCH_PYTHON" "$HERE/peers/torch_workloads.py" "${args[@]}" --mode single --threads "$t"
        [[ -n ${available[pytorch]:-} ]] && run "$w pytorch channels-last-t$t" peer "$TORCH_PYTHON" "$HERE/peers/torch_workloads.py" "${args[@]}" --mode channels-last --threads "$t"
        [[ -n ${available[tensorflow]:-} ]] && run "$w tensorflow single-t$t" peer "$TF_PYTHON" "$HERE/peers/tf_workloads.py" "${args[@]}" --mode single --threads "$t"
      done
      continue
    fi
    if [[ -n ${available[pytorch]:-} ]]; then
      for t in 1 2; do
        run "$w pytorch single-t$t" peer "$TORCH_PYTHON" "$HERE/peers/torch_workloads.py" "${args[@]}" --mode single --threads "$t"
      done
      run "$w pytorch ddp" peer "$TORCH_PYTHON" "$HERE/peers/torch_workloads.py" "${args[@]}" --mode ddp
    fi
    if [[ -n ${available[tensorflow]:-} ]]; then
      for t in 1 2; do
        run "$w tensorflow single-t$t" peer "$TF_PYTHON" "$HERE/peers/tf_workloads.py" "${args[@]}" --mode single --threads "$t"
      done
      run "$w tensorflow mirrored" peer "$TF_PYTHON" "$HERE/peers/tf_workloads.py" "${args[@]}" --mode mirrored
    fi
  done
done
rm -f "$OUT.err"
"$PY" "$HERE/peers/table.py" "$OUT"
