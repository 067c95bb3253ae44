#!/usr/bin/env bash
# Issue #23, item 4: one run at a time in a --checkpoint-dir. A second run
# is refused with the holder named (pid, host) and a non-zero exit, and
# touches nothing; after the holder is killed (kill -9), the next run takes
# the lock over and says so.
#
# usage: checkpoint_dir_lock.sh LOCKSTEP_BINARY WORK_DIR
source "$(dirname "$0")/lib.sh"
ck=$work/ck
long=(train --epochs 100000 --steps-per-epoch 20 --save-freq 10 --verbose 0 --checkpoint-dir "$ck")

"$bin" "${long[@]}" >"$work/first.log" 2>&1 &
first=$!
wait_for "$ck/.lock" "^pid $first on " 60 || fail "the first run did not take the lock: $(cat "$work/first.log")"

"$bin" train --epochs 1 --steps-per-epoch 5 --seed 8 --verbose 0 --checkpoint-dir "$ck" \
  >"$work/second.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "a second run in the same directory exited with $rc, not 1: $(cat "$work/second.log")"
grep -qF "is in use by another run (pid $first on " "$work/second.log" ||
  fail "the refusal does not name the holder: $(cat "$work/second.log")"
kill -0 "$first" 2>/dev/null || fail "the first run died: $(cat "$work/first.log")"
echo "a second run was refused while pid $first held the directory"

kill -9 "$first"
wait "$first" 2>/dev/null
"$bin" "${long[@]}" >"$work/third.log" 2>&1 &
third=$!
wait_for "$work/third.log" "taking over the lock of pid $first on .*, which is gone" 60 ||
  fail "the takeover of a dead run's lock was not said: $(cat "$work/third.log")"
wait_for "$ck/.lock" "^pid $third on " 60 || fail "the third run does not hold the lock"
kill -9 "$third"
wait "$third" 2>/dev/null
echo PASS
