#!/usr/bin/env bash
# Installs, with apt, exactly what Lockstep's build, tests and main job need.
# Idempotent: runs `apt-get update` and `apt-get install` only when a package
# is missing. Needs root (or sudo) only when something must be installed.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build ccache make pkg-config
  # libraries
  libdnnl-dev          # oneDNN: matmul, convolution, softmax, eltwise kernels
  ocl-icd-opencl-dev   # only recommended by libdnnl-dev, but its dnnl-config.cmake requires OpenCL
  nlohmann-json3-dev   # model config and checkpoint headers
  libcli11-dev         # the lockstep command line
  libgtest-dev googletest libgmock-dev
  libbenchmark-dev
  zlib1g-dev           # gzip'd IDX files
  libjpeg62-turbo-dev  # JPEG images (image_dataset_from_directory; src/data/image/jpeg.cc)
  libpng-dev           # PNG images (src/data/image/png.cc)
  libgloo-dev          # collectives over TCP between worker processes (multi-worker)
  libopenmpi-dev openmpi-bin  # MPI collectives and mpirun (multi-worker)
  libssl-dev           # HMAC-SHA256 for the rendezvous store's handshake
  libhdf5-dev          # Keras's .keras weights, .weights.h5 and legacy .h5 files
  libzip-dev           # the .keras zip archive
  libfarmhash-dev      # TensorFlow's string hash (Fingerprint64) for the Estimator's feature columns
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # ParameterServerStrategy's RPC services
  iproute2             # tests only: network namespaces as separate hosts
  clang libclang-rt-14-dev libomp-dev  # make fuzz: libFuzzer, its sanitizers, clang's OpenMP
  python3-venv         # tests only: a venv for the safetensors interop test (pip, PyPI)
  # data for the main job
  dataset-fashion-mnist
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
