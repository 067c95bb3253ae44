#!/usr/bin/env bash
# `srun lockstep train --strategy multi-worker` without srun: two processes
# given the environment srun gives a 2-task step on one node (SLURM_PROCID,
# SLURM_NTASKS, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE) find each
# other through it (SlurmClusterResolver: the node's name, ports from
# LOCKSTEP_SLURM_PORT_BASE), train one model together over Gloo and agree
# on the test accuracy. The node is named by its address, 127.0.0.1: the
# fresh root CI builds in has no /etc/hosts, so "localhost" resolves nowhere.
# The step shows both tasks the node's two GPUs (SLURM_STEP_GPUS=0,1, no
# per-task binding): each takes its own, CUDA_VISIBLE_DEVICES=its local id
# (there is no GPU here: what is checked is the share each task takes).
#
# usage: slurm_test.sh LOCKSTEP_BINARY WORK_DIR
set -uo pipefail
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done
  exit 1
}
# Two consecutive free ports (the node's tasks get base and base + 1): a
# free port from the system whose neighbour is free too, tried until one is.
base=$(python3 - <<'PY'
import socket
for _ in range(200):
    a = socket.socket()
    a.bind(("127.0.0.1", 0))
    port = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", port + 1))
    except OSError:
        continue
    finally:
        a.close()
        b.close()
    print(port)
    break
PY
)
[[ -n $base ]] || fail "found no two consecutive free ports"
export SLURM_NTASKS=2 SLURM_STEP_NODELIST=127.0.0.1 SLURM_STEP_TASKS_PER_NODE=2 \
  SLURM_JOB_NODELIST=127.0.0.1 SLURM_TASKS_PER_NODE=2 LOCKSTEP_SLURM_PORT_BASE=$base \
  LOCKSTEP_JOB_TOKEN=slurm-test-token-0123456789 OMP_NUM_THREADS=1 SLURM_STEP_GPUS=0,1
for rank in 0 1; do
  SLURM_PROCID=$rank timeout 120 "$bin" train --strategy multi-worker --epochs 1 \
    --steps-per-epoch 20 --verbose 0 >"$work/task$rank.log" 2>&1 &
  pids[$rank]=$!
done
for rank in 0 1; do wait "${pids[$rank]}" || fail "task $rank exited with $?"; done
grep -q "Worker 0 of 2 (chief)" "$work/task0.log" || fail "task 0 is not the chief of 2 workers"
grep -q "Worker 1 of 2" "$work/task1.log" || fail "task 1 is not worker 1 of 2"
for rank in 0 1; do
  grep -q "this task uses GPUs CUDA_VISIBLE_DEVICES=$rank (Slurm: local task $rank of 2 on node 127.0.0.1, SLURM_STEP_GPUS=0,1" \
    "$work/task$rank.log" || fail "task $rank did not take GPU $rank of the node's two"
done
a0=$(grep -o "test accuracy: [0-9.]*" "$work/task0.log")
a1=$(grep -o "test accuracy: [0-9.]*" "$work/task1.log")
[[ -n $a0 && $a0 == "$a1" ]] || fail "the tasks disagree on the test accuracy ($a0 / $a1)"
echo "2 Slurm tasks on 127.0.0.1:$base-$((base + 1)) trained one model: $a0"
