#!/usr/bin/env bash
# The seed report's fine-tuning recipe three ways on one 2-class folder of
# 2,000 images (issue #38's goal): examples/fine_tune_mobilenet (which also
# writes the folder and pretrains the base it loads), `lockstep train
# --data FOLDER` with that base as its --weights, frozen and unfrozen, and
# Keras 3's script (bench/peers/keras_fine_tune_mobilenet.py) from the same
# base on the same folder. Prints each run's validation accuracy per epoch.
#
#   bench/fine_tune_three_ways.sh [BUILD_DIR] [WORK_DIR]
#
# Defaults: build/release (builds nothing: the example and the CLI must
# exist), /tmp/lockstep_fine_tune_three_ways. KERAS_PYTHON: the Python with
# Keras 3 and TensorFlow (default build/keras-venv/bin/python; none: the
# Keras run is left out, and said). Two replicas in every run (2 CPU devices;
# Keras: MirroredStrategy over 2 logical CPUs), batch 64, 6 epochs of 25
# steps, the ramp-up schedule from 1e-5 to 1e-4 (5e-5 a replica).
set -euo pipefail
build=${1:-build/release}
work=${2:-/tmp/lockstep_fine_tune_three_ways}
keras_python=${KERAS_PYTHON:-build/keras-venv/bin/python}
mkdir -p "$work"

"$build/examples/fine_tune_mobilenet" --dir "$work" --images 2000 >"$work/example.log" 2>&1
folder="$work/fashion_96_2000"
base="$work/mobilenet_v2_0.35_96_fashion10.keras"

for variant in frozen unfrozen; do
  freeze=()
  if [ "$variant" = frozen ]; then freeze=(--freeze-base); fi
  "$build/cli/lockstep" train --data "$folder" --image-size 96x96 --model mobilenet_v2 \
    --alpha 0.35 --weights "$base" "${freeze[@]}" --learning-rate-schedule rampup \
    --learning-rate 1e-4 --epochs 6 --batch-size 64 --devices 2 --seed 123 --verbose 2 \
    >"$work/cli_$variant.log" 2>&1
done

if [ -x "$keras_python" ]; then
  "$keras_python" bench/peers/keras_fine_tune_mobilenet.py "$work" 6 25 6 >"$work/keras.log" 2>&1
else
  echo "no Keras at $keras_python: the Keras run is left out" >"$work/keras.log"
fi

# One line of val_accuracy values per run, in epoch order.
accuracies() { grep -o 'val_accuracy: [0-9.]*' "$@" | awk '{printf " %s", $2} END {print ""}'; }
split_variants() {  # the example's and Keras's logs hold both variants, frozen first
  awk -v want="base $2 ===" '/=== Fine-tuning with the base/ {on = index($0, want) > 0} on' "$1"
}
echo "val_accuracy per epoch (work: $work)"
for variant in frozen unfrozen; do
  printf '%-32s' "example, base $variant:"; split_variants "$work/example.log" "$variant" | accuracies
  printf '%-32s' "lockstep train, base $variant:"; accuracies "$work/cli_$variant.log"
  printf '%-32s' "Keras, base $variant:"; split_variants "$work/keras.log" "$variant" | accuracies
done
