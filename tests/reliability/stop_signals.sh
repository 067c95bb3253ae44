#!/usr/bin/env bash
# Issue #23, items 14 and 15: SIGTERM or SIGINT stops `lockstep train` after
# the step in flight, with a backup of that step, a message and exit
# 128 + signal; the rerun resumes there and ends bitwise equal to an
# uninterrupted run. Ctrl-C on `lockstep launch` stops every worker the same
# way, at a step they agree on, says the user interrupted it, exits 130, and
# the relaunch resumes bitwise too.
#
# usage: stop_signals.sh LOCKSTEP_BINARY WORK_DIR
source "$(dirname "$0")/lib.sh"
args=(train --epochs 2 --save-freq 50 --verbose 0)
weights_of() { "$bin" inspect "$1" | grep crc32c || fail "inspect $1 failed"; }
# first_backup DIR PID: waits until DIR holds a backup (while PID runs).
first_backup() {
  local until=$((SECONDS + 60))
  while ((SECONDS < until)); do
    ls "$1"/backup/backup-*.safetensors >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

"$bin" "${args[@]}" --checkpoint-dir "$work/ref" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted run failed: $(cat "$work/ref.log")"
reference=$(weights_of "$work/ref/model.safetensors")

for sig in TERM INT; do
  ck=$work/$sig
  "$bin" "${args[@]}" --checkpoint-dir "$ck" >"$work/$sig.1.log" 2>&1 &
  pid=$!
  first_backup "$ck" $pid || fail "SIG$sig: no backup appeared: $(cat "$work/$sig.1.log")"
  kill -$sig $pid
  wait $pid
  rc=$?
  want=$((128 + $(kill -l $sig)))
  [ $rc -eq $want ] || fail "SIG$sig: exit $rc, not $want: $(cat "$work/$sig.1.log")"
  grep -qE "stopped by SIG$sig after step [0-9]+; a backup of that step is in --checkpoint-dir" \
    "$work/$sig.1.log" || fail "SIG$sig: no message: $(cat "$work/$sig.1.log")"
  step=$(sed -n "s/.*after step \([0-9]*\).*/\1/p" "$work/$sig.1.log")
  "$bin" "${args[@]}" --checkpoint-dir "$ck" >"$work/$sig.2.log" 2>&1 ||
    fail "SIG$sig: the rerun failed: $(cat "$work/$sig.2.log")"
  [ "$(weights_of "$ck/model.safetensors")" = "$reference" ] ||
    fail "SIG$sig: the resumed model differs from the uninterrupted run's"
  echo "SIG$sig: stopped after step $step, exit $rc; the rerun resumed and matches bitwise"
done

# Ctrl-C on launch: SIGINT to launch alone (a terminal would send it to
# launch's process group; the workers are in their own).
launch=("$bin" launch --workers 2 -- "$bin" "${args[@]}")
"${launch[@]}" --checkpoint-dir "$work/mw-ref" >"$work/mw-ref.log" 2>&1 ||
  fail "the uninterrupted launch failed: $(cat "$work/mw-ref.log")"
mw_reference=$(weights_of "$work/mw-ref/model.safetensors")
"${launch[@]}" --checkpoint-dir "$work/mw" >"$work/mw.1.log" 2>&1 &
pid=$!
first_backup "$work/mw" $pid || fail "launch: no backup appeared: $(cat "$work/mw.1.log")"
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "launch: exit $rc, not 130: $(cat "$work/mw.1.log")"
grep -q "stopped by the user's interrupt" "$work/mw.1.log" || fail "launch: $(cat "$work/mw.1.log")"
grep -q "exited with code" "$work/mw.1.log" && fail "launch called the stop a failure: $(cat "$work/mw.1.log")"
steps=$(sed -n "s/.*stopped by SIGTERM after step \([0-9]*\).*/\1/p" "$work/mw.1.log" | sort -u)
[ "$(echo "$steps" | wc -l)" -eq 1 ] && [ -n "$steps" ] ||
  fail "launch: the workers did not stop at one step: $(cat "$work/mw.1.log")"
"${launch[@]}" --checkpoint-dir "$work/mw" >"$work/mw.2.log" 2>&1 ||
  fail "launch: the relaunch failed: $(cat "$work/mw.2.log")"
[ "$(weights_of "$work/mw/model.safetensors")" = "$mw_reference" ] ||
  fail "launch: the resumed model differs from the uninterrupted launch's"
echo "launch: Ctrl-C stopped both workers after step $steps, exit 130; relaunch matches bitwise"
echo PASS
