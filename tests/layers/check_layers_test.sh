#!/usr/bin/env bash
# Proves that scripts/check_layers.py catches what it is there to catch: on a
# small synthetic tree laid out like the repository (with the repository's own
# docs/architecture.md), an upward/sideways include of a public header and an
# include of another layer's private header each fail, named by file, line
# and reason, while a transitive include, a same-folder include, a
# third-party header and a commented-out include pass; without those two
# files the tree passes; a missing or headless layer table fails clearly.
#
# usage: check_layers_test.sh CHECK_LAYERS_PY ARCHITECTURE_MD
set -euo pipefail
checker=$1
table=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# run: the checker on the synthetic tree; sets $rc and $out (stdout+stderr).
run() {
  rc=0
  out=$(python3 "$checker" --root "$work" "$@" 2>&1) || rc=$?
}
# expect TEXT: the last run's output holds TEXT (fixed string).
expect() {
  grep -qF -- "$1" <<<"$out" || fail "expected '$1' in the output of the checker (exit $rc):
$out"
}

mkdir -p "$work/docs" "$work/src/core" "$work/src/optim" "$work/src/nn"
cp "$table" "$work/docs/architecture.md"
cat >"$work/src/core/a.cc" <<'EOF'
#include "lockstep/core/x.h"
#include "a.h"
#include <nlohmann/json.hpp>
// #include "lockstep/train/model.h"  (a comment: not an include)
EOF
cat >"$work/src/optim/b.cc" <<'EOF'
// optim reaching sideways into comm: must fail.
#include <vector>
#include "lockstep/comm/communicator.h"
EOF
cat >"$work/src/nn/c.cc" <<'EOF'
#include "lockstep/tensor/tensor.h"
EOF
cat >"$work/src/optim/d.cc" <<'EOF'
#include "lockstep/optim/optimizers.h"
#include "tensor/ops/loops.h"
EOF

echo "== a sideways include and a private header"
run
[ "$rc" -eq 1 ] || fail "expected exit 1 on two bad includes, got $rc:
$out"
expect "src/optim/b.cc:3: layer 'optim' includes 'lockstep/comm/communicator.h' (layer 'comm'), but optim depends on: autodiff"
expect "src/optim/d.cc:2: layer 'optim' includes private header 'tensor/ops/loops.h' of layer 'tensor'; only tensor's own sources may"
for good in a.cc c.cc; do
  ! grep -qF "$good:" <<<"$out" || fail "$good is allowed but was reported:
$out"
done
[ "$(grep -c '^src/' <<<"$out")" -eq 2 ] || fail "expected exactly two violations:
$out"
echo "ok: both named with file, line and reason; the allowed includes pass"

echo "== without the two bad files"
rm "$work/src/optim/b.cc" "$work/src/optim/d.cc"
run
[ "$rc" -eq 0 ] || fail "expected exit 0 on a clean tree, got $rc:
$out"
expect "2 files scanned"
echo "ok: $out"

echo "== a missing table"
run --table "$work/docs/no-such-file.md"
[ "$rc" -eq 2 ] || fail "a missing table: expected exit 2 (the table is unreadable), got $rc:
$out"
expect "no-such-file.md: cannot read the layer table"
echo "ok: $out"

echo "== a table without its '## Layers' section"
sed -i 's/^## Layers/## Something else/' "$work/docs/architecture.md"
run
[ "$rc" -eq 2 ] || fail "no '## Layers': expected exit 2 (the table is unreadable), got $rc:
$out"
expect "no '## Layers' section"
echo "ok: $out"
echo PASS
