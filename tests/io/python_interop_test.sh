#!/usr/bin/env bash
# The Python interop test: a virtual environment in the build tree with
# numpy, safetensors and tensorboard from PyPI (installed once; PyPI is a registry this
# project may use for tests, never for the product), then python_interop.py.
# Exit 77 (skipped) when Python or the packages cannot be had.
set -uo pipefail
writer=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
venv="$work/pyvenv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >/dev/null 2>&1 || { echo "SKIP: python3 -m venv is not available"; exit 77; }
fi
if ! "$venv/bin/python" -c "import numpy, safetensors, tensorboard" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy safetensors tensorboard \
    >"$work/pip.log" 2>&1 || { echo "SKIP: pip could not install numpy, safetensors and tensorboard"; cat "$work/pip.log"; exit 77; }
fi
rm -rf "$work/files"
"$writer" "$work/files" || exit 1
"$venv/bin/python" "$here/python_interop.py" "$work/files"
