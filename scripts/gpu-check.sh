#!/usr/bin/env bash
# The GPU check (issue #34): one prepared command for a machine with an
# NVIDIA GPU, sized to finish in about 7 minutes.
#
#   scripts/gpu-check.sh pack      here (no GPU needed): builds the release
#                                  preset and packs into .gpu-carry/ what the
#                                  GPU machine lacks — our binaries, the CUDA
#                                  adapter, the Debian libraries they load, and
#                                  Fashion-MNIST
#   scripts/gpu-check.sh run OUT   there: versions (failing fast when a
#                                  library is missing or no GPU is seen),
#                                  then its sections in this order, each
#                                  going on past a failure and saying it
#                                  (LOCKSTEP_CHECK_SECTIONS picks some):
#     ceilings   PyTorch's float32 matmul and device copy rates
#     tests      device_tests: every device op against the CPU, the
#                optimizers bit for bit, recorded steps against eager ones,
#                a one-rank NCCL sum and two ranks on one GPU refused
#     memcheck   compute-sanitizer over the recorded steps and the newer ops
#     mobilenet  MobileNetV2 224x224 batch 64 beside PyTorch: float32 fed
#                through fit and with the batch on the GPU, mixed_bfloat16,
#                mixed_float16, run_eagerly; what each recorded step holds
#     mlp        the seed MLP and the small CNN: accuracy against the CPU
#                run of this binary, samples/s beside PyTorch, recorded
#                against run_eagerly, two logical GPUs recorded and eager
#     finetune   the report's fine-tuning recipe, frozen and unfrozen,
#                against the CPU's figures made by pack
#     seeds      mixed_bfloat16 against float32 over 3 seeds (MLP, CNN)
#     images     JPEGs decoded on the host, augmentation on the GPU, the
#                step's wait for its input
#     mwms       MultiWorkerMirroredStrategy, two workers on GPU 0
#     sequences  the LSTM and transformer workloads
#     hostcost   MobileNetV2 at batch 2 (the host's cost of a step) and
#                cuDNN's heuristic algorithm choice
#   Knobs: LOCKSTEP_CHECK_ROUNDS and LOCKSTEP_CHECK_MOBILENET_ROUNDS (2
#   unless set); LOCKSTEP_CHECK_SMALL_PEERS=0 leaves out PyTorch's MLP and
#   CNN; LOCKSTEP_CHECK_QUICK=1 runs tests and mobilenet alone;
#   LOCKSTEP_CHECK_TORCH_PRECISIONS (float32 bf16 unless set);
#   LOCKSTEP_CHECK_PROFILE=1 adds ncu's kernel times of two MobileNetV2
#   steps. Logs go to OUT; a table of every RESULT is printed last.
#
# CUDA's libraries come from the GPU machine's PyTorch wheels (cuBLAS,
# cuDNN and NCCL under site-packages/nvidia/).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
carry=$here/.gpu-carry

# The fine-tuning recipe's inputs and its CPU figures (issue #35's goal:
# the GPU within 1 pp of the CPU on the same folder). The base, MobileNetV2
# alpha 0.35 at 96x96 pretrained on Fashion-MNIST's ten classes, is made by
# examples/fine_tune_mobilenet (minutes on 2 cores; kept in
# LOCKSTEP_FINETUNE_WORK) and travels; the folder of 2,000 JPEGs does not
# (no room): both sides write it with workloads --workload images, the same
# write_image_folder as the example's. The CPU's run is finetune() below
# with --devices 2 (two replicas, the same global batch of 64).
finetune_folder() {  # workloads DATA_DIR FOLDER
  [[ -d "$3/footwear" ]] && return
  "$1" --workload images --images-dir "$3" --images 2000 --size 96 --batch 64 --steps 1 --warmup 1 \
    --mode one-replica --data-dir "$2" >/dev/null
}
finetune() {  # lockstep FOLDER BASE DEVICES LOG_PREFIX: prints one line per variant
  local variant freeze
  for variant in frozen unfrozen; do
    freeze=()
    [[ $variant == frozen ]] && freeze=(--freeze-base)
    timeout 300 "$1" train --data "$2" --image-size 96x96 --model mobilenet_v2 --alpha 0.35 --weights "$3" \
      "${freeze[@]}" --learning-rate-schedule rampup --learning-rate 1e-4 --epochs 6 --batch-size 64 \
      --devices "$4" --seed 123 --verbose 2 >"$5_$variant.log" 2>&1 || echo "finetune $variant on $4: rc $?"
    printf '%-24s' "base $variant:"
    grep -o 'val_accuracy: [0-9.]*' "$5_$variant.log" | awk '{printf " %s", $2} END {print ""}'
  done
}
pack_finetune() {
  local work=${LOCKSTEP_FINETUNE_WORK:-/tmp/lockstep_gpu_check_finetune} b=$here/build/release
  mkdir -p "$work" "$carry/finetune"
  local base=$work/mobilenet_v2_0.35_96_fashion10.keras
  if [[ ! -f $base ]]; then
    cmake --build --preset release -j2 --target fine_tune_mobilenet >/dev/null
    "$b/examples/fine_tune_mobilenet" --dir "$work" --images 2000 --variant frozen --epochs 1 >"$work/example.log" 2>&1
  fi
  cp "$base" "$carry/finetune/base.keras"
  if [[ ! -f $work/finetune_cpu.txt ]]; then
    finetune_folder "$b/bench/workloads" /usr/share/datasets/fashion-mnist "$work/folder"
    finetune "$b/cli/lockstep" "$work/folder" "$base" 2 "$work/cpu" >"$work/finetune_cpu.txt"
  fi
  { grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /on /'; cat "$work/finetune_cpu.txt"; } \
    >"$carry/finetune/finetune_cpu.txt"
}

pack() {
  cmake --build --preset release -j2 --target lockstep lockstep_cuda workloads device_tests >/dev/null
  rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib" "$carry/data"
  local b=$here/build/release
  cp "$b/cli/lockstep" "$b/bench/workloads" "$b/tests/device_tests" "$carry/bin/"
  cp "$b/lib/liblockstep_cuda.so" "$carry/lib/"
  # The Debian libraries the binaries load, but not glibc's, the compiler's
  # runtime or CUDA's (the GPU machine has newer ones of each).
  ldd "$carry"/bin/* "$carry/lib/liblockstep_cuda.so" | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|libcublas|libcudart|libcudnn|libnccl' |
    while read -r lib; do cp -L "$lib" "$carry/lib/"; done
  # Stripped: the tree and the carry travel within 64 MiB.
  strip --strip-unneeded "$carry"/bin/* "$carry"/lib/*.so*
  XZ_OPT=-9 tar -C "$carry" -cJf "$carry/lockstep.tar.xz" bin lib
  rm -rf "$carry/bin" "$carry/lib"
  # Fashion-MNIST: the labels as they are, the images raw under xz (3.8 MB
  # less than gzip: the carry's room for the fine-tuning base).
  cp /usr/share/datasets/fashion-mnist/*labels*.gz "$carry/data/"
  local f
  for f in train-images-idx3-ubyte t10k-images-idx3-ubyte; do
    gunzip -c "/usr/share/datasets/fashion-mnist/$f.gz" | xz -9 -T2 >"$carry/data/$f.xz"
  done
  pack_finetune
  cp "$here"/bench/peers/{torch_gpu,torch_workloads,common}.py "$carry/"
  du -sh "$carry"
}

# The sections of `run`, in the order they run (LOCKSTEP_CHECK_SECTIONS
# picks some, in its order): most wanted first, so that a run cut short by
# its time limit has brought back what matters.
all_sections="ceilings tests memcheck mobilenet mlp finetune seeds images mwms sequences hostcost"

say() { echo "$*" | tee -a "$summary"; }
# One workloads run: its RESULT line into results.jsonl, its log into
# workloads.log; a failure is said, and the check goes on.
work() {
  local limit=$1 what=$2
  shift 2
  timeout "$limit" "$bin/workloads" "$@" 2>>"$OUTDIR/workloads.log" | grep RESULT | sed 's/^RESULT //' |
    tee -a "$results" || say "workloads $what: failed"
}
peer() {
  local limit=$1 what=$2
  shift 2
  timeout "$limit" $PY "$carry/torch_gpu.py" "$@" 2>>"$OUTDIR/torch.log" | grep RESULT | sed 's/^RESULT //' |
    tee -a "$results" || say "torch $what: failed"
}

section_versions() {
  say "== versions"
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"; } |
    tee -a "$summary"
  { $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || echo "no PyTorch"; } |
    tee -a "$summary"
  ldd "$bin/lockstep" "$LOCKSTEP_CUDA_LIBRARY" | grep 'not found' && { say "FAIL: a library is missing"; exit 1; }
  "$bin/lockstep" devices | tee -a "$summary"
  "$bin/lockstep" devices | grep -q '/device:GPU:0' || { say "FAIL: no GPU seen"; exit 1; }
  nproc | sed 's/^/host cores: /' | tee -a "$summary"
}

section_ceilings() {
  say "== the GPU's ceilings (PyTorch, TF32 off): float32 matmul 8192^3, device-to-device copy of 4 GiB"
  $PY - <<'EOF' | tee -a "$summary"
import torch
torch.backends.cuda.matmul.allow_tf32 = False
a, b = torch.randn(8192, 8192, device="cuda"), torch.randn(8192, 8192, device="cuda")
x = torch.randn(2**30, device="cuda"); y = torch.empty_like(x)
def timed(f, n):
    for _ in range(2): f()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / 1000 / n
t = timed(lambda: a @ b, 10)
print(f"sgemm 8192^3: {2 * 8192**3 / t / 1e12:.1f} TFLOP/s")
t = timed(lambda: y.copy_(x), 10)
print(f"copy: {2 * x.numel() * 4 / t / 1e12:.2f} TB/s (bytes read + written)")
EOF
}

section_tests() {
  say "== device ops against the CPU, the optimizers bit for bit, the recorded steps against eager ones"
  if LOCKSTEP_TEST_DEVICE=/gpu:0 timeout 240 "$bin/device_tests" >"$OUTDIR/device_tests.log" 2>&1; then
    say "device_tests: $(grep -c '^\[       OK' "$OUTDIR/device_tests.log") passed"
  else
    say "device_tests: FAILED ($(grep -c '^\[       OK' "$OUTDIR/device_tests.log") passed)"
    grep -E '^\[  FAILED|Failure|rror' "$OUTDIR/device_tests.log" | head -30 | cut -c1-300 | tee -a "$summary"
  fi
}

# What memcheck covers unless LOCKSTEP_CHECK_MEMCHECK_FILTER says: the
# recorded steps and what came after the last clean run of every op test
# (NCCL, random numbers, half-type ops, clipping, prefetching, image ops),
# within its 100 s.
memcheck_filter='DeviceOps.Nccl*:DeviceOps.RandomUniform*:DeviceOps.*Graph*:DeviceOps.Fit*:DeviceOps.ARecord*:DeviceOps.HalfType*:DeviceOps.Clipped*:DeviceOps.Prefetch*:DeviceOps.ImageOps*:DeviceOps.Augmentation*'
section_memcheck() {
  command -v compute-sanitizer >/dev/null || { say "memcheck: no compute-sanitizer"; return; }
  say "== compute-sanitizer memcheck over device ops, training steps and recorded steps"
  # cuDNN's heuristic choice (no timed Find of every algorithm, slow under
  # the sanitizer): the same memory accesses of our own kernels.
  LOCKSTEP_CUDNN_AUTOTUNE=0 LOCKSTEP_TEST_DEVICE=/gpu:0 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$bin/device_tests" --gtest_filter="${LOCKSTEP_CHECK_MEMCHECK_FILTER:-$memcheck_filter}" \
    >"$OUTDIR/memcheck.log" 2>&1 && say "memcheck: clean" || say "memcheck: rc $? (see memcheck.log)"
  tail -3 "$OUTDIR/memcheck.log" | tee -a "$summary"
}

section_mobilenet() {
  say "== MobileNetV2 (alpha 1.0, 224x224, batch 64, training) on /gpu:0 against PyTorch, float32 and bf16"
  local round policy precision
  for round in $(seq "${LOCKSTEP_CHECK_MOBILENET_ROUNDS:-2}"); do
    # Fed through fit from host memory (copied ahead on the copy stream).
    work 150 "mobilenet gpu" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu
    # The images on the GPU once, as the PyTorch peer's.
    work 150 "mobilenet gpu, input on the device" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 \
      --mode gpu --input-on-device
    # Keras's mixed policies: half-type activations, cuBLAS's half-type
    # products, float32 master weights (LOCKSTEP_CHECK_POLICIES, both unless set).
    for policy in ${LOCKSTEP_CHECK_POLICIES:-mixed_bfloat16 mixed_float16}; do
      work 150 "mobilenet gpu $policy" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu \
        --policy $policy --input-on-device
    done
    for precision in ${LOCKSTEP_CHECK_TORCH_PRECISIONS:-float32 bf16}; do
      peer 150 "mobilenet $precision" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 \
        --precision $precision
    done
  done
  work 150 "mobilenet gpu, run_eagerly" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu \
    --input-on-device --run-eagerly
  say "-- the recorded steps: on which device, for which batch, and the device memory each held"
  { grep -h "fit: the step is recorded as a graph\|not recorded as a graph" "$OUTDIR/workloads.log" || true; } |
    sort | uniq -c | cut -c1-300 | tee -a "$summary"
}

section_mlp() {
  say "== seed MLP and small CNN on Fashion-MNIST: accuracy against the CPU run of this binary, samples/s against PyTorch"
  work 120 "mlp cpu" --workload mlp --batch 64 --epochs 2 --mode one-replica --data-dir "$data"
  # LOCKSTEP_CHECK_SMALL_PEERS=0 leaves PyTorch's MLP and CNN runs out.
  local peers=${LOCKSTEP_CHECK_SMALL_PEERS:-1} round batch eager
  for round in $(seq "${LOCKSTEP_CHECK_ROUNDS:-2}"); do
    for batch in 64 512; do
      work 120 "mlp gpu b$batch" --workload mlp --batch $batch --epochs 2 --mode gpu --data-dir "$data"
      [[ $peers == 1 ]] && peer 120 "mlp b$batch" --workload mlp --batch $batch --epochs 2 --data-dir "$data"
    done
    # The same MLP and CNN with every step op by op (compile's run_eagerly):
    # what replaying the recorded step (train/step_graph.h) gains.
    work 120 "mlp gpu eager" --workload mlp --batch 64 --epochs 2 --mode gpu --run-eagerly --data-dir "$data"
    # mixed_float16: loss scaling's check and scale inside the recorded step.
    for eager in "" --run-eagerly; do
      work 120 "mlp gpu mixed_float16 $eager" --workload mlp --batch 64 --epochs 2 --mode gpu --policy mixed_float16 \
        $eager --data-dir "$data"
    done
    # Two logical GPUs record their steps too (the in-device sum ordered
    # between the recordings' parts); eagerly beside them, what that gains.
    work 120 "mlp gpu-logical2" --workload mlp --batch 64 --epochs 2 --mode gpu-logical2 --data-dir "$data"
    work 120 "mlp gpu-logical2 eager" --workload mlp --batch 64 --epochs 2 --mode gpu-logical2 --run-eagerly \
      --data-dir "$data"
    work 120 "cnn gpu-logical2" --workload cnn --batch 64 --epochs 1 --mode gpu-logical2 --data-dir "$data"
    work 120 "cnn gpu" --workload cnn --batch 64 --epochs 1 --mode gpu --data-dir "$data"
    work 120 "cnn gpu eager" --workload cnn --batch 64 --epochs 1 --mode gpu --run-eagerly --data-dir "$data"
    [[ $peers == 1 ]] && peer 120 cnn --workload cnn --batch 64 --epochs 1 --data-dir "$data"
  done
  work 120 "cnn cpu" --workload cnn --batch 64 --epochs 1 --mode one-replica --data-dir "$data"
  grep -h "recorded as a graph" "$OUTDIR/workloads.log" | cut -c1-160 | sort | uniq -c | tee -a "$summary"
}

section_finetune() {
  [[ -f "$carry/finetune/base.keras" ]] || { say "finetune: not packed"; return; }
  say "== the fine-tuning recipe on /gpu:0 (2,000 96x96 JPEGs, MobileNetV2 alpha 0.35 base, rampup, 6 epochs, val_accuracy per epoch)"
  finetune_folder "$bin/workloads" "$data" /tmp/ft_folder
  finetune "$bin/lockstep" /tmp/ft_folder "$carry/finetune/base.keras" /gpu:0 "$OUTDIR/finetune" | sed 's/^/GPU, /' |
    tee -a "$summary"
  grep -h "recorded as a graph" "$OUTDIR"/finetune_*.log | cut -c1-200 | sort | uniq -c | tee -a "$summary"
  sed 's/^/CPU (packed), /' "$carry/finetune/finetune_cpu.txt" | tee -a "$summary"
}

section_seeds() {
  say "== mixed_bfloat16 against float32 on /gpu:0: test accuracy over 3 seeds, seed MLP and small CNN (goal: within 0.5 pp)"
  local seed policy
  for seed in 1 2 3; do
    for policy in float32 mixed_bfloat16; do
      work 120 "mlp gpu $policy seed $seed" --workload mlp --batch 64 --epochs 2 --mode gpu --seed $seed \
        --policy $policy --data-dir "$data"
      work 120 "cnn gpu $policy seed $seed" --workload cnn --batch 64 --epochs 1 --mode gpu --seed $seed \
        --policy $policy --data-dir "$data"
    done
  done
}

section_images() {
  say "== the seed report's input: 2,000 JPEGs decoded on the host, RandomFlip and RandomRotation on /gpu:0, MobileNetV2 (the step's wait for its input)"
  local policy
  for policy in float32 mixed_bfloat16; do
    work 200 "images gpu $policy" --workload images --images-dir /tmp/ls/images --images 2000 --data-dir "$data" \
      --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu --policy $policy
  done
}

section_mwms() {
  say "== MultiWorkerMirroredStrategy on GPUs: two workers (lockstep launch) both on GPU 0, against one-device"
  timeout 150 "$bin/lockstep" launch --workers 2 -- "$bin/lockstep" train --strategy multi-worker \
    --data-dir "$data" --epochs 1 --verbose 2 >"$OUTDIR/mwms.log" 2>&1 || say "multi-worker on the GPU: rc $?"
  { grep -E "Replicas on|Gradients summed|NCCL|test accuracy|rror" "$OUTDIR/mwms.log" || true; } | sort | uniq -c |
    head -8 | cut -c1-300 | tee -a "$summary"
  timeout 120 "$bin/lockstep" train --strategy one-device --devices /gpu:0 --data-dir "$data" --epochs 1 \
    --verbose 2 >"$OUTDIR/one_gpu.log" 2>&1 || say "one-device on the GPU: rc $?"
  { grep -E "Replicas on|test accuracy|rror" "$OUTDIR/one_gpu.log" || true; } | head -4 | tee -a "$summary"
}

section_sequences() {
  say "== the sequence workloads (Embedding, LSTM; attention, layer normalization) on /gpu:0, recorded and eager, beside PyTorch"
  local w
  for w in lstm transformer; do
    work 120 "$w gpu" --workload $w --batch 64 --steps 20 --warmup 3 --mode gpu
    work 120 "$w gpu eager" --workload $w --batch 64 --steps 20 --warmup 3 --mode gpu --run-eagerly
    peer 120 "$w" --workload $w --batch 64 --steps 20 --warmup 3
  done
}

section_hostcost() {
  say "== the host's cost of a step: MobileNetV2 at batch 2, 32x32 (next to no GPU work), against PyTorch"
  work 120 "mobilenet b2" --workload mobilenet --batch 2 --size 32 --steps 50 --warmup 5 --mode gpu
  work 120 "mobilenet b2 eager" --workload mobilenet --batch 2 --size 32 --steps 50 --warmup 5 --mode gpu --run-eagerly
  peer 120 "mobilenet b2" --workload mobilenet --batch 2 --size 32 --steps 50 --warmup 5
  local r
  r=$(LOCKSTEP_CUDNN_AUTOTUNE=0 timeout 150 "$bin/workloads" --workload mobilenet --batch 64 --size 224 --steps 20 \
    --warmup 5 --mode gpu 2>>"$OUTDIR/workloads.log" | grep RESULT | sed 's/^RESULT //' || true)
  say "MobileNetV2 with cuDNN's heuristic algorithm choice (LOCKSTEP_CUDNN_AUTOTUNE=0): $r"
}

section_profile() {
  command -v ncu >/dev/null || { say "profile: no ncu"; return; }
  say "== where MobileNetV2's steady step spends its GPU time (ncu kernel durations of 2 timed steps, after 3 untimed)"
  LOCKSTEP_PROFILE_TIMED_STEPS=1 timeout 200 ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv \
    "$bin/workloads" --workload mobilenet --batch 64 --size 224 --steps 2 --warmup 3 --mode gpu --run-eagerly \
    >"$OUTDIR/ncu_mobilenet.csv" 2>"$OUTDIR/ncu.log" || say "ncu: rc $? (see ncu.log)"
  $PY - "$OUTDIR/ncu_mobilenet.csv" <<'EOF2' | tee -a "$summary"
import csv, collections, sys
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
total, count = collections.Counter(), collections.Counter()
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"].split("(")[0][:70]
    total[name] += float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1e-6)
    count[name] += 1
all_ms = sum(total.values())
print(f"{sum(count.values())} kernels, {all_ms:.1f} ms of GPU time (2 steps)")
for name, ms in total.most_common(25):
    print(f"{ms:9.2f} ms {100 * ms / all_ms:5.1f}% {count[name]:6d}x  {name}")
EOF2
  say "-- PyTorch's float32 step, 2 steps (torch.profiler)"
  timeout 120 $PY "$carry/torch_gpu.py" --workload mobilenet --batch 64 --size 224 --warmup 3 --profile \
    2>>"$OUTDIR/torch.log" | head -30 | cut -c1-160 | tee -a "$summary"
}

# The summary's last lines: one per RESULT.
table() {
  $PY - "$results" <<'EOF' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    mode = r['mode'].replace('eager on NVIDIA ', 'eager, ')
    if r.get('input') == 'on the device':
        mode = mode.replace('OneDeviceStrategy', 'input on GPU, OneDevice')
    acc = f"test acc {r['test_accuracy']:.4f}" if 'test_accuracy' in r else f"{r.get('step_ms', 0):.1f} ms/step"
    if r.get('input_wait_ms') is not None:
        acc += f", waited {r['input_wait_ms']:.1f} ms/step for input"
    if r.get('policy', 'float32') != 'float32':
        acc += f"  {r['policy']}"
    if 'seed' in r:
        acc += f"  seed {r['seed']}"
    if r.get('step_mode', '').startswith('eager'):
        acc += "  run_eagerly"
    print(f"{r['system'][:16]:16} {r['workload'][:11]:11} {mode[:44]:44} batch {r['batch']:4}  "
          f"{r['samples_per_s']:10.0f} samples/s  {acc}")
EOF
}

run() {
  local out=${1:?an output folder}
  mkdir -p "$out" /tmp/ls
  tar -C /tmp/ls -xJf "$carry/lockstep.tar.xz"
  local py=python3
  local site
  site=$($py -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
  local cuda_libs
  cuda_libs=$(find "$site/nvidia" \( -name 'libcublas.so*' -o -name 'libcudnn.so*' -o -name 'libnccl.so*' \) -printf '%h\n' 2>/dev/null |
    sort -u | tr '\n' ':' || true)
  export LD_LIBRARY_PATH="/tmp/ls/lib:${cuda_libs}${LD_LIBRARY_PATH:-}"
  # LOCKSTEP_CHECK_CUDA_LIBRARY: another adapter (the emulated GPU's, to try
  # the script where there is no GPU).
  export LOCKSTEP_CUDA_LIBRARY=${LOCKSTEP_CHECK_CUDA_LIBRARY:-/tmp/ls/lib/liblockstep_cuda.so}
  # The data where the binaries and the PyTorch peer read it (gzip).
  mkdir -p /tmp/lsdata && cp "$carry"/data/*.gz /tmp/lsdata/
  local f
  for f in train-images-idx3-ubyte t10k-images-idx3-ubyte; do
    xz -dc "$carry/data/$f.xz" | gzip -1 >"/tmp/lsdata/$f.gz"
  done
  bin=/tmp/ls/bin data=/tmp/lsdata summary=$out/summary.txt results=$out/results.jsonl OUTDIR=$out PY=$py
  : >"$summary"
  : >"$results"
  local sections=${LOCKSTEP_CHECK_SECTIONS:-$all_sections}
  [[ ${LOCKSTEP_CHECK_QUICK:-0} == 1 ]] && sections="tests mobilenet"
  [[ -n "${LOCKSTEP_CHECK_PROFILE:-}" ]] && sections="$sections profile"
  section_versions
  # A failing step is said and the check goes on: no -e from here.
  set +e
  local s
  for s in $sections; do
    declare -F "section_$s" >/dev/null || { say "FAIL: no section '$s' (sections: $all_sections profile)"; exit 2; }
    local t0=$SECONDS
    "section_$s"
    say "   ($s: $((SECONDS - t0)) s)"
  done
  { grep -iE 'error|what\(\)' "$out/workloads.log" 2>/dev/null || true; } | sort | uniq -c | head -8 | tee -a "$summary"
  table
}
case "${1:-}" in
  pack) pack ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 pack | run OUT" >&2; exit 2 ;;
esac
