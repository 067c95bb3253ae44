#!/usr/bin/env bash
# The mixed-precision header says what really runs (issue #36): `lockstep
# train --mixed-precision bfloat16` on the small CNN for two steps with
# oneDNN's verbose log (ONEDNN_VERBOSE=1, one line per primitive run, naming
# its implementation and its operands' data types), then:
#   native    the header says "native bfloat16: oneDNN <impl>"; the bfloat16
#             matmuls run on <impl> (or, for some shapes, another bf16 or AMX
#             kernel oneDNN picks), every convolution and pooling runs on
#             bfloat16 operands, none on float32. Exits 77 (CTest: skipped,
#             never passed) where the CPU has no avx512_bf16.
#   emulated  oneDNN is held below bfloat16 (ONEDNN_MAX_CPU_ISA=AVX2, as
#             on a CPU without the instructions): the header says
#             "emulated: ... float32 is faster here" and no primitive
#             runs on bfloat16.
#
# usage: bfloat16_kernels_test.sh LOCKSTEP_BINARY native|emulated
set -uo pipefail
bin=$1
mode=$2
fail() {
  echo "FAIL: $*" >&2
  echo "--- header and a sample of the log:" >&2
  grep -v '^onednn_verbose' "$log" >&2
  grep '^onednn_verbose,exec' "$log" | awk -F, '{print $4, $5, $7}' | sort | uniq -c | head -20 >&2
  exit 1
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [[ $mode == native ]]; then
  if ! grep -q avx512_bf16 /proc/cpuinfo; then
    echo "skipped: this CPU has no avx512_bf16 (grep avx512_bf16 /proc/cpuinfo), so the native"
    echo "bfloat16 kernels cannot run here; the emulated case is tested instead"
    exit 77
  fi
else
  export ONEDNN_MAX_CPU_ISA=AVX2
fi
ONEDNN_VERBOSE=1 OMP_NUM_THREADS=1 "$bin" train --model cnn --mixed-precision bfloat16 \
  --strategy one-device --epochs 1 --steps-per-epoch 2 --batch-size 32 --test-steps 1 \
  --verbose 0 >"$log" 2>&1 || fail "train exited with $?"
header=$(grep '^Mixed precision:' "$log") || fail "no mixed-precision header"
echo "$header"
exec_lines() { grep '^onednn_verbose,exec' "$log" | awk -F, -v op="$1" '$4 == op'; }
[[ -n $(exec_lines convolution) ]] || fail "no convolution ran through oneDNN"
if [[ $mode == native ]]; then
  impl=$(sed -n 's/^Mixed precision: mixed_bfloat16 (native bfloat16: oneDNN \(.*\))$/\1/p' <<<"$header")
  [[ -n $impl ]] || fail "the header does not say native bfloat16 on a CPU with avx512_bf16"
  [[ $impl == *bf16* || $impl == *amx* ]] || fail "the named implementation '$impl' is not a bfloat16 one"
  matmuls=$(exec_lines matmul | awk -F, '$7 ~ /src_bf16/')
  [[ -n $matmuls ]] || fail "no bfloat16 matmul ran"
  awk -F, -v impl="$impl" '$5 == impl {seen = 1} END {exit !seen}' <<<"$matmuls" ||
    fail "no bfloat16 matmul ran on the header's implementation $impl"
  # oneDNN may pick another bfloat16 kernel for some shapes (AMX machines).
  awk -F, '$5 !~ /bf16|amx/ {bad = 1} END {exit bad}' <<<"$matmuls" ||
    fail "a bfloat16 matmul ran on an implementation without bfloat16 instructions"
  for op in convolution pooling_v2; do
    lines=$(exec_lines $op)
    [[ -n $lines ]] || fail "no $op ran"
    awk -F, '$7 ~ /src_f32|diff_dst_f32/ {bad = 1} END {exit bad}' <<<"$lines" ||
      fail "a $op ran on float32 operands under the native header"
    awk -F, '$5 !~ /bf16|amx/ {bad = 1} END {exit bad}' <<<"$lines" ||
      fail "a $op ran on an implementation without bfloat16 instructions"
  done
  echo "native: $(exec_lines matmul | wc -l) matmuls on $impl, every convolution and pooling in bfloat16"
else
  [[ $header == *"(emulated: "*"; float32 is faster here)" ]] ||
    fail "the header does not say emulated where oneDNN has no bfloat16 instructions"
  if grep '^onednn_verbose,exec' "$log" | grep -q bf16; then
    fail "a primitive ran on bfloat16 under the emulated header"
  fi
  echo "emulated: no oneDNN primitive ran on bfloat16"
fi
