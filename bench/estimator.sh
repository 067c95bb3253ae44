#!/usr/bin/env bash
# Steps/s of the Estimator layer (docs/benchmarks.md, "Estimator"): the
# guide's LinearRegressor and a DNNClassifier of the seed MLP's shape on
# Fashion-MNIST, under 1 replica and MirroredStrategy with 2, beside
# Model::fit training the same network on the same global batches
# (bench/estimator_bench.cc), and under ParameterServerStrategy with 1 and 2
# workers and one ps task (lockstep launch; "-ps" rows, replicas = workers).
# ROUNDS rounds, the configurations alternating within each; prints the
# median and range of each.
#
#   bench/estimator.sh [BUILD_DIR]      ROUNDS=3 STEPS=300 LINEAR_STEPS=3000
set -euo pipefail
BUILD=${1:-build/release}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-300}
LINEAR_STEPS=${LINEAR_STEPS:-3000}
BIN="$BUILD/bench/estimator_bench"
[[ -x "$BIN" ]] || { echo "estimator.sh: build $BIN first (cmake --build --preset release --target estimator_bench)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((round = 1; round <= ROUNDS; ++round)); do
  for cfg in "linear 1" "linear 2" "dnn 1" "dnn 2" "fit-dnn 1" "fit-dnn 2" \
             "linear 1 ps" "linear 2 ps" "dnn 1 ps" "dnn 2 ps"; do
    set -- $cfg
    steps=$STEPS
    [[ $1 == linear ]] && steps=$LINEAR_STEPS
    if [[ ${3:-} == ps ]]; then
      "$BUILD/cli/lockstep" launch --workers "$2" --ps 1 -- "$BIN" --model "$1" --steps "$steps" \
        --strategy ps 2>/dev/null | sed -n 's/^\[chief\] //p' | grep 'steps/s=' >>"$out"
    else
      "$BIN" --model "$1" --replicas "$2" --steps "$steps" 2>/dev/null >>"$out"
    fi
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split()[1:])
    runs[(line.split()[0], int(f["replicas"]))].append((float(f["steps/s"]), float(f["examples/s"])))
print("| model | replicas | steps/s (median, range) | examples/s (median) |")
print("|---|---:|---:|---:|")
for (model, r), v in runs.items():
    s = sorted(x[0] for x in v)
    print(f"| {model} | {r} | {statistics.median(s):,.1f} ({s[0]:,.1f}–{s[-1]:,.1f}) | "
          f"{statistics.median(x[1] for x in v):,.0f} |")
PY
