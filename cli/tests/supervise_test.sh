#!/usr/bin/env bash
# `lockstep supervise` with real processes (issue #40, item 1: a job started
# by hand, one supervisor per worker as each host would run it):
#
# 1. Two workers, each under its own supervisor with its own TF_CONFIG; one
#    worker killed (SIGKILL) after its first backup. Its supervisor restarts
#    it; the other worker fails when it loses its peer and its supervisor
#    restarts it too; both resume from their backups and the job ends with a
#    model bitwise equal to an uninterrupted supervised job's.
# 2. A crash loop (codes 3, 4, 5 at starts 0, 1, 2) with --max-restarts 2:
#    two restarts, then exit code 3 naming the first failure; the count is
#    kept in the state folder, so a supervisor started again on it gives up
#    at once (without running the command) with the same first cause, and
#    removing the file starts the count again.
#
# usage: supervise_test.sh LOCKSTEP_BINARY WORK_DIR
set -uo pipefail
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1 LOCKSTEP_JOB_TOKEN=supervised-by-hand
train=(lockstep train --strategy multi-worker --epochs 3 --steps-per-epoch 60 --verbose 0
  --save-freq 7)

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -25 "$f" >&2; done
  exit 1
}
weights_of() { "$bin" inspect "$1" | grep crc32c || fail "inspect $1 failed"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A job of two supervised workers with --checkpoint-dir $1 (the chief
# writes the backups, and sends the last to the other worker when they
# resume); the supervisors' pids in $pids.
start_job() {
  pids=()
  local dir=$1 p0 p1
  p0=$(free_port)
  p1=$(free_port)
  local cluster="{\"cluster\": {\"worker\": [\"127.0.0.1:$p0\", \"127.0.0.1:$p1\"]}"
  for i in 0 1; do
    TF_CONFIG="$cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
      "$bin" supervise --max-restarts 2 -- "${train[@]}" --checkpoint-dir "$dir" \
      >"$work/$(basename "$dir")-$i.log" 2>&1 &
    pids+=($!)
  done
}

# The uninterrupted job.
start_job "$work/ref"
for p in "${pids[@]}"; do wait "$p" || fail "an uninterrupted supervised worker exited with $?"; done
reference=$(weights_of "$work/ref/model.safetensors")

# 1. Worker 1 killed after its first backup.
start_job "$work/run"
run=("${pids[@]}")
for _ in $(seq 600); do
  [[ -n $(find "$work/run" -name '*.safetensors' -path '*backup*' 2>/dev/null) ]] && break
  kill -0 "${run[1]}" 2>/dev/null || break
  sleep 0.05
done
victim=$(pgrep -P "${run[1]}" | head -1)
[[ -n $victim ]] || fail "worker 1 ended (or never started) before the first backup appeared"
kill -9 "$victim"
for p in "${run[@]}"; do wait "$p" || fail "a supervised worker exited with $? after the kill"; done
grep -q "lockstep supervise: restart 1 of 2 after the worker was killed by signal 9 (Killed); it resumes from its last backup in $work/run" \
  "$work/run-1.log" || fail "worker 1's supervisor did not say the restart"
grep -q "lockstep supervise: restart 1 of 2 after the worker exited with code" "$work/run-0.log" ||
  fail "worker 0's supervisor did not restart it when it lost its peer"
for i in 0 1; do
  grep -q "BackupAndRestore: resuming from" "$work/run-$i.log" || fail "worker $i did not resume"
  [[ -e $work/run/supervisor-worker-$i.json ]] && fail "worker $i's count was left after success"
done
[[ $(weights_of "$work/run/model.safetensors") == "$reference" ]] ||
  fail "the restarted job's model differs from the uninterrupted job's"
echo "killed worker: both supervisors restarted their workers; the model bitwise equal to the uninterrupted job's"

# 2. A crash loop, counted in the state folder.
loop=(sh -c 'touch "$0/ran.$LOCKSTEP_RESTART_COUNT"; exit $((3 + LOCKSTEP_RESTART_COUNT))' "$work")
"$bin" supervise --max-restarts 2 --state-dir "$work/state" -- "${loop[@]}" >"$work/loop.log" 2>&1
code=$?
[[ $code == 3 ]] || fail "the crash loop exited with $code, not the first failure's 3"
for i in 0 1 2; do
  [[ -e $work/ran.$i ]] || fail "start $i of the crash loop did not run (a restart said and not done)"
done
[[ $(grep -c "lockstep supervise: restart [12] of 2 after the worker exited with code [34]" "$work/loop.log") == 2 ]] ||
  fail "not two restarts"
grep -q "lockstep supervise: giving up after 2 restarts; the first failure: the worker exited with code 3; remove $work/state/supervisor-task.json to start counting again" \
  "$work/loop.log" || fail "the first failure is not named when giving up"
rm -f "$work"/ran.*
"$bin" supervise --max-restarts 2 --state-dir "$work/state" -- "${loop[@]}" >"$work/again.log" 2>&1
code=$?
[[ $code == 3 ]] || fail "a supervisor started again on a used-up count exited with $code"
ls "$work"/ran.* >/dev/null 2>&1 && fail "a supervisor started again on a used-up count ran the command"
grep -q "counts 2 restarts of 2 used; the first failure: the worker exited with code 3" \
  "$work/again.log" || fail "the kept count is not said"
rm "$work/state/supervisor-task.json"
"$bin" supervise --max-restarts 0 --state-dir "$work/state" -- "${loop[@]}" >/dev/null 2>&1
[[ -e $work/ran.0 ]] || fail "removing the count did not start it again"
echo "crash loop: 2 restarts, exit code 3 naming the first failure; the count kept across supervisors"
