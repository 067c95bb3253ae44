#!/usr/bin/env bash
# Installs the peers bench/compare.sh measures Lockstep against. Not part of
# the product's build: `make run` and `make test` never call it.
#   - PyTorch: Debian's python3-torch (1.13), with OpenBLAS behind Debian's
#     generic BLAS interface (libopenblas0-pthread): without it torch's
#     matmuls run on the reference netlib BLAS, 2-3x slower, which would flatter us.
#   - TensorFlow/Keras: tensorflow-cpu from PyPI in a venv at /opt/tf-venv.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends python3-torch python3-numpy python3-venv \
  libopenblas0-pthread
if [[ ! -x /opt/tf-venv/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages /opt/tf-venv
fi
/opt/tf-venv/bin/pip install --quiet tensorflow-cpu
