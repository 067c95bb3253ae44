#!/usr/bin/env bash
# mixed_bfloat16 against float32 (issue #21's goal: >= 1.5x the samples/s,
# test accuracy within 0.5 pp over 3 seeds), Lockstep only, same binary:
# the seed MLP at batch 512 (2 epochs) and the small CNN at batch 64 (1
# epoch), MirroredStrategy() (the guide's), for each seed in SEEDS the two
# policies one after the other. Optional: MOBILENET=1 adds MobileNetV2
# alpha 0.35 at 96, batch 64 (timed steps of fit on random images).
# Prints each run and a table: samples/s median (min-max), test accuracy
# mean +- sd, the ratio of the medians.
#
#   bench/mixed_precision.sh [BUILD_DIR]     SEEDS="1 2 3"
set -euo pipefail
BUILD=${1:-build/release}
BIN=$BUILD/bench/workloads
read -r -a SEEDS <<<"${SEEDS:-1 2 3}"
[[ -x "$BIN" ]] || { echo "build $BIN first (--target workloads)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for seed in "${SEEDS[@]}"; do
  for policy in float32 mixed_bfloat16; do
    "$BIN" --workload mlp --batch 512 --epochs 2 --seed "$seed" --policy "$policy" 2>/dev/null |
      grep '^RESULT' | tee -a "$out"
    "$BIN" --workload cnn --batch 64 --epochs 1 --seed "$seed" --policy "$policy" 2>/dev/null |
      grep '^RESULT' | tee -a "$out"
    if [[ ${MOBILENET:-0} == 1 ]]; then
      "$BIN" --workload mobilenet --alpha 0.35 --size 96 --batch 64 --steps 20 --seed "$seed" \
        --policy "$policy" 2>/dev/null | grep '^RESULT' | tee -a "$out"
    fi
  done
done
python3 - "$out" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line.split(" ", 1)[1])
    runs[(r["workload"], r["batch"], r["policy"])].append(r)
print("| workload | batch | policy | samples/s median (min-max) | test accuracy mean +- sd | peak RSS MiB |")
print("|---|---:|---|---:|---:|---:|")
medians = {}
for (w, b, p), v in sorted(runs.items()):
    s = sorted(x["samples_per_s"] for x in v)
    medians[(w, b, p)] = statistics.median(s)
    acc = [x["test_accuracy"] for x in v if "test_accuracy" in x]
    a = (f"{statistics.mean(acc):.4f} +- {statistics.stdev(acc):.4f}" if len(acc) > 1
         else (f"{acc[0]:.4f}" if acc else "-"))
    print(f"| {w} | {b} | {p} | {statistics.median(s):,.0f} ({s[0]:,.0f}-{s[-1]:,.0f}) | {a} | "
          f"{max(x['peak_rss_mib'] for x in v):,.0f} |")
for (w, b, p), m in medians.items():
    if p == "mixed_bfloat16" and (w, b, "float32") in medians:
        print(f"{w} b{b}: mixed_bfloat16 / float32 = {m / medians[(w, b, 'float32')]:.2f}x")
PY
