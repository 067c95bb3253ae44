#!/usr/bin/env bash
# Images from a folder side by side (issue #19): Lockstep's
# image_dataset_from_directory (bench/data_bench, BM_Images_FromDirectory)
# and TensorFlow's (bench/peers/tf_image_folder.py) over the same folders of
# Fashion-MNIST JPEGs, 96 x 96 and 224 x 224, with 1 and 2 decoding
# threads, in alternating rounds; the table gives each figure's median and
# range over the rounds: images/s (wall clock) and the CPU time all the
# process's threads spent per image (steadier when other jobs share the
# cores).
#
#   bench/images.sh [BUILD_DIR]      (default build/release; builds nothing)
#
# Environment: ROUNDS (default 5); TF_PYTHON (default /opt/tf-venv/bin/python);
# IMAGE_FOLDER_96 and IMAGE_FOLDER_224 (default: made under /tmp by
# examples/fashion_mnist_folder from the first 2,000 and 1,000 images).
set -uo pipefail
BUILD=${1:-build/release}
HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-5}
TF_PYTHON=${TF_PYTHON:-/opt/tf-venv/bin/python}
export IMAGE_FOLDER_96=${IMAGE_FOLDER_96:-/tmp/lockstep_bench_images_96_2000}
export IMAGE_FOLDER_224=${IMAGE_FOLDER_224:-/tmp/lockstep_bench_images_224_1000}
[ -d "$IMAGE_FOLDER_96/other" ] || "$BUILD/examples/fashion_mnist_folder" "$IMAGE_FOLDER_96" --size 96 --count 2000 || exit 1
[ -d "$IMAGE_FOLDER_224/other" ] || "$BUILD/examples/fashion_mnist_folder" "$IMAGE_FOLDER_224" --size 224 --count 1000 || exit 1
OUT=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
  "$BUILD/bench/data_bench" --benchmark_filter='BM_Images_FromDirectory' --benchmark_format=json \
    --benchmark_min_time=2 2>/dev/null |
    python3 -c '
import json, sys
for b in json.load(sys.stdin)["benchmarks"]:
    size, threads = (int(v) for v in b["name"].split("/")[1:3])
    print("RESULT " + json.dumps({"system": "lockstep", "size": size, "threads": threads,
                                  "images_per_s": b["images_per_s"],
                                  "cpu_ms_per_image": b["cpu_ms_per_image"]}))' >>"$OUT" || exit 1
  if [ -x "$TF_PYTHON" ]; then
    for size in 96 224; do
      folder=IMAGE_FOLDER_$size
      for threads in 1 2; do
        "$TF_PYTHON" "$HERE/peers/tf_image_folder.py" "${!folder}" "$size" "$threads" 2>/dev/null |
          grep '^RESULT' >>"$OUT" || echo "tensorflow: did not run ($size, $threads)" >&2
      done
    done
  else
    echo "tensorflow: no interpreter at $TF_PYTHON" >&2
  fi
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line[len("RESULT "):])
    rows.setdefault((r["size"], r["threads"], r["system"]), []).append(r)
print("| JPEGs | threads | system | images/s (range) | CPU ms per image (range) |")
print("|---|---:|---|---:|---:|")
for (size, threads, system), rs in sorted(rows.items()):
    v = [r["images_per_s"] for r in rs]
    c = [r["cpu_ms_per_image"] for r in rs]
    print(f"| {size}x{size} | {threads} | {system} | {statistics.median(v):,.0f} "
          f"({min(v):,.0f}-{max(v):,.0f}) | {statistics.median(c):.3f} ({min(c):.3f}-{max(c):.3f}) |")
PY
rm -f "$OUT"
