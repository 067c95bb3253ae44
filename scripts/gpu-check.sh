#!/usr/bin/env bash
# The GPU check (issue #34): one prepared command for a machine with an
# NVIDIA GPU, sized to finish in about 7 minutes.
#
#   scripts/gpu-check.sh pack      here (no GPU needed): builds the release
#                                  preset and packs into .gpu-carry/ what the
#                                  GPU machine lacks — our binaries, the CUDA
#                                  adapter, the Debian libraries they load, and
#                                  Fashion-MNIST
#   scripts/gpu-check.sh run OUT   there (LOCKSTEP_CHECK_ROUNDS and
#                                  LOCKSTEP_CHECK_MOBILENET_ROUNDS: rounds, 2
#                                  unless set; LOCKSTEP_CHECK_SMALL_PEERS=0
#                                  leaves out PyTorch's MLP and CNN runs;
#                                  LOCKSTEP_CHECK_QUICK=1 runs the device
#                                  tests and MobileNetV2 alone, PyTorch in
#                                  LOCKSTEP_CHECK_TORCH_PRECISIONS (float32
#                                  bf16 unless set);
#                                  LOCKSTEP_CHECK_PROFILE=1 adds ncu's kernel
#                                  times of two steady MobileNetV2 steps):
#                                  versions (failing fast when a library
#                                  is missing), every device op against the CPU,
#                                  compute-sanitizer's memcheck over training
#                                  steps, the seed MLP on /gpu:0 and on two
#                                  logical GPUs against the CPU run of the same
#                                  binary, samples/s beside PyTorch eager
#                                  on the same GPU, alternating rounds;
#                                  MobileNetV2 beside PyTorch (float32, and
#                                  its bf16 autocast; ours under both
#                                  mixed policies); the report's JPEG input
#                                  and augmentation before MobileNetV2, with
#                                  the step's wait for its input; the LSTM and
#                                  transformer workloads. Logs go to OUT; the
#                                  summary is printed last.
#
# CUDA's libraries come from the GPU machine's PyTorch wheels (cuBLAS and
# cuDNN under site-packages/nvidia/).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
carry=$here/.gpu-carry

pack() {
  cmake --build --preset release -j2 --target lockstep lockstep_cuda workloads device_tests >/dev/null
  rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib" "$carry/data"
  local b=$here/build/release
  cp "$b/cli/lockstep" "$b/bench/workloads" "$b/tests/device_tests" "$carry/bin/"
  cp "$b/lib/liblockstep_cuda.so" "$carry/lib/"
  # The Debian libraries the binaries load, but not glibc's, the compiler's
  # runtime or CUDA's (the GPU machine has newer ones of each).
  ldd "$carry"/bin/* "$carry/lib/liblockstep_cuda.so" | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|libcublas|libcudart|libcudnn' |
    while read -r lib; do cp -L "$lib" "$carry/lib/"; done
  # Stripped: the tree and the carry travel within 64 MiB.
  strip --strip-unneeded "$carry"/bin/* "$carry"/lib/*.so*
  XZ_OPT=-9 tar -C "$carry" -cJf "$carry/lockstep.tar.xz" bin lib
  rm -rf "$carry/bin" "$carry/lib"
  cp /usr/share/datasets/fashion-mnist/*.gz "$carry/data/"
  cp "$here"/bench/peers/{torch_gpu,torch_workloads,common}.py "$carry/"
  du -sh "$carry"
}

run() {
  local out=${1:?an output folder}
  mkdir -p "$out" /tmp/ls
  tar -C /tmp/ls -xJf "$carry/lockstep.tar.xz"
  local py=python3
  local site
  site=$($py -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
  local cuda_libs
  cuda_libs=$(find "$site/nvidia" \( -name 'libcublas.so*' -o -name 'libcudnn.so*' \) -printf '%h\n' 2>/dev/null |
    sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH="/tmp/ls/lib:${cuda_libs}${LD_LIBRARY_PATH:-}"
  export LOCKSTEP_CUDA_LIBRARY=/tmp/ls/lib/liblockstep_cuda.so
  local bin=/tmp/ls/bin data=$carry/data summary=$out/summary.txt
  : >"$summary"
  say() { echo "$*" | tee -a "$summary"; }

  say "== versions"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$summary"
  ldd "$bin/lockstep" "$LOCKSTEP_CUDA_LIBRARY" | grep 'not found' && { say "FAIL: a library is missing"; exit 1; }
  "$bin/lockstep" devices | tee -a "$summary"
  "$bin/lockstep" devices | grep -q '/device:GPU:0' || { say "FAIL: no GPU seen"; exit 1; }
  nproc | sed 's/^/host cores: /' | tee -a "$summary"

  say "== the GPU's ceilings (PyTorch, TF32 off): float32 matmul 8192^3, device-to-device copy of 4 GiB"
  $py - <<'EOF' | tee -a "$summary"
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

  say "== device ops against the CPU, the optimizers bit for bit, the seed MLP (1 and 2 logical GPUs)"
  if LOCKSTEP_TEST_DEVICE=/gpu:0 "$bin/device_tests" >"$out/device_tests.log" 2>&1; then
    say "device_tests: $(grep -c '^\[       OK' "$out/device_tests.log") passed"
  else
    say "device_tests: FAILED"; grep -E 'FAILED|Failure|error' "$out/device_tests.log" | head -20 | tee -a "$summary"
  fi

  # LOCKSTEP_CHECK_QUICK=1: the device tests and MobileNetV2 only (a
  # short second run within the lease).
  local full=1
  [[ ${LOCKSTEP_CHECK_QUICK:-0} == 1 ]] && full=0
  if [[ $full == 1 ]] && command -v compute-sanitizer >/dev/null; then
    say "== compute-sanitizer memcheck over device ops and training steps"
    # cuDNN's heuristic choice (no timed Find of every algorithm, slow under
    # the sanitizer): the same memory accesses of our own kernels.
    LOCKSTEP_CUDNN_AUTOTUNE=0 LOCKSTEP_TEST_DEVICE=/gpu:0 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$bin/device_tests" --gtest_filter='DeviceOps.*:-DeviceOps.RunningOutOfMemory*:DeviceOps.MobileNetV2*:DeviceOps.MixedPrecision*' \
      >"$out/memcheck.log" 2>&1 && say "memcheck: clean" || say "memcheck: rc $? (see memcheck.log)"
    tail -3 "$out/memcheck.log" | tee -a "$summary"
  fi

  local results=$out/results.jsonl
  : >"$results"
  if [[ $full == 1 ]]; then
  say "== seed MLP on Fashion-MNIST: accuracy against the CPU run of this binary, samples/s against PyTorch"
  timeout 120 "$bin/workloads" --workload mlp --batch 64 --epochs 2 --mode one-replica --data-dir "$data" \
    2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results"
  # LOCKSTEP_CHECK_SMALL_PEERS=0 leaves PyTorch's MLP and CNN runs out.
  local peers=${LOCKSTEP_CHECK_SMALL_PEERS:-1}
  for round in $(seq "${LOCKSTEP_CHECK_ROUNDS:-2}"); do
    for batch in 64 512; do
      timeout 120 "$bin/workloads" --workload mlp --batch $batch --epochs 2 --mode gpu --data-dir "$data" \
        2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads gpu b$batch: failed"
      [[ $peers == 1 ]] || continue
      timeout 120 $py "$carry/torch_gpu.py" --workload mlp --batch $batch --epochs 2 --data-dir "$data" \
        2>>"$out/torch.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "torch b$batch: failed"
    done
    # The same MLP and CNN with every step op by op (compile's run_eagerly):
    # what replaying the recorded step (train/step_graph.h) gains.
    timeout 120 "$bin/workloads" --workload mlp --batch 64 --epochs 2 --mode gpu --run-eagerly --data-dir "$data" \
      2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads gpu eager: failed"
    timeout 120 "$bin/workloads" --workload cnn --batch 64 --epochs 1 --mode gpu --run-eagerly --data-dir "$data" \
      2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads cnn gpu eager: failed"
    # mixed_float16: loss scaling's check and scale inside the recorded step.
    for eager in "" --run-eagerly; do
      timeout 120 "$bin/workloads" --workload mlp --batch 64 --epochs 2 --mode gpu --policy mixed_float16 $eager \
        --data-dir "$data" 2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" ||
        say "workloads gpu mixed_float16 $eager: failed"
    done
    timeout 120 "$bin/workloads" --workload mlp --batch 64 --epochs 2 --mode gpu-logical2 --data-dir "$data" \
      2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads gpu-logical2: failed"
    timeout 120 "$bin/workloads" --workload cnn --batch 64 --epochs 1 --mode gpu --data-dir "$data" \
      2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads cnn gpu: failed"
    [[ $peers == 1 ]] || continue
    timeout 120 $py "$carry/torch_gpu.py" --workload cnn --batch 64 --epochs 1 --data-dir "$data" \
      2>>"$out/torch.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "torch cnn: failed"
  done
  timeout 120 "$bin/workloads" --workload cnn --batch 64 --epochs 1 --mode one-replica --data-dir "$data" \
    2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads cnn cpu: failed"

  say "== mixed_bfloat16 against float32 on /gpu:0: the seed MLP's test accuracy over 3 seeds (goal: within 0.5 pp)"
  for seed in 1 2 3; do
    for policy in float32 mixed_bfloat16; do
      timeout 120 "$bin/workloads" --workload mlp --batch 64 --epochs 2 --mode gpu --seed $seed --policy $policy \
        --data-dir "$data" 2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" ||
        say "workloads mlp gpu $policy seed $seed: failed"
    done
  done

  say "== MultiWorkerMirroredStrategy on GPUs: two workers (lockstep launch) both on GPU 0, against one-device"
  timeout 150 "$bin/lockstep" launch --workers 2 -- "$bin/lockstep" train --strategy multi-worker \
    --data-dir "$data" --epochs 1 --verbose 2 >"$out/mwms.log" 2>&1 || say "multi-worker on the GPU: rc $?"
  { grep -E "Replicas on|test accuracy|rror" "$out/mwms.log" || true; } | sort | uniq -c | head -8 | tee -a "$summary"
  timeout 120 "$bin/lockstep" train --strategy one-device --devices /gpu:0 --data-dir "$data" --epochs 1 \
    --verbose 2 >"$out/one_gpu.log" 2>&1 || say "one-device on the GPU: rc $?"
  { grep -E "Replicas on|test accuracy|rror" "$out/one_gpu.log" || true; } | head -4 | tee -a "$summary"
  fi
  say "== MobileNetV2 (alpha 1.0, 224x224, batch 64, training) on /gpu:0 against PyTorch, float32 and bf16"
  for round in $(seq "${LOCKSTEP_CHECK_MOBILENET_ROUNDS:-2}"); do
    timeout 150 "$bin/workloads" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu \
      2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads mobilenet gpu: failed"
    # The images on the GPU once, as the PyTorch peer's: the step without
    # its copy of the batch from host memory (which the run above sends
    # ahead, on the copy stream, while the step before computes).
    timeout 150 "$bin/workloads" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu \
      --input-on-device 2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" ||
      say "workloads mobilenet gpu, input on the device: failed"
    # Keras's mixed policies: half-type activations, cuBLAS's half-type
    # products, float32 master weights (LOCKSTEP_CHECK_POLICIES, both unless set).
    for policy in ${LOCKSTEP_CHECK_POLICIES:-mixed_bfloat16 mixed_float16}; do
      timeout 150 "$bin/workloads" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu \
        --policy $policy --input-on-device 2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' |
        tee -a "$results" || say "workloads mobilenet gpu $policy, input on the device: failed"
    done
    for precision in ${LOCKSTEP_CHECK_TORCH_PRECISIONS:-float32 bf16}; do
      timeout 150 $py "$carry/torch_gpu.py" --workload mobilenet --batch 64 --size 224 --steps 20 --warmup 5 \
        --precision $precision 2>>"$out/torch.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" ||
        say "torch mobilenet $precision: failed"
    done
  done
  say "== the recorded steps: on which device, for which batch, and the device memory each held"
  { grep -h "fit: the step is recorded as a graph\|not recorded as a graph" "$out/workloads.log" || true; } |
    sort | uniq -c | tee -a "$summary"
  if [[ $full == 1 ]]; then
  say "== the seed report's input: 2,000 JPEGs decoded on the host, RandomFlip and RandomRotation on /gpu:0, MobileNetV2 (the step's wait for its input)"
  for policy in float32 mixed_bfloat16; do
    timeout 200 "$bin/workloads" --workload images --images-dir /tmp/ls/images --images 2000 --data-dir "$data" \
      --batch 64 --size 224 --steps 20 --warmup 5 --mode gpu --policy $policy 2>>"$out/workloads.log" |
      grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads images gpu $policy: failed"
  done
  r=$(LOCKSTEP_CUDNN_AUTOTUNE=0 timeout 150 "$bin/workloads" --workload mobilenet --batch 64 --size 224 --steps 20 \
    --warmup 5 --mode gpu 2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' || true)
  say "the same with cuDNN's heuristic algorithm choice (LOCKSTEP_CUDNN_AUTOTUNE=0): $r"
  say "== the host's cost of a step: MobileNetV2 at batch 2, 32x32 (next to no GPU work), against PyTorch"
  timeout 120 "$bin/workloads" --workload mobilenet --batch 2 --size 32 --steps 50 --warmup 5 --mode gpu \
    2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads mobilenet b2: failed"
  timeout 120 $py "$carry/torch_gpu.py" --workload mobilenet --batch 2 --size 32 --steps 50 --warmup 5 \
    2>>"$out/torch.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "torch mobilenet b2: failed"
  fi
  if [[ -n "${LOCKSTEP_CHECK_PROFILE:-}" ]] && command -v ncu >/dev/null; then
    say "== where MobileNetV2's steady step spends its GPU time (ncu kernel durations of 2 timed steps, after 3 untimed)"
    LOCKSTEP_PROFILE_TIMED_STEPS=1 timeout 200 ncu --clock-control none --profile-from-start off \
      --metrics gpu__time_duration.sum --csv \
      "$bin/workloads" --workload mobilenet --batch 64 --size 224 --steps 2 --warmup 3 --mode gpu \
      >"$out/ncu_mobilenet.csv" 2>"$out/ncu.log" || say "ncu: rc $? (see ncu.log)"
    $py - "$out/ncu_mobilenet.csv" <<'EOF2' | tee -a "$summary"
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
    timeout 120 $py "$carry/torch_gpu.py" --workload mobilenet --batch 64 --size 224 --warmup 3 --profile \
      2>>"$out/torch.log" | head -30 | cut -c1-160 | tee -a "$summary"
  fi
  if [[ $full == 1 ]]; then
  say "== the sequence workloads (Embedding, LSTM; attention, layer normalization) on /gpu:0"
  for w in lstm transformer; do
    timeout 120 "$bin/workloads" --workload $w --batch 64 --steps 20 --warmup 3 --mode gpu \
      2>>"$out/workloads.log" | grep RESULT | sed 's/^RESULT //' | tee -a "$results" || say "workloads $w gpu: failed"
  done
  fi
  { grep -iE 'error|what\(\)' "$out/workloads.log" || true; } | sort | uniq -c | head -8 | tee -a "$summary"
  $py - "$results" <<'EOF' | tee -a "$summary"
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

case "${1:-}" in
  pack) pack ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 pack | run OUT" >&2; exit 2 ;;
esac
