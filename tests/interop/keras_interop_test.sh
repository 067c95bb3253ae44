#!/usr/bin/env bash
# The Keras interop test: Keras 3 (from PyPI's tensorflow-cpu, in a virtual
# environment shared by the build trees under build/, installed once) loads
# the files Lockstep writes (keras_writer) and checks them
# (keras_interop.py). PyPI is a registry this project may use for tests,
# never for the product. Exit 77 (skipped, never passed) when Python or the
# packages cannot be had.
#
# With EXAMPLES_DIR, Keras also loads what the sequence examples saved there
# (examples/text_classifier.cc, examples/transformer_classifier.cc) and
# evaluates it to Lockstep's numbers (keras_loads_examples.py).
#
# usage: keras_interop_test.sh KERAS_WRITER WORK_DIR VENV_DIR [EXAMPLES_DIR]
set -uo pipefail
writer=$1
work=$2
venv=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >/dev/null 2>&1 || { echo "SKIP: python3 -m venv is not available"; exit 77; }
fi
if ! "$venv/bin/python" -c "import keras, tensorflow" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check tensorflow-cpu \
    >"$work/pip.log" 2>&1 || { echo "SKIP: pip could not install tensorflow-cpu"; cat "$work/pip.log"; exit 77; }
fi
rm -rf "$work/files"
"$writer" "$work/files" || exit 1
"$venv/bin/python" "$here/keras_interop.py" "$work/files" || exit 1
if [ -n "${4:-}" ]; then
  "$venv/bin/python" "$here/keras_loads_examples.py" "$4" || exit 1
fi
