#!/usr/bin/env bash
# Model files side by side in one run (issue #18): Lockstep's .keras and
# safetensors checkpoint (bench/model_files_bench) and Keras's own .keras
# (bench/peers/keras_model_files.py), in alternating rounds; the table gives
# each figure's median and range over the rounds, and MB/s of the file.
#
#   bench/model_files.sh [BUILD_DIR]      (default build/release; builds nothing)
#
# Environment: ROUNDS (default 5); KERAS_PYTHON, an interpreter with Keras 3
# (default build/keras-venv/bin/python, which the Keras interop test makes);
# FILES_DIR, where the files go (default a new directory under /tmp).
set -uo pipefail
BUILD=${1:-build/release}
HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-5}
KERAS_PYTHON=${KERAS_PYTHON:-build/keras-venv/bin/python}
DIR=${FILES_DIR:-$(mktemp -d /tmp/model_files.XXXXXX)}
OUT=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
  "$BUILD/bench/model_files_bench" "$DIR/lockstep" | grep '^RESULT' >>"$OUT" || exit 1
  if [ -x "$KERAS_PYTHON" ]; then
    "$KERAS_PYTHON" "$HERE/peers/keras_model_files.py" "$DIR/keras" 2>/dev/null | grep '^RESULT' >>"$OUT" ||
      echo "keras: did not run" >&2
  else
    echo "keras: no interpreter at $KERAS_PYTHON" >&2
  fi
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line[len("RESULT "):])
    rows.setdefault((r["model"], r["system"], r["format"]), []).append(r)
print(f"{'model':5} {'system / format':28} {'MB':>6} {'save ms (range)':>22} {'MB/s':>6} {'load ms (range)':>22} {'MB/s':>6}")
for (model, system, fmt), rs in sorted(rows.items()):
    mb = rs[0]["bytes"] / 1e6
    def cell(key):
        v = [x[key] for x in rs]
        m = statistics.median(v)
        return f"{m:8.2f} ({min(v):.2f}-{max(v):.2f})", mb / (m / 1e3)
    s, s_rate = cell("save_ms")
    l, l_rate = cell("load_ms")
    print(f"{model:5} {system + ' / ' + fmt:28} {mb:6.2f} {s:>22} {s_rate:6.0f} {l:>22} {l_rate:6.0f}")
print(f"({sys.argv[2]} rounds)")
PY
rm -f "$OUT"
