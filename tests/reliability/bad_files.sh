#!/usr/bin/env bash
# Issue #23, items 6, 7 and 8: anything that is not a regular file where a
# checkpoint or data file should be is named (never a hang on a FIFO, never
# a terabyte allocation for a directory), and a resume falls back past it
# to the previous good backup; a data file whose header claims more than it
# holds is named with the offset, with memory bounded by the data present.
#
# usage: bad_files.sh LOCKSTEP_BINARY WORK_DIR
source "$(dirname "$0")/lib.sh"
weights_of() { "$bin" inspect "$1" | grep crc32c || fail "inspect $1 failed"; }

# inspect: a FIFO and a directory, within 10 s.
mkfifo "$work/fifo.safetensors"
mkdir "$work/dir.safetensors"
for f in fifo dir; do
  timeout 10 "$bin" inspect "$work/$f.safetensors" >"$work/$f.log" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "inspect $f: exit $rc (124: it hung): $(cat "$work/$f.log")"
  grep -qE "is a (FIFO \(named pipe\)|directory), not a regular file" "$work/$f.log" ||
    fail "inspect $f: $(cat "$work/$f.log")"
  echo "ok: inspect names the $f"
done

# A resume past a directory and a FIFO posing as the newest backup.
args=(train --epochs 1 --steps-per-epoch 30 --save-freq 5 --verbose 0)
"$bin" "${args[@]}" --checkpoint-dir "$work/ref" >"$work/ref.log" 2>&1 || fail "$(cat "$work/ref.log")"
reference=$(weights_of "$work/ref/model.safetensors")
for kind in dir fifo; do
  ck=$work/ck-$kind
  LOCKSTEP_CRASH_AT=after_rename:4 "$bin" "${args[@]}" --checkpoint-dir "$ck" >/dev/null 2>&1
  if [ $kind = dir ]; then mkdir "$ck/backup/backup-99.safetensors"; else mkfifo "$ck/backup/backup-99.safetensors"; fi
  timeout 120 "$bin" "${args[@]}" --checkpoint-dir "$ck" >"$work/$kind.log" 2>&1 ||
    fail "resume past a $kind: $(cat "$work/$kind.log")"
  grep -q "skipping a damaged checkpoint: .*backup-99.safetensors: is a .*; falling back" \
    "$work/$kind.log" || fail "resume past a $kind: no fallback said: $(cat "$work/$kind.log")"
  [ "$(weights_of "$ck/model.safetensors")" = "$reference" ] || fail "resume past a $kind: not bitwise"
  echo "ok: a resume falls back past a $kind named like the newest backup"
done

# A resume past a newest backup whose header nests JSON 200,000 deep (issue
# #41: the header's walk overflowed the stack, and the resume crashed).
ck=$work/ck-deep
LOCKSTEP_CRASH_AT=after_rename:4 "$bin" "${args[@]}" --checkpoint-dir "$ck" >/dev/null 2>&1
python3 - "$ck/backup/backup-99.safetensors" <<'PY'
import struct, sys
header = b"[" * 200000
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header)
PY
timeout 120 "$bin" "${args[@]}" --checkpoint-dir "$ck" >"$work/deep.log" 2>&1 ||
  fail "resume past a deep header: $(cat "$work/deep.log")"
grep -q "skipping a damaged checkpoint: .*backup-99.safetensors: the header: byte 136: JSON nested more than 128 levels deep" \
  "$work/deep.log" || fail "resume past a deep header: no fallback said: $(cat "$work/deep.log")"
[ "$(weights_of "$ck/model.safetensors")" = "$reference" ] || fail "resume past a deep header: not bitwise"
echo "ok: a resume falls back past a newest backup whose JSON nests 200,000 deep"

# An IDX file (gzip'd) claiming 2,000,000 images but holding 100, read under
# a 1.5 GB address-space limit: the claim alone (1.5 GB) would not fit.
data=$work/lying-data
mkdir -p "$data"
for f in /usr/share/datasets/fashion-mnist/*; do ln -s "$f" "$data/$(basename "$f")"; done
rm "$data/train-images-idx3-ubyte.gz"
python3 - "$data/train-images-idx3-ubyte.gz" <<'PY'
import gzip, struct, sys
with gzip.open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 2000000, 28, 28) + bytes(100 * 784))
PY
( ulimit -v 1500000; "$bin" train --data-dir "$data" --epochs 1 ) >"$work/idx.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "a lying IDX header: exit $rc: $(cat "$work/idx.log")"
grep -q "train-images-idx3-ubyte.gz: file ends at byte 78416 (uncompressed) while reading the data: the header promises \[2000000, 28, 28\]" \
  "$work/idx.log" || fail "a lying IDX header: $(cat "$work/idx.log")"
echo "ok: a lying IDX header is named with its offset, within the memory limit"
echo PASS
