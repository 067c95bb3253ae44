#!/usr/bin/env bash
# A parameter-server job started by hand, as a cluster manager would start
# it: `lockstep ps` and `lockstep worker` each with their own TF_CONFIG and
# the job's token, then the chief's `lockstep train --strategy
# parameter-server`. The chief trains and evaluates; when it ends the job,
# the serving tasks exit 0 by themselves. Then the refusals: a serving
# command whose TF_CONFIG names another role, and one without TF_CONFIG.
#
# usage: ps_by_hand_test.sh LOCKSTEP_BINARY WORK_DIR
set -uo pipefail
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
export LOCKSTEP_JOB_TOKEN=ps-by-hand-token OMP_NUM_THREADS=1

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done
  exit 1
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
chief=$(free_port)
worker=$(free_port)
ps=$(free_port)
cluster="{\"cluster\": {\"chief\": [\"127.0.0.1:$chief\"], \"worker\": [\"127.0.0.1:$worker\"], \"ps\": [\"127.0.0.1:$ps\"]}"
tf_config() { echo "$cluster, \"task\": {\"type\": \"$1\", \"index\": 0}}"; }

TF_CONFIG=$(tf_config ps) "$bin" ps >"$work/ps.log" 2>&1 &
ps_pid=$!
TF_CONFIG=$(tf_config worker) "$bin" worker >"$work/worker.log" 2>&1 &
worker_pid=$!
TF_CONFIG=$(tf_config chief) timeout 240 "$bin" train --strategy parameter-server --epochs 1 \
  --steps-per-epoch 30 --verbose 2 >"$work/chief.log" 2>&1 || fail "the chief exited with $?"
grep -Eq "^30/30 - .* - loss: [0-9.]+ .* - staleness: 0\.0000" "$work/chief.log" ||
  fail "no epoch line with zero staleness (one worker) in the chief's output"
grep -Eq "parameter servers: 30 optimizer steps" "$work/chief.log" ||
  fail "the parameter servers did not count 30 optimizer steps"
grep -Eq "test accuracy: 0\.[5-9]" "$work/chief.log" || fail "no test accuracy >= 0.5"
for p in $ps_pid $worker_pid; do
  for _ in $(seq 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$p" 2>/dev/null && { kill -9 "$p"; fail "task $p still serving 30 s after the job ended"; }
  wait "$p" || fail "task $p exited with $?"
done

# The role comes from TF_CONFIG: `lockstep worker` on a ps task is refused.
out=$(TF_CONFIG=$(tf_config ps) "$bin" worker 2>&1) && fail "lockstep worker ran as a ps task"
grep -q "TF_CONFIG's task.type is \"ps\"; run lockstep ps for it" <<<"$out" ||
  fail "unexpected refusal: $out"
out=$(env -u TF_CONFIG "$bin" ps 2>&1) && fail "lockstep ps ran without TF_CONFIG"
grep -q "lockstep ps: no TF_CONFIG" <<<"$out" || fail "unexpected refusal: $out"
echo PASS
