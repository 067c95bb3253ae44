#!/usr/bin/env bash
# Under mpirun only the chief draws the live progress bar (issue #38).
# OpenMPI gives every rank a terminal of its own, even when mpirun's output
# goes to a file, so each rank used to draw its ANSI bar into the same log.
# Now rank 0 (the chief) draws it and rank 1 prints Keras's one-line form.
#
#   mpirun_bar_test.sh MPIEXEC LOCKSTEP WORK_DIR
#
# Exits 77 (skipped, not passed) when this mpirun gives rank 0 no terminal:
# there is then no bar to tell apart.
set -uo pipefail
mpiexec=$1 bin=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() {
  echo "FAIL: $*"
  exit 1
}
# Each rank's output in its own file (--tag-output would splice rank 1's
# lines into the middle of rank 0's bar, which ends no line until it is
# done): OpenMPI writes OUT/1/rank.N/stdout.
"$mpiexec" -n 2 --oversubscribe --output-filename out "$bin" train --strategy multi-worker \
  --epochs 1 --steps-per-epoch 20 --verbose 1 >log 2>&1 </dev/null || fail "the job failed"
rank0=$(find out -path '*rank.0*' -name stdout | head -1)
rank1=$(find out -path '*rank.1*' -name stdout | head -1)
[[ -f $rank0 && -f $rank1 ]] || fail "no per-rank output under $work/out"
if ! grep -q $'\r' "$rank0"; then
  echo "SKIP: this mpirun gave rank 0 no terminal, so it drew no bar either"
  exit 77
fi
grep -q $'[\r\x1b]' "$rank1" && fail "rank 1 (not the chief) drew a bar: $(cat -A "$rank1" | head -5)"
grep -q '^20/20 - ' "$rank1" || fail "rank 1 printed no one-line epoch summary: $(cat "$rank1")"
echo "PASS: only the chief drew the bar"
