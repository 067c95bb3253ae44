#!/usr/bin/env bash
# Installs Lockstep from a build tree into a scratch prefix, then builds an
# example out of tree against it — once with CMake (find_package) and once
# with pkg-config, both under -Wall -Wextra -Werror — and runs each binary
# (shortened). Also checks that every field of a public struct has a default
# member initializer (tests/install/option_fields.py).
#
#   check.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
example=$source_dir/examples/mnist_mlp.cc
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix

python3 "$here/option_fields.py" "$source_dir/include"

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
test -x "$prefix/bin/lockstep"

echo "== CMake: find_package(lockstep)"
cmake -S "$here/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DEXAMPLE_SOURCE="$example" -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log"
cmake --build "$work/cmake" -j 2
"$work/cmake/mnist_mlp" 1 5

echo "== pkg-config lockstep"
pc_dir=$(dirname "$(find "$prefix" -name lockstep.pc)")
flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs lockstep)
echo "pkg-config --cflags --libs lockstep: $flags"
# shellcheck disable=SC2086  # the flags are words
g++ -O2 -Wall -Wextra -Werror "$example" -o "$work/mnist_mlp_pc" $flags
"$work/mnist_mlp_pc" 1 5
echo PASS
