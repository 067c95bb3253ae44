#!/usr/bin/env bash
# Issue #41: hostile model files give only clear errors naming the file —
# no signal, no hang, memory bounded — from `lockstep inspect` and from
# `lockstep train --model`, and `--save` is checked before the first step.
# The HDF5 corpus is fuzz/corpus/hdf5 (the probe's heap-size variants that
# crashed or looped in libhdf5, a link cycle, a shared object, 70 nested
# groups, a dataset declared and never written); the .keras variants are
# made here from a fixture Keras wrote, with Python's zipfile.
#
# usage: hostile_files.sh LOCKSTEP_BINARY WORK_DIR
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

# refused FILE MESSAGE COMMAND...: exit 1 (not a signal, not 124: a hang),
# the message, the file's name, no "internal error", under 4 GiB of
# address space (what one file may make us allocate is far less).
refused() {
  local file=$1 message=$2
  shift 2
  (ulimit -v 4194304; timeout 120 "$@") >"$work/out.log" 2>&1
  local rc=$?
  [ $rc -eq 1 ] || fail "$* exited with $rc (124: a hang, >128: a signal): $(tail -c 600 "$work/out.log")"
  grep -qF -- "$(basename "$file")" "$work/out.log" || fail "$*: the file is not named: $(cat "$work/out.log")"
  grep -qF -- "$message" "$work/out.log" || fail "$*: expected '$message' in: $(cat "$work/out.log")"
  grep -q "internal error" "$work/out.log" && fail "$*: internal error: $(cat "$work/out.log")"
  echo "ok: $(basename "$file"): $message"
}

corpus=$root/fuzz/corpus/hdf5
refused "$corpus/heap-size-segv.weights.h5" "the reader crashed (signal 11" "$bin" inspect "$corpus/heap-size-segv.weights.h5"
refused "$corpus/heap-size-segv-2.weights.h5" "nothing was loaded" "$bin" inspect "$corpus/heap-size-segv-2.weights.h5"
refused "$corpus/heap-size-loop.weights.h5" "reading used more than 10 s of CPU" "$bin" inspect "$corpus/heap-size-loop.weights.h5"
refused "$corpus/link-cycle.h5" "links to an object that another link reached already" "$bin" inspect "$corpus/link-cycle.h5"
refused "$corpus/shared-object.h5" "links to an object that another link reached already" "$bin" inspect "$corpus/shared-object.h5"
refused "$corpus/nested-70-groups.h5" "groups nested more than 64 levels deep" "$bin" inspect "$corpus/nested-70-groups.h5"
refused "$corpus/declared-never-written.h5" "stores none of its values" "$bin" inspect "$corpus/declared-never-written.h5"

# The same reader behind `train --model` with a legacy .h5 and `--weights`-
# style loads: a .keras whose weights member is a crashing variant.
python3 - "$root/tests/interop/keras_fixtures/sequential.keras" "$corpus" "$work" <<'PY'
import copy, json, sys, zipfile
src, corpus, work = sys.argv[1:4]
z = zipfile.ZipFile(src)
members = {n: z.read(n) for n in z.namelist()}
cfg = json.loads(members["config.json"])
def write(name, config=None, weights=None, extra=None, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile(f"{work}/{name}", "w", compression=compress) as out:
        for n, b in members.items():
            if n == "config.json" and config is not None:
                b = config if isinstance(config, bytes) else json.dumps(config).encode()
            if n == "model.weights.h5" and weights is not None:
                b = weights
            out.writestr(n, b)
        for n, b in (extra or {}).items():
            out.writestr(n, b)
c = copy.deepcopy(cfg); c["config"]["layers"][1]["config"]["units"] = 2**63 - 1
write("dense-units-2p63.keras", c)
c = copy.deepcopy(cfg)
c["config"]["layers"][0]["config"]["batch_shape"] = [None, 2**62]
c["config"]["layers"][1]["build_config"]["input_shape"] = [None, 2**62]
write("input-dim-2p62.keras", c)
c = copy.deepcopy(cfg)
c["config"]["layers"].insert(1, {"module": "keras.layers", "class_name": "ZeroPadding2D",
                                 "config": {"name": "zp", "padding": [[], []]}})
write("zero-padding-empty.keras", c)
c = copy.deepcopy(cfg)
c["config"]["layers"][0]["config"]["batch_shape"] = [None, 8, 8, 1]
c["config"]["layers"][1] = {"module": "keras.layers", "class_name": "Conv2D", "config": {
    "name": "conv", "filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "valid",
    "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 0, "activation": "relu",
    "use_bias": True, "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros",
    "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
    "kernel_constraint": None, "bias_constraint": None}}
write("conv-groups-0.keras", c)
write("deep-json.keras", b"[" * 200000)
write("heap-crash.keras", weights=open(f"{corpus}/heap-size-segv.weights.h5", "rb").read())
# Eight deflated members of 64 MiB of zeros: each under deflate's 1032:1,
# together past the file's budget (the probe: 6-10 MB reaching 6.3 GB).
write("zip-bomb.keras", extra={f"pad{i}.bin": bytes(64 << 20) for i in range(8)},
      compress=zipfile.ZIP_DEFLATED)
PY
[ -f "$work/zip-bomb.keras" ] || fail "the .keras variants were not made"

refused dense-units-2p63.keras "layer 'dense_7': Shape [8, 9223372036854775807]: holds more than 2^63 - 1 elements" \
  "$bin" inspect "$work/dense-units-2p63.keras"
refused input-dim-2p62.keras "needs more than 2^64 bytes" "$bin" inspect "$work/input-dim-2p62.keras"
refused zero-padding-empty.keras "padding = [[],[]] is not a 2-D padding" "$bin" inspect "$work/zero-padding-empty.keras"
refused conv-groups-0.keras "groups must be > 0, got 0" "$bin" inspect "$work/conv-groups-0.keras"
refused deep-json.keras "JSON nested more than 128 levels deep" "$bin" inspect "$work/deep-json.keras"
refused heap-crash.keras "model.weights.h5: the reader crashed" "$bin" inspect "$work/heap-crash.keras"
refused zip-bomb.keras "past its budget" "$bin" inspect "$work/zip-bomb.keras"
refused heap-crash.keras "model.weights.h5: the reader crashed" \
  "$bin" train --model "$work/heap-crash.keras" --epochs 1 --steps-per-epoch 2
refused dense-units-2p63.keras "holds more than 2^63 - 1 elements" \
  "$bin" train --model "$work/dense-units-2p63.keras" --epochs 1 --steps-per-epoch 2

# A 1 TiB sparse file: named, with its size, not an anonymous bad_alloc.
truncate -s 1T "$work/sparse.weights.h5"
refused sparse.weights.h5 "1099511627776 bytes: more than this process can hold in memory" \
  "$bin" inspect "$work/sparse.weights.h5"
rm -f "$work/sparse.weights.h5"

# A negative learning rate in a .keras file's compile config (it trained
# uphill): refused, naming the file.
python3 - "$root/tests/interop/keras_fixtures/sequential.keras" "$work/negative-rate.keras" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
members = {n: z.read(n) for n in z.namelist()}
cfg = json.loads(members["config.json"])
opt = cfg["compile_config"]["optimizer"]
opt["config"]["learning_rate"] = -0.1
members["config.json"] = json.dumps(cfg).encode()
with zipfile.ZipFile(sys.argv[2], "w") as out:
    for n, b in members.items():
        out.writestr(n, b)
PY
refused negative-rate.keras "learning_rate must be a number >= 0, got -0.1" \
  "$bin" train --model "$work/negative-rate.keras" --epochs 1 --steps-per-epoch 2

# A killed save's temporary file is removed by the next run that saves there.
touch "$work/.kept.keras.tmp999999999.7"
timeout 120 "$bin" train --epochs 1 --steps-per-epoch 2 --save "$work/kept.keras" >"$work/kept.log" 2>&1 ||
  fail "a save beside a stale temporary: $(cat "$work/kept.log")"
[ -e "$work/.kept.keras.tmp999999999.7" ] && fail "a killed save's temporary file was left"
echo "ok: a killed save's temporary file is removed by the next save"

# --save's target is checked before training: nothing trains for a target
# that cannot be written, and the error names it.
mkdir -p "$work/readonly" "$work/a-dir.keras"
chmod 555 "$work/readonly"
for target in "$work/a-dir.keras" "$work/readonly/model.keras"; do
  # root writes anywhere: the read-only folder is tested only as another user
  if [ "$target" = "$work/readonly/model.keras" ] && [ "$(id -u)" -eq 0 ]; then
    touch "$work/readonly/probe" 2>/dev/null && { rm -f "$work/readonly/probe"; echo "ok: (root ignores a read-only folder; that case is left to the directory one)"; continue; }
  fi
  timeout 120 "$bin" train --epochs 1 --steps-per-epoch 5 --save "$target" >"$work/save.log" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "--save $target: exit $rc: $(cat "$work/save.log")"
  grep -qF "$target" "$work/save.log" || fail "--save $target: not named: $(cat "$work/save.log")"
  grep -q "Epoch 1" "$work/save.log" && fail "--save $target: trained before refusing: $(cat "$work/save.log")"
  echo "ok: --save $(basename "$target") is refused before the first step"
done
# A target that fails only after training (its folder removed meanwhile):
# the trained model is kept in the temporary folder, and the error says where.
mkdir -p "$work/gone"
"$bin" train --epochs 3 --verbose 2 --save "$work/gone/model.keras" >"$work/rescue.log" 2>&1 &
pid=$!
wait_for "$work/rescue.log" "Epoch 1/" 60 || fail "the run did not start: $(cat "$work/rescue.log")"
rm -rf "$work/gone"
wait $pid
rc=$?
[ $rc -eq 1 ] || fail "--save to a removed folder: exit $rc: $(cat "$work/rescue.log")"
rescued=$(sed -n 's/.*the trained model was saved to \([^ ]*\.keras\) instead.*/\1/p' "$work/rescue.log")
[ -n "$rescued" ] || fail "--save to a removed folder: no rescue named: $(cat "$work/rescue.log")"
"$bin" inspect "$rescued" >"$work/inspect.log" 2>&1 || fail "the rescued model does not load: $(cat "$work/inspect.log")"
rm -f "$rescued"
echo "ok: a --save that fails after training keeps the model in $rescued"
echo PASS
