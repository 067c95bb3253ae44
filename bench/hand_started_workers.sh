#!/usr/bin/env bash
# Two workers of the seed MLP job started by hand on this host (each with its
# own TF_CONFIG), with and without the host-core split, against `lockstep
# launch`: ms/step, three alternating rounds (docs/benchmarks.md, issue #16).
#
#   bench/hand_started_workers.sh [BUILD_DIR]
L=${1:-build/release}/cli/lockstep
C='{"cluster": {"worker": ["127.0.0.1:PORT0", "127.0.0.1:PORT1"]}, "task": {"type": "worker", "index": IDX}}'
hand() {  # extra env
  local p0=$((24000 + RANDOM % 4000)) p1
  p1=$((p0 + 1))
  local c=${C/PORT0/$p0}; c=${c/PORT1/$p1}
  for i in 0 1; do env "$@" TF_CONFIG="${c/IDX/$i}" LOCKSTEP_JOB_TOKEN=bench-token-0123456789 $L train --strategy multi-worker --epochs 1 --steps-per-epoch 200 --verbose 2 > ${TMPDIR:-/tmp}/hw$i.log 2>&1 & done
  wait
  grep -o "[0-9.]*[mu]s/step" ${TMPDIR:-/tmp}/hw0.log | head -1
}
for round in 1 2 3; do
  echo "round $round: by hand, split: $(hand X=1)  by hand, LOCKSTEP_PIN_WORKERS=0: $(hand LOCKSTEP_PIN_WORKERS=0)  launch: $($L launch --workers 2 -- lockstep train --epochs 1 --steps-per-epoch 200 --verbose 2 2>&1 | grep -o '[0-9.]*[mu]s/step' | head -1)"
done
