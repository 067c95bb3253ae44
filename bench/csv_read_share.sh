#!/usr/bin/env bash
# What reading a CSV table costs a training run against one epoch of it
# (issue #38's goal: < 10%). Writes the 50,000-row table of
# docs/benchmarks.md ("Your own data"), then trains on it ROUNDS times:
# the read is the train command's own "Read N rows of FILE in S s." line
# (file to normalised tensors), the epoch is the training steps of epochs 2
# and 3 (steps x time per step: the validation pass left out, so the share
# is if anything overstated).
#
#   bench/csv_read_share.sh            # ROUNDS=5 BUILD=build/release
set -euo pipefail
BUILD=${BUILD:-build/release}
ROUNDS=${ROUNDS:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$BUILD/cli/own_data_writer" "$dir" 50000 >/dev/null
grep -m1 'model name' /proc/cpuinfo | sed 's/^.*: /CPU: /'
printf '%-6s %10s %10s %8s\n' round read_s epoch_s share
shares=()
for round in $(seq "$ROUNDS"); do
  out=$("$BUILD/cli/lockstep" train --data "$dir/table.csv" --epochs 3 --seed 1 --verbose 2)
  read_s=$(sed -n 's/^Read [0-9]* rows of .* in \([0-9.]*\) s\.$/\1/p' <<<"$out")
  epoch_s=$(grep -E '^[0-9]+/[0-9]+ - ' <<<"$out" | tail -n 2 |
    sed -E 's#^([0-9]+)/[0-9]+ - [^-]+ - ([0-9.]+)(us|ms)/step.*#\1 \2 \3#' |
    awk '{ t = $1 * $2 * ($3 == "ms" ? 1e-3 : 1e-6); s += t } END { printf "%.3f", s / NR }')
  share=$(awk -v r="$read_s" -v e="$epoch_s" 'BEGIN { printf "%.1f%%", 100 * r / e }')
  printf '%-6s %10s %10s %8s\n' "$round" "$read_s" "$epoch_s" "$share"
  shares+=("${share%\%}")
done
# The median and the range over the rounds (the goal is on the median: one
# round's read is a single sample of ~20 ms, the epoch a mean of 625 steps).
printf '%s\n' "${shares[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "share over %d rounds: median %.1f%%, min %.1f%%, max %.1f%%\n", NR, m, v[1], v[NR] }'
