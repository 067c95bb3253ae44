#!/usr/bin/env bash
# Issue #23, item 5: the backups stay until the final model is written and
# evaluated. A crash right after the model was saved (LOCKSTEP_CRASH_AT:
# writer 1 is run.json, 2 the epoch's backup, 3 the model) is resumed from
# the last backup by the rerun, which trains nothing again and gives the
# uninterrupted run's model bitwise; a crash in the middle of writing the
# model leaves no temporary file once the rerun is done.
#
# usage: backups_outlive_the_model.sh LOCKSTEP_BINARY WORK_DIR
source "$(dirname "$0")/lib.sh"
args=(train --epochs 1 --steps-per-epoch 30 --verbose 2)
weights_of() { "$bin" inspect "$1" | grep crc32c || fail "inspect $1 failed"; }

"$bin" "${args[@]}" --checkpoint-dir "$work/ref" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted run failed: $(cat "$work/ref.log")"
reference=$(weights_of "$work/ref/model.safetensors")
[ -z "$(ls "$work/ref/backup" 2>/dev/null)" ] || fail "a finished run left its backups"

for stage in after_rename mid_write; do
  ck=$work/$stage
  LOCKSTEP_CRASH_AT=$stage:3 "$bin" "${args[@]}" --checkpoint-dir "$ck" >"$work/$stage.1.log" 2>&1
  [ $? -eq 137 ] || fail "$stage: the run was not killed at the model's save: $(cat "$work/$stage.1.log")"
  ls "$ck"/backup/backup-*.safetensors >/dev/null 2>&1 ||
    fail "$stage: the backup was gone before the model was written"
  "$bin" "${args[@]}" --checkpoint-dir "$ck" >"$work/$stage.2.log" 2>&1 ||
    fail "$stage: the rerun failed: $(cat "$work/$stage.2.log")"
  grep -q "^30/30 " "$work/$stage.2.log" && fail "$stage: the rerun trained the epoch again"
  grep -q "resuming from .*backup-1" "$work/$stage.2.log" ||
    fail "$stage: the rerun did not resume: $(cat "$work/$stage.2.log")"
  [ "$(weights_of "$ck/model.safetensors")" = "$reference" ] ||
    fail "$stage: the model differs from the uninterrupted run's"
  leftovers=$(find "$ck" -name '.*.tmp*')
  [ -z "$leftovers" ] || fail "$stage: temporary files were left: $leftovers"
  echo "$stage: resumed from the backup, nothing retrained, bitwise the reference"
done
echo PASS
