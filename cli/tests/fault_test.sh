#!/usr/bin/env bash
# Fault tests of `lockstep train --checkpoint-dir` with real processes:
#
# 1. kill -9 at 20 seeded random moments (half anywhere in the run, half
#    shortly after a backup appeared): the same command run again finishes
#    with a model bitwise equal to an uninterrupted run's (compared through
#    `lockstep inspect`'s CRC32Cs).
# 2. A crash (SIGKILL, LOCKSTEP_CRASH_AT) at each step of the save protocol
#    — before the write, mid-write, before fsync, before the rename, after
#    it: every backup file under its final name loads, and the rerun
#    finishes bitwise equal.
#
# usage: fault_test.sh LOCKSTEP_BINARY WORK_DIR
set -uo pipefail
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
export LOCKSTEP_CPU_DEVICES=2
args=(train --epochs 2 --steps-per-epoch 40 --verbose 0 --save-freq 7)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The model's tensors as inspect lists them (name, dtype, shape, bytes, crc).
weights_of() {
  "$bin" inspect "$1" | grep crc32c || fail "inspect $1 failed"
}

start=$(date +%s%N)
"$bin" "${args[@]}" --checkpoint-dir "$work/ref" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted run failed: $(cat "$work/ref.log")"
duration_ms=$((($(date +%s%N) - start) / 1000000))
reference=$(weights_of "$work/ref/model.safetensors")
[ -n "$reference" ] || fail "no tensors in the reference model"
echo "uninterrupted run: ${duration_ms} ms"

# Even trials: killed at a random moment of the whole run (data loading,
# training, a backup being written, saving the model). Odd trials: killed
# a random 0-400 ms after the k-th backup appeared, so that resuming is
# exercised whatever this machine's speed today.
RANDOM=20261122
resumed=0
for trial in $(seq 1 20); do
  dir="$work/kill$trial"
  "$bin" "${args[@]}" --checkpoint-dir "$dir" >"$dir.first.log" 2>&1 &
  pid=$!
  if ((trial % 2 == 0)); then
    delay_ms=$(((RANDOM * 32768 + RANDOM) % duration_ms))
    when="after ${delay_ms} ms"
  else
    backups=$((trial % 4 + 1))
    # The newest backup's number (older ones are pruned: max_to_keep = 2).
    newest() {
      ls "$dir"/backup/ 2>/dev/null | sed -n 's/^backup-\([0-9]*\)\.safetensors$/\1/p' |
        sort -n | tail -1
    }
    while kill -0 "$pid" 2>/dev/null; do
      n=$(newest)
      [ -n "$n" ] && [ "$n" -ge "$backups" ] && break
      sleep 0.01
    done
    delay_ms=$((RANDOM % 400))
    when="${delay_ms} ms after backup ${backups}"
  fi
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  "$bin" "${args[@]}" --checkpoint-dir "$dir" >"$dir.log" 2>&1 ||
    fail "trial $trial (killed $when): the rerun failed: $(cat "$dir.log")"
  grep -q "resuming from" "$dir.log" && resumed=$((resumed + 1))
  got=$(weights_of "$dir/model.safetensors")
  [ "$got" == "$reference" ] ||
    fail "trial $trial (killed $when): the model differs from the uninterrupted run's"
  echo "trial $trial: killed $when; $(grep -o 'resuming from .*' "$dir.log" || echo 'started over'); bitwise equal"
done
# The odd trials kill a run that has backups (unless it had already finished).
[ "$resumed" -ge 1 ] || fail "none of the 20 kills left a backup to resume from"
echo "$resumed of 20 kills resumed from a backup"

for stage in before_write mid_write before_fsync before_rename after_rename; do
  dir="$work/$stage"
  # The 3rd file written is the 3rd backup (after batches 7 and 14).
  LOCKSTEP_CRASH_AT="$stage:3" "$bin" "${args[@]}" --checkpoint-dir "$dir" >"$dir.first.log" 2>&1
  rc=$?
  [ "$rc" -eq 137 ] || fail "$stage: expected death by SIGKILL (137), got exit code $rc"
  for f in "$dir"/backup/backup-*.safetensors; do
    [ -e "$f" ] || fail "$stage: no backup left"
    "$bin" inspect "$f" >/dev/null 2>"$dir.inspect.log" ||
      fail "$stage: $f does not load: $(cat "$dir.inspect.log")"
  done
  "$bin" "${args[@]}" --checkpoint-dir "$dir" >"$dir.log" 2>&1 ||
    fail "$stage: the rerun failed: $(cat "$dir.log")"
  [ "$(weights_of "$dir/model.safetensors")" == "$reference" ] ||
    fail "$stage: the model differs from the uninterrupted run's"
  leftovers=$(find "$dir" -name '.*.tmp*' | wc -l)
  [ "$leftovers" -eq 0 ] || fail "$stage: $leftovers temporary files left behind"
  echo "crash $stage: every backup loads; $(grep -o 'resuming from .*' "$dir.log"); bitwise equal"
done
rm -rf "$work"
echo "PASS"
