#!/usr/bin/env bash
# Issue #41: a parameter-server job stops when asked and when it cannot go
# on. Ctrl-C to `lockstep launch --ps` ends the job within seconds (it took
# 40 s and a SIGKILL of the chief, which waited for an epoch its stopped
# workers would never finish), and the rerun resumes from the last whole
# epoch's backup; a chief whose only worker is gone for good fails after
# --timeout, naming the worker (it waited for ever).
#
# usage: ps_stops.sh LOCKSTEP_BINARY WORK_DIR
source "$(dirname "$0")/lib.sh"

# This script's jobs carry a mark in their environment: other tests run
# parameter-server jobs at the same time (ctest -j), and a task of theirs
# must be neither killed nor counted here.
export LOCKSTEP_PS_STOPS_JOB="$work"

# The task of this script's `launch` children whose TF_CONFIG names it TYPE.
task_pid() {
  local p environ
  for p in $(pgrep -f -- "--strategy parameter-server"); do
    environ=$(tr '\0' '\n' </proc/"$p"/environ 2>/dev/null) || continue
    grep -qx "LOCKSTEP_PS_STOPS_JOB=$work" <<<"$environ" || continue
    grep -q "\"type\": *\"$1\"" <<<"$environ" && { echo "$p"; return 0; }
  done
  return 1
}

args=(train --strategy parameter-server --epochs 400 --steps-per-epoch 40 --verbose 2)

# Ctrl-C: the whole job ends promptly, with the chief's word and exit 130.
"$bin" launch --workers 1 --ps 1 -- "$bin" "${args[@]}" --checkpoint-dir "$work/ck" \
  >"$work/int.log" 2>&1 &
launcher=$!
wait_for "$work/int.log" "Epoch 3/" 120 || fail "the job did not reach epoch 3: $(cat "$work/int.log")"
start=$SECONDS
kill -INT $launcher
wait $launcher
rc=$?
took=$((SECONDS - start))
[ $rc -eq 130 ] || fail "Ctrl-C: launch exited $rc: $(tail -20 "$work/int.log")"
[ $took -le 15 ] || fail "Ctrl-C: the job took $took s to stop"
grep -q "stopping the parameter-server job's chief now; the rerun resumes from the backup of the last whole epoch" \
  "$work/int.log" || fail "Ctrl-C: the chief did not say it stopped: $(tail -20 "$work/int.log")"
task_pid chief >/dev/null && fail "Ctrl-C: the chief outlived launch"
echo "ok: Ctrl-C ends a parameter-server job in $took s, exit 130"

# The rerun resumes from the backup (then is stopped the same way).
"$bin" launch --workers 1 --ps 1 -- "$bin" "${args[@]}" --checkpoint-dir "$work/ck" \
  >"$work/rerun.log" 2>&1 &
launcher=$!
wait_for "$work/rerun.log" "BackupAndRestore: resuming from .* at epoch [1-9]" 120 ||
  fail "the rerun did not resume: $(tail -20 "$work/rerun.log")"
kill -INT $launcher
wait $launcher
echo "ok: the rerun resumes from the last backup"

# The only worker killed for good: the chief fails after --timeout 5, naming it.
"$bin" launch --workers 1 --ps 1 -- "$bin" "${args[@]}" --timeout 5 >"$work/lost.log" 2>&1 &
launcher=$!
wait_for "$work/lost.log" "Epoch 2/" 120 || fail "the job did not reach epoch 2: $(cat "$work/lost.log")"
worker=$(task_pid worker) || fail "no worker process found"
kill -9 "$worker"
start=$SECONDS
wait $launcher
rc=$?
took=$((SECONDS - start))
[ $rc -ne 0 ] || fail "a job without workers ended well: $(tail -20 "$work/lost.log")"
[ $took -le 60 ] || fail "a job without workers took $took s to fail"
grep -q "ClusterCoordinator: no worker has answered for 5 s (worker 0 (127.0.0.1:" "$work/lost.log" ||
  fail "the lost worker is not named: $(tail -20 "$work/lost.log")"
echo "ok: a chief whose only worker is gone fails in $took s, naming it"
echo PASS
