#!/bin/sh
# Builds the fuzz targets under MemorySanitizer (clang), in BUILD: stoker's
# sources, the harnesses, and libjpeg-turbo, libspng, zlib, libwebp and
# libtiff built from source under MSan too (fuzz/build-deps.sh BUILD msan).
# MSan needs every line of C that touches the pixels instrumented, or it
# reports the bytes an uninstrumented library wrote as uninitialised; stoker
# links no other library but libc (which MSan's interceptors cover), so this
# is all of it.
# `make fuzz-msan` calls it, then fuzz/run.sh.
#
# Not through CMake: STK_FUZZ builds everything under ASan and UBSan, which
# cannot be combined with MSan. Usage: fuzz/build-msan.sh BUILD TARGET...
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BUILD TARGET..." >&2; exit 2; }
CC=${CC:-clang}
mkdir -p "$1" && B=$(cd "$1" && pwd)
shift
fuzz/build-deps.sh "$B" msan
P=$B/deps-msan/install
SAN="-fsanitize=memory -fsanitize-memory-track-origins=2"
CFLAGS="-std=c11 -O2 -g -fno-omit-frame-pointer -DNDEBUG -Wall -Wno-unused-parameter $SAN"
INC="-Iinclude -Isrc -I$P/include"
O=$B/obj
mkdir -p "$O"
ncpu=$(nproc 2>/dev/null || echo 2)
rm -f "$O"/*.o
# the library: every C file of src/ (the GPU code opens CUDA at run time only)
find src -name '*.c' | sort >"$O/sources"
while read -r f; do
  o=$O/$(echo "$f" | tr / _).o
  echo "$CC $CFLAGS -fsanitize=fuzzer-no-link -fvisibility=hidden $INC -c $f -o $o"
done <"$O/sources" | xargs -P "$ncpu" -I{} sh -c '{}'
rm -f "$O/libstoker.a"
ar rcs "$O/libstoker.a" "$O"/src_*.o
# fuzz_util.c without coverage tracing, as in the CMake build (fuzz/CMakeLists.txt)
$CC $CFLAGS $INC -c fuzz/fuzz_util.c -o "$O/fuzz_util.o"
for t in "$@"; do
  $CC $CFLAGS -fsanitize=fuzzer $INC fuzz/fuzz_$t.c "$O/fuzz_util.o" "$O/libstoker.a" \
    "$P/lib/libspng.a" "$P/lib/libwebpdemux.a" "$P/lib/libwebp.a" "$P/lib/libtiff.a" \
    "$P/lib/libjpeg.a" "$P/lib/libz.a" -lpthread -lm -ldl -o "$B/fuzz_$t"
done
echo "built the MSan fuzz targets in $B: $*"
