#!/usr/bin/env bash
# Issues #16 and #23 (item 10): `lockstep train --checkpoint-dir` refuses to
# resume a run whose backup was written with another model, batch size,
# learning rate, epochs, training data, seed or steps per epoch, naming the
# saved and the given value; --allow-changed-batch-size lets the batch size
# change; the same command resumes.
#
# usage: changed_settings.sh LOCKSTEP_BINARY WORK_DIR
source "$(dirname "$0")/lib.sh"
args=(train --save-freq 5 --verbose 0)
ck=$work/ck
steps=(--epochs 1 --steps-per-epoch 30)

# A run killed (SIGKILL) right after its second backup: writer 1 is run.json.
LOCKSTEP_CRASH_AT=after_rename:3 "$bin" "${args[@]}" "${steps[@]}" --checkpoint-dir "$ck" \
  >"$work/first.log" 2>&1
[ $? -eq 137 ] || fail "the first run was not killed at its second backup: $(cat "$work/first.log")"
ls "$ck"/backup/backup-*.safetensors >/dev/null 2>&1 || fail "no backup after the first run"

# Fashion-MNIST with other labels (every 0 made a 1), for --data-dir.
data=/usr/share/datasets/fashion-mnist
other=$work/other-data
mkdir -p "$other"
for f in "$data"/*; do ln -s "$f" "$other/$(basename "$f")"; done
rm "$other/train-labels-idx1-ubyte.gz"
{ zcat "$data/train-labels-idx1-ubyte.gz" | head -c 8
  zcat "$data/train-labels-idx1-ubyte.gz" | tail -c +9 | tr '\000' '\001'; } |
  gzip >"$other/train-labels-idx1-ubyte.gz"

refused() {  # refused EXPECTED_MESSAGE FLAGS...
  local expected=$1
  shift
  local defaults=()  # the first run's --epochs and --steps-per-epoch, unless changed here
  [[ " $* " == *" --epochs "* ]] || defaults+=(--epochs 1)
  [[ " $* " == *" --steps-per-epoch "* ]] || defaults+=(--steps-per-epoch 30)
  "$bin" "${args[@]}" "${defaults[@]}" --checkpoint-dir "$ck" "$@" >"$work/refused.log" 2>&1
  local rc=$?
  [ $rc -eq 1 ] || fail "resuming with $* exited with $rc, not 1: $(cat "$work/refused.log")"
  grep -qF -- "$expected" "$work/refused.log" ||
    fail "resuming with $*: expected '$expected' in: $(cat "$work/refused.log")"
  echo "refused $*"
}
refused 'a run with --batch-size 64, but this run has --batch-size 32' --batch-size 32
refused 'a run with --model "mlp", but this run has --model "cnn"' --model cnn
refused 'a run with --seed 1337, but this run has --seed 7' --seed 7
refused 'a run with --learning-rate 0.001, but this run has --learning-rate 0.01' --learning-rate 0.01
refused 'a run with --epochs 1, but this run has --epochs 3' --epochs 3
refused 'a run with --steps-per-epoch 30, but this run has --steps-per-epoch 25' --steps-per-epoch 25
refused 'a run with --data-dir "60000 examples, crc32c ' --data-dir "$other"
ls "$ck"/backup/backup-*.safetensors >/dev/null 2>&1 || fail "a refused resume lost the backup"

# The same command resumes and finishes (and deletes its backup).
"$bin" "${args[@]}" "${steps[@]}" --checkpoint-dir "$ck" >"$work/resume.log" 2>&1 ||
  fail "resuming with the same flags failed: $(cat "$work/resume.log")"
grep -q "test accuracy" "$work/resume.log" || fail "the resumed run did not finish"

# Another interrupted run, resumed with another batch size where allowed.
rm -rf "$ck"
LOCKSTEP_CRASH_AT=after_rename:3 "$bin" "${args[@]}" "${steps[@]}" --checkpoint-dir "$ck" \
  >/dev/null 2>&1
"$bin" "${args[@]}" "${steps[@]}" --checkpoint-dir "$ck" --batch-size 32 --allow-changed-batch-size \
  >"$work/allowed.log" 2>&1 || fail "--allow-changed-batch-size was refused: $(cat "$work/allowed.log")"
grep -q "test accuracy" "$work/allowed.log" || fail "the allowed resume did not finish"
echo PASS
