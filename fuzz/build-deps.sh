#!/bin/sh
# Builds libjpeg-turbo, libspng and zlib from source, instrumented like the
# fuzz targets, so that libFuzzer's coverage feedback and the sanitizers reach
# into the decoders (the system's libraries are neither). `make fuzz` and
# `make fuzz-msan` call it; a second run with the same flags is a no-op.
#
# Usage: fuzz/build-deps.sh DIR asan|msan
#   asan: -fsanitize=fuzzer-no-link,address,undefined (the flags of STK_FUZZ)
#   msan: -fsanitize=fuzzer-no-link,memory, origins tracked
# Everything happens under DIR/deps-VARIANT/ (src/, build/, install/): never
# in the source tree, never in /usr. The static libraries land in
# DIR/deps-VARIANT/install/lib, the headers in .../include. Prints nothing on
# success but a line per library built.
#
# Sources: the Debian source packages' upstream tarballs (libjpeg-turbo
# 2.1.5, libspng 0.7.3, zlib 1.2.13: the versions the system links, so the
# harnesses see the same behaviour), fetched with `apt-get source
# --download-only` into DIR/deps-src/ when missing; that needs deb-src lines
# in /etc/apt (e.g. a file in /etc/apt/sources.list.d/ with "Types: deb-src").
# STK_FUZZ_DEPS_SRC=FOLDER takes the tarballs (*.orig.tar.*) from FOLDER
# instead, for a machine without the archive.
#
# libjpeg-turbo is built without its SIMD code (WITH_SIMD=0, as its own MSan
# fuzzing does): the assembly is neither instrumented nor, under MSan,
# understood, and the C paths it replaces are the ones coverage can see. The
# system library uses SIMD, so the IDCT, upsampling and colour conversion
# that the harnesses exercise here are the C versions.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 DIR asan|msan" >&2; exit 2; }
mkdir -p "$1" && B=$(cd "$1" && pwd)
V=$2
CC=${CC:-clang}
case $V in
  asan) SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" ;;
  msan) SAN="-fsanitize=fuzzer-no-link,memory -fsanitize-memory-track-origins=2" ;;
  *) echo "$0: variant must be asan or msan" >&2; exit 2 ;;
esac
CFLAGS="-O2 -g -fno-omit-frame-pointer -fPIC $SAN"
D=$B/deps-$V
P=$D/install
S=$B/deps-src
stamp=$D/stamp
# The flags and this script's text make the stamp: a change rebuilds.
want=$(printf '%s\n%s\n' "$CC $CFLAGS" "$(cat "$0")" | cksum)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$P/lib/libjpeg.a" ] &&
  [ -f "$P/lib/libspng.a" ] && [ -f "$P/lib/libz.a" ]; then
  exit 0
fi

# --- the tarballs
mkdir -p "$S"
tarball() { # PACKAGE-PREFIX: the one orig tarball of it in $S, or nothing
  ls "$S"/"$1"_*.orig.tar.* 2>/dev/null | head -n 1
}
for pkg in libjpeg-turbo libspng zlib; do
  [ -n "$(tarball $pkg)" ] && continue
  if [ -n "${STK_FUZZ_DEPS_SRC:-}" ]; then
    cp "$STK_FUZZ_DEPS_SRC"/${pkg}_*.orig.tar.* "$S"/
  else
    (cd "$S" && apt-get source --download-only -qq $pkg >/dev/null 2>"$S/$pkg.apt.log") || {
      echo "fuzz/build-deps.sh: cannot fetch the $pkg source package (see $S/$pkg.apt.log)." >&2
      echo "  Enable deb-src in /etc/apt (a sources file with 'Types: deb-src'), apt-get update," >&2
      echo "  or set STK_FUZZ_DEPS_SRC to a folder holding ${pkg}_*.orig.tar.*" >&2
      exit 1
    }
  fi
  [ -n "$(tarball $pkg)" ] || { echo "fuzz/build-deps.sh: no ${pkg}_*.orig.tar.* in $S" >&2; exit 1; }
done

rm -rf "$D" && mkdir -p "$D/src" "$D/build" "$P/lib" "$P/include"
unpack() { # PACKAGE -> prints the folder it unpacked into
  mkdir -p "$D/src/$1"
  tar -xf "$(tarball "$1")" -C "$D/src/$1" --strip-components=1
  echo "$D/src/$1"
}
log=$D/build.log
: >"$log"
run() { "$@" >>"$log" 2>&1 || { echo "fuzz/build-deps.sh: failed: $*; see $log" >&2; tail -n 20 "$log" >&2; exit 1; }; }
ncpu=$(nproc 2>/dev/null || echo 2)

# --- zlib (libspng's inflate: instrumented too, for MSan's sake and for coverage)
z=$(unpack zlib)
(cd "$z" && run env CC="$CC" CFLAGS="$CFLAGS" ./configure --static --prefix="$P" --libdir="$P/lib")
run make -C "$z" -j "$ncpu" libz.a
run make -C "$z" install
echo "built zlib ($V) into $P"

# --- libjpeg-turbo: the libjpeg API only, static, C code paths
j=$(unpack libjpeg-turbo)
run cmake -S "$j" -B "$D/build/libjpeg-turbo" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_C_FLAGS_RELEASE="-DNDEBUG" \
  -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_SIMD=OFF -DWITH_TURBOJPEG=OFF -DWITH_JAVA=OFF
run cmake --build "$D/build/libjpeg-turbo" -j "$ncpu" --target jpeg-static
# copied by hand: its install step wants the programs too
cp "$D/build/libjpeg-turbo/libjpeg.a" "$P/lib/"
cp "$j/jpeglib.h" "$j/jmorecfg.h" "$j/jerror.h" "$D/build/libjpeg-turbo/jconfig.h" "$P/include/"
echo "built libjpeg-turbo ($V) into $P"

# --- libspng, against the zlib above: one C file (its CMake build cannot
# make the static library alone)
s=$(unpack libspng)
run $CC $CFLAGS -DNDEBUG -DSPNG_STATIC -I"$P/include" -c "$s/spng/spng.c" -o "$D/build/spng.o"
run ar rcs "$P/lib/libspng.a" "$D/build/spng.o"
cp "$s/spng/spng.h" "$P/include/"
echo "built libspng ($V) into $P"

echo "$want" >"$stamp"
