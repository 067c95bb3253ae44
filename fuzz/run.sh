#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 60) from its committed seeds
# (fuzz/corpus/<target>, never written to) plus a working corpus under the
# build tree, under ASan and UBSan, and prints each one's executions per
# second and coverage. Exits non-zero on any finding (its reproducer is left
# in BUILD_DIR/fuzz-findings/).
#
#   fuzz/run.sh BUILD_DIR [SECONDS]
set -uo pipefail
build=$1
seconds=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
findings=$build/fuzz-findings
mkdir -p "$findings"
failed=0
printf "%-12s %10s %10s %8s %8s\n" target runs "exec/s" cov ft
for target in safetensors idx npy csv csv_table tf_config store_frames keras_config image hdf5 rpc_frames; do
  work=$build/fuzz-corpus/$target
  mkdir -p "$work"
  log=$build/fuzz-$target.log
  # Each store input is a new TCP connection: past ~28k of them loopback's
  # ephemeral ports come round again while earlier connections of the same
  # ports are still in TIME_WAIT, and connect() stalls for reasons that are
  # not the store's. So that target is bounded by executions too.
  extra=()
  [ "$target" = store_frames ] && extra=(-runs=20000)
  # Model configs are a few KiB (the seeds are Keras's own, 2-7 KiB).
  max_len=1024
  [ "$target" = keras_config ] && max_len=8192
  # Image seeds are up to ~2.5 KiB (small JPEGs and PNGs of the interop fixtures).
  [ "$target" = image ] && max_len=4096
  # HDF5 seeds are Keras weights files and the probe's variants, up to 72 KiB.
  [ "$target" = hdf5 ] && max_len=81920
  # -malloc_limit_mb: an allocation past it is a finding (a reader that
  # believes a header); -rss_limit_mb the same for total memory.
  "$build/fuzz/${target}_fuzz" "$work" "$here/corpus/$target" -max_total_time="$seconds" "${extra[@]}" \
    -print_final_stats=1 -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=30 -max_len=$max_len \
    -artifact_prefix="$findings/$target-" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf "%-12s %10s %10s %8s %8s\n" "$target" "${runs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}"
  if [ $rc -ne 0 ]; then
    echo "fuzz: $target found a problem (exit $rc); see $log and $findings" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$log" >&2
    failed=1
  fi
done
exit $failed
