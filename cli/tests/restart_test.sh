#!/usr/bin/env bash
# `lockstep launch --max-restarts` with real processes (issue #40, item 1):
#
# 1. A worker killed (SIGKILL) mid-training, after its first backup: launch
#    names the failure, stops the other worker, starts the job again; the
#    workers resume from their backups and the job ends with a model
#    bitwise equal to an uninterrupted launch's (inspect's CRC32Cs). The
#    chief's --step-log, compared with the uninterrupted job's
#    (step_losses.py): after the kill the job resumed at the step after its
#    backup, every step's loss bitwise the uninterrupted job's, none
#    skipped (the log shows the resume when the chief had logged steps past
#    the backup; killed right after it, the steps just go on). The time from the kill to the restarted workers' resume is
#    printed.
# 2. A crash loop: a command that fails at every start, with a different
#    code each time (3, 4, 5): launch restarts it twice, then gives up and
#    exits with the first failure's code, naming it.
# 3. A job that re-forms (its workers exit 75, as at the backup where a job
#    that went on without a worker takes it back): started again at once
#    with LOCKSTEP_REJOIN=1, not counted (it runs without --max-restarts);
#    a command that asks for that at every start is stopped after 10.
#
# usage: restart_test.sh LOCKSTEP_BINARY WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1
train=(lockstep train --epochs 3 --steps-per-epoch 60 --verbose 0 --save-freq 7)

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -25 "$f" >&2; done
  exit 1
}
weights_of() { "$bin" inspect "$1" | grep crc32c || fail "inspect $1 failed"; }

# The uninterrupted job.
"$bin" launch --workers 2 -- "${train[@]}" --checkpoint-dir "$work/ref" \
  --step-log "$work/ref_steps.csv" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted job failed"
reference=$(weights_of "$work/ref/model.safetensors")

# 1. Killed after the first backup, restarted by launch.
"$bin" launch --workers 2 --max-restarts 2 -- "${train[@]}" --checkpoint-dir "$work/run" \
  --step-log "$work/run_steps.csv" >"$work/run.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  [[ -n $(find "$work/run" -name '*.safetensors' -path '*backup*' 2>/dev/null) ]] && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.05
done
victim=$(pgrep -P "$launcher" | tail -1)
[[ -n $victim ]] || fail "the job ended (or had no worker) before a backup appeared"
killed_at=$(date +%s%N)
kill -9 "$victim"
for _ in $(seq 3000); do
  grep -q "BackupAndRestore: resuming from" "$work/run.log" && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.02
done
resumed_ms=$((($(date +%s%N) - killed_at) / 1000000))
wait "$launcher" || fail "launch with --max-restarts exited with $?"
grep -q "lockstep launch: worker [01] was killed by signal 9 (Killed); stopping the other workers" \
  "$work/run.log" || fail "the failure is not named"
grep -q "lockstep launch: restart 1 of 2 after worker [01] was killed by signal 9 (Killed): every worker starts again and resumes from its last backup" \
  "$work/run.log" || fail "the restart is not said"
grep -q "BackupAndRestore: resuming from" "$work/run.log" || fail "the restarted workers did not resume"
[[ $(weights_of "$work/run/model.safetensors") == "$reference" ]] ||
  fail "the restarted job's model differs from the uninterrupted job's"
steps=$(python3 "$here/step_losses.py" "$work/ref_steps.csv" "$work/run_steps.csv") ||
  fail "the step logs: $steps"
echo "$steps"
echo "killed worker: restarted and resumed ${resumed_ms} ms after the kill; the model bitwise equal to the uninterrupted job's"

# 2. A crash loop: codes 3, 4, 5 at starts 0, 1, 2.
"$bin" launch --workers 2 --max-restarts 2 -- sh -c 'exit $((3 + LOCKSTEP_RESTART_COUNT))' \
  >"$work/loop.log" 2>&1
code=$?
[[ $code == 3 ]] || fail "the crash loop exited with $code, not the first failure's 3"
[[ $(grep -c "lockstep launch: restart [12] of 2 after worker [01] exited with code" "$work/loop.log") == 2 ]] ||
  fail "not two restarts"
grep -q "lockstep launch: giving up after 2 restarts; the first failure: worker [01] exited with code 3" \
  "$work/loop.log" || fail "the first failure is not named when giving up"
echo "crash loop: 2 restarts, then exit code 3 naming the first failure"

# 3. Re-forming: not a failure, not counted.
"$bin" launch --workers 2 -- sh -c '[ "$LOCKSTEP_REJOIN" = 1 ] && exit 0; exit 75' \
  >"$work/rejoin.log" 2>&1 || fail "a job that re-formed once exited with $?"
grep -q "lockstep launch: the job re-forms to take back a worker left out; every worker starts again (not counted as a restart)" \
  "$work/rejoin.log" || fail "the re-forming is not said"
"$bin" launch --workers 2 -- sh -c 'exit 75' >"$work/rejoin_loop.log" 2>&1
code=$?
[[ $code == 75 ]] || fail "a command that asks to re-form at every start exited with $code, not 75"
grep -q "lockstep launch: the workers asked to re-form the job 11 times in a row (exit code 75 each time); giving up" \
  "$work/rejoin_loop.log" || fail "the endless re-forming is not stopped with its reason"
echo "re-forming: started again at once with LOCKSTEP_REJOIN=1, not counted; an endless one stopped"
