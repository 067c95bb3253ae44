#!/usr/bin/env bash
# `lockstep train / evaluate / predict --data SOURCE` on a user's own files
# (issue #38; docs/own-data.md), with real processes:
#
# 1. A CSV table (20 numeric columns on different scales, 2 text columns, a
#    free-text column, a text label of 3 classes): the classes and the left-
#    out column are reported, validation accuracy reaches 0.85, the saved
#    model's data description is written, `evaluate` agrees with the last
#    validation line's accuracy order, `predict` writes one row per example
#    with the class names; the same CSV as a regression (--label n0);
#    --early-stopping, --csv-log and --tensorboard.
# 2. An image folder (2 classes, 2,000 JPEGs): Keras's "Found ..." lines,
#    the small CNN at 32x32 reaches validation accuracy 0.9, `predict`
#    names each file; the fine-tuning report's two stages (--weights,
#    --freeze-base with --learning-rate-schedule rampup, --fine-tune-from).
# 3. NumPy: x.npy,y.npy and the same arrays in one .npz train the MLP; token
#    ids and float sequences train recurrent model files.
# 4. Two workers (`launch --workers 2`, multi-worker) end with the one
#    process's metrics; a parameter-server job trains on the same CSV, its
#    evaluator task evaluating each backup on the validation rows.
# 5. Bad input, each an error naming the file, the column or the model,
#    exit 1, before any step, and no --save file: a missing label column, a
#    class folder without images, an undecodable image, x and y of
#    different lengths, float x for a model of token ids, a model whose
#    outputs are not the data's classes.
#
# 6. Every `lockstep ...` line of DOC's sh blocks (docs/own-data.md), run in
#    order in the writer's folder: the page's examples work as written.
#
# usage: own_data_test.sh LOCKSTEP_BINARY OWN_DATA_WRITER WORK_DIR [DOC]
set -uo pipefail
bin=$1
writer=$2
work=$3
doc=${4:-}
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
export OMP_NUM_THREADS=1

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -15 "$f" >&2; done
  exit 1
}
expect() {  # expect FILE TEXT: TEXT appears in FILE
  grep -qF -- "$2" "$1" || fail "expected '$2' in $1"
}
# The last "val_accuracy: X" of a log, at least MIN.
expect_val_accuracy() {
  local got
  got=$(grep -o 'val_accuracy: [0-9.]*' "$1" | tail -1 | cut -d' ' -f2)
  [[ -n $got ]] || fail "no val_accuracy in $1"
  awk -v g="$got" -v m="$2" 'BEGIN { exit !(g >= m) }' || fail "$1: val_accuracy $got < $2"
}

"$writer" "$work/data" >writer.log 2>&1 || fail "own_data_writer failed"
d=$work/data

# 1. CSV.
"$bin" train --data "$d/table.csv" --epochs 4 --verbose 2 --save csv.keras >csv.log 2>&1 ||
  fail "training on the CSV failed"
expect csv.log "Using column 'label' of $d/table.csv as the label"
expect csv.log "Found 3 classes in column 'label': high, low, mid."
expect csv.log "Leaving out column 'note': more than 1000 different texts in 5000 rows"
expect csv.log "Training on 4000 examples, validating on 1000."
expect_val_accuracy csv.log 0.85
[[ -f csv.keras && -f csv.keras.data.json ]] || fail "the model or its data description is missing"
"$bin" evaluate --model csv.keras --data "$d/table.csv" --verbose 0 >csv-eval.log 2>&1 ||
  fail "evaluate failed"
grep -Eq '^accuracy: 0\.(8[5-9]|9)[0-9]* - loss: ' csv-eval.log || fail "evaluate's line: $(cat csv-eval.log)"
"$bin" predict --model csv.keras --data "$d/table.csv" --output csv-preds.csv --verbose 0 \
  >csv-pred.log 2>&1 || fail "predict failed"
[[ $(head -1 csv-preds.csv) == "class,probability,high,low,mid" ]] || fail "predict's header: $(head -1 csv-preds.csv)"
[[ $(wc -l <csv-preds.csv) == 5001 ]] || fail "predict wrote $(wc -l <csv-preds.csv) lines"
"$bin" train --data "$d/table.csv" --validation-data "$d/table.csv" --epochs 1 --verbose 2 \
  >validation.log 2>&1 || fail "--validation-data failed"
expect validation.log "Training on 5000 examples, validating on 5000."
"$bin" train --data "$d/table.csv" --label n0 --epochs 1 --verbose 2 >regression.log 2>&1 ||
  fail "the regression failed"
expect regression.log "Column 'n0' holds numbers: a regression (mean squared error)."
expect regression.log "val_mae: "

# What a training command does besides: early stopping (restoring the best
# epoch), a CSV of the epochs, TensorBoard event files.
"$bin" train --data "$d/table.csv" --epochs 30 --early-stopping 2 --csv-log epochs.csv \
  --tensorboard tb --verbose 2 >early.log 2>&1 || fail "the early-stopping run failed"
expect early.log ": early stopping"
expect early.log "Restoring model weights from the end of the best epoch"
[[ $(head -1 epochs.csv | tr -d "\r") == "epoch,accuracy,loss,val_accuracy,val_loss" ]] || fail "epochs.csv: $(head -1 epochs.csv)"
ls tb/train/events.out.tfevents.* tb/validation/events.out.tfevents.* >/dev/null 2>&1 ||
  fail "no TensorBoard event files under tb/"

# 2. An image folder.
"$bin" train --data "$d/images" --model cnn --image-size 32x32 --epochs 2 --verbose 2 \
  --save img.keras >img.log 2>&1 || fail "training on the image folder failed"
expect img.log "Found 2000 files belonging to 2 classes."
expect img.log "Using 1600 files for training."
expect_val_accuracy img.log 0.9
"$bin" predict --model img.keras --data "$d/images" --output img-preds.csv --verbose 0 \
  >img-pred.log 2>&1 || fail "predict on images failed"
[[ $(head -1 img-preds.csv) == "file,class,probability,footwear,other" ]] || fail "header: $(head -1 img-preds.csv)"
grep -q "^$d/images/footwear/train_00000.jpg,footwear," img-preds.csv ||
  fail "the first footwear image's prediction: $(grep train_00000 img-preds.csv)"

# The report's two-stage fine-tuning: a MobileNetV2 base from Keras weights,
# frozen under a new head with the ramp-up schedule; then the saved model
# trained from block_13_expand on (recompiled).
"$bin" train --data "$d/images" --model mobilenet_v2 --image-size 32x32 \
  --weights "$d/base.weights.h5" --freeze-base --learning-rate-schedule rampup --epochs 2 \
  --verbose 2 --save stage1.keras >stage1.log 2>&1 || fail "fine-tuning's first stage failed"
expect stage1.log "Base 'mobilenetv2_0.35_32' frozen: 4 of the model's weights train."
expect stage1.log "Epoch 2: LearningRateScheduler setting learning rate to 0.00036."
"$bin" train --data "$d/images" --model stage1.keras --fine-tune-from block_13_expand --epochs 1 \
  --verbose 2 >stage2.log 2>&1 || fail "fine-tuning's second stage failed"
expect stage2.log "Base 'mobilenetv2_0.35_32' trains from layer 'block_13_expand' on (115 layers before it frozen)."
expect stage2.log "Recompiling stage1.keras for what now trains"

# 3. NumPy.
"$bin" train --data "$d/x.npy,$d/y.npy" --epochs 1 --verbose 2 --save npy.keras >npy.log 2>&1 ||
  fail "training on x.npy,y.npy failed"
expect npy.log "Found 10 classes (labels 0 to 9)."
expect_val_accuracy npy.log 0.6
"$bin" evaluate --model npy.keras --data "$d/xy.npz" --verbose 0 >npz.log 2>&1 || fail "evaluate on .npz failed"
expect npz.log "accuracy: "

# 3b. Sequences: token ids (int32) into an Embedding + Bidirectional LSTM
# model file, float sequences [n, 6, 3] into a GRU model file (no channel
# added: the model's input has rank 2); both learn their rule.
"$bin" train --data "$d/tokens.npy,$d/tokens_y.npy" --model "$d/tokens_model.keras" --epochs 15 \
  --learning-rate 0.01 --verbose 2 --save tokens.keras >tokens.log 2>&1 || fail "training on token ids failed"
expect_val_accuracy tokens.log 0.9
"$bin" evaluate --model tokens.keras --data "$d/tokens.npy,$d/tokens_y.npy" --verbose 0 \
  >tokens-eval.log 2>&1 || fail "evaluate on token ids failed"
expect tokens-eval.log "accuracy: "
"$bin" train --data "$d/seq_x.npy,$d/seq_y.npy" --model "$d/seq_model.keras" --epochs 15 \
  --learning-rate 0.01 --verbose 2 >seq.log 2>&1 || fail "training on float sequences failed"
expect_val_accuracy seq.log 0.9
# A Keras model with no data description beside it: predict reads --data as
# train would, and says so — not that it trains.
"$bin" predict --model "$d/seq_model.keras" --data "$d/seq_x.npy,$d/seq_y.npy" --output seq-preds.npy \
  --verbose 0 >seq-pred.log 2>&1 || fail "predict with a Keras model file failed"
expect seq-pred.log "data.json beside the model: reading --data as lockstep train would."
grep -q "Training on" seq-pred.log && fail "predict says it trains: $(grep 'Training on' seq-pred.log)"

# 3c. A model with two inputs and two outputs: a .npz whose arrays are
# named after them; each output gets its own loss and metric; two replicas
# train as one; evaluate names each output's; predict writes a .npz of both.
"$bin" train --data "$d/multi.npz" --model "$d/multi_model.keras" --epochs 20 --devices 1 \
  --learning-rate 0.01 --verbose 2 --save multi.keras >multi.log 2>&1 || fail "training two inputs and outputs failed"
expect multi.log "Output 'kind': 3 classes (labels 0 to 2)."
expect multi.log "Output 'size': a regression on 1 value(s) per example."
expect multi.log "Training on 640 examples, validating on 160."
kind=$(grep -o 'val_kind_accuracy: [0-9.]*' multi.log | tail -1 | cut -d' ' -f2)
size=$(grep -o 'val_size_mae: [0-9.]*' multi.log | tail -1 | cut -d' ' -f2)
awk -v k="$kind" -v s="$size" 'BEGIN { exit !(k >= 0.85 && s <= 0.3 && s > 0) }' ||
  fail "two outputs: val_kind_accuracy '$kind' (>= 0.85), val_size_mae '$size' (<= 0.3)"
"$bin" train --data "$d/multi.npz" --model "$d/multi_model.keras" --epochs 2 --devices 1 \
  --learning-rate 0.01 --verbose 2 >multi-one.log 2>&1 || fail "two outputs, one device"
"$bin" train --data "$d/multi.npz" --model "$d/multi_model.keras" --epochs 2 --devices 2 \
  --learning-rate 0.01 --verbose 2 >multi-two.log 2>&1 || fail "two outputs, two replicas"
# Every loss and metric of the last epoch, to the 4 decimals printed.
one=$(grep -o 'kind_accuracy: .*' multi-one.log | tail -1)
two=$(grep -o 'kind_accuracy: .*' multi-two.log | tail -1)
[[ -n $one && $one == "$two" ]] || fail "two replicas' '$two', one device's '$one'"
"$bin" launch --workers 2 -- "$bin" train --strategy multi-worker --data "$d/multi.npz" \
  --model "$d/multi_model.keras" --epochs 2 --learning-rate 0.01 --verbose 2 >multi-workers.log 2>&1 ||
  fail "two workers with two outputs failed"
[[ $(grep -c -F "$one" multi-workers.log) == 2 ]] || fail "the two workers' last lines are not '$one'"
"$bin" launch --workers 1 --ps 1 -- "$bin" train --strategy parameter-server --data "$d/multi.npz" \
  --model "$d/multi_model.keras" --epochs 2 --steps-per-epoch 10 --learning-rate 0.01 --verbose 2 \
  >multi-ps.log 2>&1 || fail "a parameter-server job with two outputs failed"
expect multi-ps.log "parameter servers: 20 optimizer steps"
expect multi-ps.log "val_kind_accuracy: "
"$bin" evaluate --model multi.keras --data "$d/multi.npz" --verbose 0 >multi-eval.log 2>&1 ||
  fail "evaluate with two outputs failed"
expect multi-eval.log "kind_accuracy: "
expect multi-eval.log "size_mae: "
"$bin" predict --model multi.keras --data "$d/multi.npz" --output multi-preds.npz >multi-pred.log 2>&1 ||
  fail "predict with two outputs failed"
expect multi-pred.log "wrote 800 predictions of 2 output(s) to multi-preds.npz"
python3 - multi-preds.npz <<'PY' || fail "multi-preds.npz is not kind [800, 3] and size [800, 1]"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
shapes = {}
for name in z.namelist():
    head = z.read(name)[:128].decode("latin1")
    shapes[name] = head[head.index("'shape': ") + 9 : head.index(")") + 1]
assert shapes == {"kind.npy": "(800, 3)", "size.npy": "(800, 1)"}, shapes
PY
"$bin" predict --model multi.keras --data "$d/multi.npz" --output multi.csv >multi-csv.log 2>&1 &&
  fail "predict of two outputs into a .csv did not fail"
expect multi-csv.log "the model has 2 outputs; give a .npz"

# 4. Strategies: two workers train as one process; a parameter-server job.
"$bin" train --data "$d/table.csv" --epochs 2 --verbose 2 >one.log 2>&1 || fail "one process"
"$bin" launch --workers 2 -- "$bin" train --strategy multi-worker --data "$d/table.csv" --epochs 2 \
  --verbose 2 >two.log 2>&1 || fail "two workers failed"
want=$(grep -o 'val_accuracy: [0-9.]* - val_loss: [0-9.]*' one.log | tail -1)
[[ $(grep -c -F "$want" two.log) == 2 ]] || fail "the workers' last line is not the one process's ($want)"
"$bin" launch --workers 1 --ps 1 --evaluator -- "$bin" train --strategy parameter-server \
  --data "$d/table.csv" --epochs 2 --steps-per-epoch 30 --verbose 2 --checkpoint-dir ps-ckpt \
  >ps.log 2>&1 || fail "the parameter-server job failed"
expect ps.log "parameter servers: 60 optimizer steps"
# Its evaluator evaluates the backups (those it sees) or the trained model
# on the same validation rows: its last accuracy (the final weights) is the
# chief's last val_accuracy (1,000 rows: exact in 3 decimals).
grep -qE '\[evaluator\] evaluator: (backup-[12]\.safetensors \(after epoch [12], step (30|60)\)|the trained model \(model\.safetensors\)): val loss: [0-9.]+ - val accuracy: 0\.[5-9]' ps.log ||
  fail "the evaluator's lines: $(grep '\[evaluator\]' ps.log | tail -3)"
evaluated=$(grep -o '\[evaluator\] .*val accuracy: [0-9.]*' ps.log | tail -1 | grep -o '[0-9.]*$')
chief=$(grep -o '\[chief\] .*val_accuracy: [0-9.]*' ps.log | tail -1 | grep -o '[0-9.]*$')
[[ -n $chief && $evaluated == "$chief" ]] || fail "the evaluator's last accuracy $evaluated, the chief's $chief"

# 5. Bad input: an error naming what is wrong, exit 1, nothing saved.
refuse() {  # refuse NAME TEXT ARGS...: the run fails with TEXT and saves nothing
  local name=$1 text=$2
  shift 2
  "$bin" train "$@" --epochs 1 --verbose 0 --save "bad-$name.keras" >"bad-$name.log" 2>&1
  local rc=$?
  [[ $rc == 1 ]] || fail "$name: exit $rc, expected 1"
  expect "bad-$name.log" "$text"
  grep -q '^Epoch\|/step' "bad-$name.log" && fail "$name: a step ran"
  [[ ! -e bad-$name.keras && ! -e bad-$name.keras.data.json ]] || fail "$name: a file was saved"
}
refuse label "table.csv: no column named 'price'; its columns are 'n0'" --data "$d/table.csv" --label price
refuse empty "the class folder '$d/bad_images/b' holds no images" --data "$d/bad_images"
refuse decode "$d/broken/b/two.jpg: not a JPEG or PNG image" --data "$d/broken" --validation-split 0
refuse rows "x has 4000 examples (shape [4000, 28, 28]) and y 3999" --data "$d/x.npy,$d/short_y.npy"
refuse ids "tokens_float.npy: the model takes integer inputs (token ids) and x holds float32" \
  --data "$d/tokens_float.npy,$d/tokens_y.npy" --model "$d/tokens_model.keras"
refuse outputs "--model npy.keras: the model has 10 output(s) per example (shape [10]) and the data 2 classes (footwear, other)" \
  --data "$d/images" --model npy.keras --color-mode grayscale
refuse shape "--model npy.keras: the model takes examples of shape [28, 28, 1] and the data's are [28, 28, 3]" \
  --data "$d/images" --model npy.keras
refuse missing "multi_no_size.npz: no array named 'size' (the model's output); it holds features, kind, tokens" \
  --data "$d/multi_no_size.npz" --model "$d/multi_model.keras"
refuse short "multi_short.npz: 'kind' has 799 examples and 'features' 800" \
  --data "$d/multi_short.npz" --model "$d/multi_model.keras"
refuse pair "the model has 2 input(s) and 2 output(s); give a .npz whose arrays are named after them (features, tokens, kind, size)" \
  --data "$d/x.npy,$d/y.npy" --model "$d/multi_model.keras"

# 6. The documentation's commands.
if [[ -n $doc ]]; then
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    read -r -a words <<<"${line#lockstep }"
    (cd "$d" && "$bin" "${words[@]}") >"doc-$n.log" 2>&1 || fail "$doc's command failed: $line"
  done < <(awk '/^```sh$/ { on = 1; next } /^```$/ { on = 0 } on && /^lockstep / { print }' "$doc")
  [[ $n -ge 10 ]] || fail "only $n commands found in $doc"
fi

echo PASS
