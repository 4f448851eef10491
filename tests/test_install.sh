#!/bin/sh
# The installed tree, alone, is enough for a C user: `cmake --install` into a
# temporary prefix, then examples/minimal.c is built against that prefix
# twice (pkg-config, and a CMake project calling find_package(stoker)) and
# run on a dataset made by the installed `stoker synth`.
# usage: test_install.sh BUILD_DIR SOURCE_DIR [CMAKE] [CC]
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${3:-cmake}
cc=${4:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stoker-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_install: FAIL: $*" >&2; exit 1; }

prefix=$tmp/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in include/stoker.h bin/stoker; do
  [ -e "$prefix/$f" ] || fail "$f not installed"
done
# The library folder is lib or lib64 or lib/<multiarch>, as GNUInstallDirs chose.
pc=$(find "$prefix" -name stoker.pc | head -n 1)
cfg=$(find "$prefix" -name stokerConfig.cmake | head -n 1)
[ -n "$pc" ] || fail "stoker.pc not installed"
[ -n "$cfg" ] || fail "stokerConfig.cmake not installed"
[ -e "$(dirname "$cfg")/stokerConfigVersion.cmake" ] || fail "stokerConfigVersion.cmake not installed"
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libstoker.so" ] || fail "libstoker.so not in $libdir"

# A copy of the example in a folder of its own: no header of the source tree
# is next to it, so only the installed one can be found.
mkdir "$tmp/ex"
cp "$src/examples/minimal.c" "$tmp/ex/minimal.c"

"$prefix/bin/stoker" synth "$tmp/data" --images 24 --classes 3 >/dev/null || fail "stoker synth"

check_run() { # $1: the binary, $2: how it was built
  # The library it loads must be the installed one.
  ldd "$1" | grep -q "libstoker.so.0 => $libdir/" || { ldd "$1"; fail "$2: libstoker.so.0 is not the installed one"; }
  out=$("$1" "$tmp/data") || fail "$2: minimal exited $?"
  echo "$out" | grep -q "^epoch 1: 24 images$" || { echo "$out"; fail "$2: unexpected output"; }
  echo "test_install: $2: ok"
}

# 1. pkg-config, reading only the installed stoker.pc.
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" PKG_CONFIG_LIBDIR="$libdir/pkgconfig" \
        pkg-config --cflags --libs stoker) || fail "pkg-config --cflags --libs stoker"
[ "$(PKG_CONFIG_LIBDIR="$libdir/pkgconfig" pkg-config --modversion stoker)" = \
  "$(sed -n 's/^project(stoker VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")" ] || fail "stoker.pc version"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Werror -o "$tmp/ex/minimal_pc" "$tmp/ex/minimal.c" $flags -Wl,-rpath,"$libdir" \
  || fail "compile with pkg-config ($flags)"
check_run "$tmp/ex/minimal_pc" "pkg-config"

# 2. CMake, through find_package(stoker 0.3) and the imported target.
mkdir "$tmp/cm"
cat >"$tmp/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.13)
project(stoker_user C)
find_package(stoker $(sed -n 's/^project(stoker VERSION \([0-9]*\.[0-9]*\).*/\1/p' "$src/CMakeLists.txt") REQUIRED)
add_executable(minimal $tmp/ex/minimal.c)
target_link_libraries(minimal PRIVATE stoker::stoker)
CM
"$cmake" -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
  >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "configure with find_package(stoker)"; }
"$cmake" --build "$tmp/cm/build" >>"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "build with find_package(stoker)"; }
check_run "$tmp/cm/build/minimal" "find_package"

# A version the package does not claim to satisfy is refused.
sed -i 's/^find_package(stoker [0-9.]*/find_package(stoker 9.9/' "$tmp/cm/CMakeLists.txt"
if "$cmake" -S "$tmp/cm" -B "$tmp/cm/build9" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1; then
  fail "find_package(stoker 9.9) succeeded"
fi
echo "test_install: ok"
