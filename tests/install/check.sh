#!/usr/bin/env bash
# A user's build, as the README shows it: installs Lockstep from a build tree
# into a scratch prefix, then out of tree, against that prefix alone,
#  - builds examples/mnist_mlp.cc with the README's CMakeLists.txt (the
#    ```cmake block of "Use Lockstep in your program", find_package);
#  - builds mnist_mlp.cc and every ```cpp program of the README with the
#    README's pkg-config line;
# all under -Wall -Wextra -Werror, and runs each (shortened). First it checks
# that every field of a public struct has a default member initializer
# (option_fields.py), so that partial designated initializers stay quiet.
#
#   check.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
readme=$source_dir/README.md
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix

python3 "$here/option_fields.py" "$source_dir/include"

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
test -x "$prefix/bin/lockstep"

# The README's fenced blocks of one language, each to <dir>/<n>.<ext>.
blocks() {  # blocks LANG DIR EXT
  python3 - "$readme" "$1" "$2" "$3" <<'PY'
import pathlib, re, sys
readme, lang, out, ext = sys.argv[1:]
found = re.findall(r"^```" + lang + r"\n(.*?)^```", pathlib.Path(readme).read_text(), re.S | re.M)
pathlib.Path(out).mkdir(parents=True, exist_ok=True)
for i, block in enumerate(found):
    pathlib.Path(out, f"{i}.{ext}").write_text(block)
print(len(found))
PY
}

echo "== CMake: the README's CMakeLists.txt"
[ "$(blocks cmake "$work/cmake-blocks" txt)" = 1 ] || { echo "expected one cmake block"; exit 1; }
mkdir -p "$work/cmake-src"
cp "$work/cmake-blocks/0.txt" "$work/cmake-src/CMakeLists.txt"
cp "$source_dir/examples/mnist_mlp.cc" "$work/cmake-src/main.cc"
cmake -S "$work/cmake-src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_FLAGS=-Werror -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log"
cmake --build "$work/cmake" -j 2
"$work/cmake/my_trainer" 1 5

echo "== pkg-config lockstep"
pc_dir=$(dirname "$(find "$prefix" -name lockstep.pc)")
flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs lockstep)
echo "pkg-config --cflags --libs lockstep: $flags"
# shellcheck disable=SC2086  # the flags are words
g++ -O2 -Wall -Wextra -Werror "$source_dir/examples/mnist_mlp.cc" -o "$work/mnist_mlp_pc" $flags
"$work/mnist_mlp_pc" 1 5
n=$(blocks cpp "$work/readme" cc)
[ "$n" -ge 2 ] || { echo "expected the README's C++ programs, found $n"; exit 1; }
for ((i = 0; i < n; ++i)); do
  echo "== README program $i"
  # shellcheck disable=SC2086
  g++ -O2 -Wall -Wextra -Werror "$work/readme/$i.cc" -o "$work/readme/$i" $flags
  "$work/readme/$i"
done
echo PASS
