#!/usr/bin/env bash
# Proves that scripts/check_claims.py catches what it is there to catch: on a
# small synthetic tree, a library source that prints (std::cout, fprintf to
# stderr), an architecture document and a README that name a missing file
# each fail, named by file and line, while snprintf, a comment, the sink
# itself, a brace pattern and an upstream project's file pass; without those
# the tree passes.
#
# usage: check_claims_test.sh CHECK_CLAIMS_PY
set -euo pipefail
checker=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
run() {
  rc=0
  out=$(python3 "$checker" --root "$work" 2>&1) || rc=$?
}
expect() {
  grep -qF -- "$1" <<<"$out" || fail "expected '$1' in the output of the checker (exit $rc):
$out"
}
mkdir -p "$work/src/core" "$work/src/train" "$work/docs"
cat >"$work/src/core/log.cc" <<'CC'
void sink() { std::fwrite(p, 1, n, stderr); }
CC
cat >"$work/src/train/quiet.cc" <<'CC'
void f() { std::snprintf(buf, sizeof buf, "%d", 1); }  // std::cout in a comment
CC
cat >"$work/docs/architecture.md" <<'MD'
`train/quiet.cc` and `comm/{inprocess,mpi}/x.cc` and `Model::fit/evaluate/predict`
MD
cat >"$work/README.md" <<'MD'
As Keras's `keras/src/utils/progbar.py`; see `docs/architecture.md`.
MD
run
[ "$rc" = 0 ] || fail "a clean tree fails (exit $rc): $out"
cat >"$work/src/train/loud.cc" <<'CC'
void g() {
  std::cout << "hi";
  std::fprintf(stderr, "x");
}
CC
echo 'See `train/missing.cc`.' >>"$work/docs/architecture.md"
echo 'And `src/gone.cc`.' >>"$work/README.md"
run
[ "$rc" = 1 ] || fail "planted violations pass (exit $rc): $out"
expect "src/train/loud.cc:2: writes past the log sink"
expect "src/train/loud.cc:3: writes past the log sink"
expect "docs/architecture.md:2: names \`train/missing.cc\`"
expect "README.md:2: names \`src/gone.cc\`"
[ "$(grep -c . <<<"$out")" = 4 ] || fail "expected exactly 4 findings: $out"
echo PASS
