#!/bin/sh
# Builds libjpeg-turbo, libspng, zlib, libwebp and libtiff from source,
# instrumented like the fuzz targets, so that libFuzzer's coverage feedback
# and the sanitizers reach into the decoders (the system's libraries are
# neither). `make fuzz` and `make fuzz-msan` call it; a second run with the
# same flags is a no-op.
#
# Usage: fuzz/build-deps.sh DIR asan|msan
#   asan: -fsanitize=fuzzer-no-link,address,undefined (the flags of STK_FUZZ)
#   msan: -fsanitize=fuzzer-no-link,memory, origins tracked
# Everything happens under DIR/deps-VARIANT/ (src/, build/, install/): never
# in the source tree, never in /usr or /etc. The static libraries land in
# DIR/deps-VARIANT/install/lib, the headers in .../include. Prints nothing on
# success but a line per library built.
#
# Sources: Debian's source packages (libjpeg-turbo 2.1.5, libspng 0.7.3,
# zlib 1.2.13, libwebp 1.2.4, tiff 4.5.0), at the version of the binary
# package the system has installed when it has one (libjpeg62-turbo,
# libspng0, zlib1g, libwebp7, libtiff6: so the harnesses see the library the
# system links), else the archive's current one. The upstream tarball is
# unpacked and the Debian patches of debian/patches/series applied (for
# libwebp and tiff these are security fixes, CVE-2023-4863 among them).
# They are fetched into DIR/deps-src/ with `apt-get source --download-only`
# through a private apt state in DIR/deps-src/apt/: its sources are the
# system's Debian "deb" entries (/etc/apt/sources.list, sources.list.d/*.list
# and *.sources, those whose URI names debian) turned into "deb-src" ones,
# and `apt-get update` fills its own lists folder; /etc/apt and
# /var/lib/apt are only read, so no deb-src lines and no root are needed.
# STK_FUZZ_DEPS_SRC=FOLDER takes the files (PKG_*.orig.tar.* and, when there,
# PKG_*.debian.tar.*) from FOLDER instead, for a machine without the archive.
#
# libjpeg-turbo is built without its SIMD code (WITH_SIMD=0, as its own MSan
# fuzzing does): the assembly is neither instrumented nor, under MSan,
# understood, and the C paths it replaces are the ones coverage can see. The
# system library uses SIMD, so the IDCT, upsampling and colour conversion
# that the harnesses exercise here are the C versions. libwebp's SIMD is C
# with intrinsics, which the sanitizers instrument, so it stays on (CPU
# detection at run time, as the system's). libtiff is built with its own
# codecs (none, LZW, PackBits, CCITT fax, ThunderScan, NeXT, LogLuv,
# PixarLog), zlib (Deflate) and JPEG (new and old style) against the
# libraries above; Debian's also links libdeflate, LZMA, ZSTD, JBIG, WebP
# and LERC, left out here (a file using them is refused as by a libtiff
# without them).
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
# The packages: source package, the binary package the system links
PKGS="libjpeg-turbo:libjpeg62-turbo libspng:libspng0 zlib:zlib1g libwebp:libwebp7 tiff:libtiff6"
installed() { # BINARY-PACKAGE -> its source version ("1:2.1.5-2"), or nothing
  dpkg-query -W -f='${Status} ${source:Version}\n' "$1" 2>/dev/null |
    sed -n 's/^install ok installed //p' | head -n 1
}
vers=
for pb in $PKGS; do vers="$vers ${pb%%:*}=$(installed "${pb#*:}")"; done
# The flags, the versions and this script's text make the stamp: a change rebuilds.
want=$(printf '%s\n%s\n%s\n' "$CC $CFLAGS" "$vers" "$(cat "$0")" | cksum)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$P/lib/libjpeg.a" ] &&
  [ -f "$P/lib/libspng.a" ] && [ -f "$P/lib/libz.a" ] && [ -f "$P/lib/libwebp.a" ] &&
  [ -f "$P/lib/libwebpdemux.a" ] && [ -f "$P/lib/libtiff.a" ]; then
  exit 0
fi

# --- the source packages
mkdir -p "$S"
A=$S/apt
# apt-get with the private state of $A (made by apt_private on first use)
apt_priv() {
  apt-get -o Dir::Etc::SourceList="$A/sources.list" -o Dir::Etc::SourceParts="$A/sources.list.d" \
    -o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o Dir::Cache::pkgcache= \
    -o Dir::Cache::srcpkgcache= -o Debug::NoLocking=1 "$@"
}
apt_ready=
apt_private() { # deb-src entries from the system's Debian deb entries, and their lists
  [ -n "$apt_ready" ] && return 0
  rm -rf "$A" && mkdir -p "$A/sources.list.d" "$A/lists/partial" "$A/cache/archives/partial"
  etc=$(apt-config shell E Dir::Etc/d | sed -n "s/^E='\(.*\)'$/\1/p")
  etc=${etc:-/etc/apt/}
  # one-line format: "deb [options] URI SUITE COMPONENT..."
  cat "$etc"sources.list "$etc"sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" && /debian/ { $1 = "deb-src"; print }' >"$A/sources.list"
  # deb822 stanzas (*.sources): each enabled one with Types deb, on a Debian URI
  for f in "$etc"sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() {
        if (n && types ~ /(^|[ \t])deb([ \t]|$)/ && uris ~ /debian/ && enabled !~ /^[ \t]*(no|false)/) {
          for (i = 1; i <= n; i++) print (line[i] ~ /^Types:/ ? "Types: deb-src" : line[i])
          print ""
        }
        n = 0; types = ""; uris = ""; enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      { line[++n] = $0 }
      /^Types:/ { types = substr($0, 7) }
      /^URIs:/ { uris = $0 }
      /^Enabled:/ { enabled = substr($0, 9) }
      END { flush() }' "$f"
  done >"$A/sources.list.d/deb-src.sources"
  if [ ! -s "$A/sources.list" ] && [ ! -s "$A/sources.list.d/deb-src.sources" ]; then
    echo "fuzz/build-deps.sh: no Debian 'deb' entries in ${etc}sources.list{,.d} to take deb-src ones from;" >&2
    echo "  set STK_FUZZ_DEPS_SRC to a folder holding the PKG_*.orig.tar.* and PKG_*.debian.tar.* files" >&2
    exit 1
  fi
  apt_priv update >"$A/update.log" 2>&1 || {
    echo "fuzz/build-deps.sh: apt-get update on the private sources failed (see $A/update.log)" >&2
    tail -n 5 "$A/update.log" >&2
    exit 1
  }
  apt_ready=1
}
installed_of() { echo "$vers" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
pick() { # PACKAGE orig|debian: its file in $S, of the installed version if any, or nothing
  v=$(installed_of "$1")
  v=${v#*:} # no epoch in file names
  [ "$2" = orig ] && v=${v%-*}
  f=
  [ -n "$v" ] && f=$(ls "$S"/"$1_$v".$2.tar.* 2>/dev/null | grep -v '\.asc$' | head -n 1)
  # not installed, or STK_FUZZ_DEPS_SRC without that version: the newest there is
  [ -z "$f" ] && { [ -z "$v" ] || [ -n "${STK_FUZZ_DEPS_SRC:-}" ]; } &&
    f=$(ls "$S"/"$1"_*.$2.tar.* 2>/dev/null | grep -v '\.asc$' | sort -V | tail -n 1)
  echo "$f"
}
tarball() { pick "$1" orig; }
for pb in $PKGS; do
  pkg=${pb%%:*}
  [ -n "$(tarball "$pkg")" ] && continue
  if [ -n "${STK_FUZZ_DEPS_SRC:-}" ]; then
    cp "$STK_FUZZ_DEPS_SRC"/"$pkg"_*.orig.tar.* "$S"/
    cp "$STK_FUZZ_DEPS_SRC"/"$pkg"_*.debian.tar.* "$S"/ 2>/dev/null || true
  else
    apt_private
    v=$(installed_of "$pkg")
    (cd "$S" && apt_priv source --download-only -qq "$pkg${v:+=$v}" >"$S/$pkg.apt.log" 2>&1) || {
      echo "fuzz/build-deps.sh: cannot fetch the $pkg${v:+=$v} source package (see $S/$pkg.apt.log)." >&2
      echo "  Set STK_FUZZ_DEPS_SRC to a folder holding ${pkg}_*.orig.tar.* (and .debian.tar.*)" >&2
      exit 1
    }
  fi
  [ -n "$(tarball "$pkg")" ] || { echo "fuzz/build-deps.sh: no ${pkg}_*.orig.tar.* in $S" >&2; exit 1; }
done

rm -rf "$D" && mkdir -p "$D/src" "$D/build" "$P/lib" "$P/include"
unpack() { # PACKAGE -> prints the folder it unpacked into, Debian's patches applied
  mkdir -p "$D/src/$1"
  tar -xf "$(tarball "$1")" -C "$D/src/$1" --strip-components=1
  deb=$(pick "$1" debian)
  if [ -n "$deb" ]; then
    tar -xf "$deb" -C "$D/src/$1" debian
    if [ -f "$D/src/$1/debian/patches/series" ]; then
      sed 's/#.*//' "$D/src/$1/debian/patches/series" | while read -r p _; do
        [ -n "$p" ] || continue
        patch -d "$D/src/$1" -p1 -s -N <"$D/src/$1/debian/patches/$p" >>"$log" 2>&1 || {
          echo "fuzz/build-deps.sh: $1: Debian patch $p does not apply; see $log" >&2
          exit 1
        }
      done || exit 1
    fi
  fi
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

# --- libwebp and libwebpdemux: the libraries only
w=$(unpack libwebp)
run cmake -S "$w" -B "$D/build/libwebp" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_C_FLAGS_RELEASE="-DNDEBUG" \
  -DCMAKE_INSTALL_PREFIX="$P" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
  -DWEBP_BUILD_ANIM_UTILS=OFF -DWEBP_BUILD_CWEBP=OFF -DWEBP_BUILD_DWEBP=OFF \
  -DWEBP_BUILD_GIF2WEBP=OFF -DWEBP_BUILD_IMG2WEBP=OFF -DWEBP_BUILD_VWEBP=OFF \
  -DWEBP_BUILD_WEBPINFO=OFF -DWEBP_BUILD_LIBWEBPMUX=OFF -DWEBP_BUILD_WEBPMUX=OFF \
  -DWEBP_BUILD_EXTRAS=OFF
run cmake --build "$D/build/libwebp" -j "$ncpu" --target webp webpdemux
cp "$D/build/libwebp/libwebp.a" "$D/build/libwebp/libwebpdemux.a" "$P/lib/"
mkdir -p "$P/include/webp"
cp "$w/src/webp/decode.h" "$w/src/webp/demux.h" "$w/src/webp/mux_types.h" "$w/src/webp/types.h" \
  "$w/src/webp/encode.h" "$P/include/webp/"
echo "built libwebp ($V) into $P"

# --- libtiff, against the zlib and libjpeg above: its own codecs, Deflate
# and JPEG; no tools, tests, C++ or other libraries
t=$(unpack tiff)
run cmake -S "$t" -B "$D/build/tiff" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_C_FLAGS_RELEASE="-DNDEBUG" \
  -DCMAKE_INSTALL_PREFIX="$P" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
  -Dtiff-tools=OFF -Dtiff-tests=OFF -Dtiff-contrib=OFF -Dtiff-docs=OFF -Dcxx=OFF \
  -Dzlib=ON -DZLIB_INCLUDE_DIR="$P/include" -DZLIB_LIBRARY="$P/lib/libz.a" \
  -Djpeg=ON -Dold-jpeg=ON -Djpeg12=OFF -DJPEG_INCLUDE_DIR="$P/include" -DJPEG_LIBRARY="$P/lib/libjpeg.a" \
  -Dlibdeflate=OFF -Dlzma=OFF -Dzstd=OFF -Djbig=OFF -Dwebp=OFF -Dlerc=OFF -Dtiff-opengl=OFF \
  -Dsphinx=OFF
run cmake --build "$D/build/tiff" -j "$ncpu" --target tiff
cp "$D/build/tiff/libtiff/libtiff.a" "$P/lib/"
cp "$t/libtiff/tiff.h" "$t/libtiff/tiffio.h" "$t/libtiff/tiffvers.h" \
  "$D/build/tiff/libtiff/tiffconf.h" "$P/include/"
grep -q "^#define JPEG_SUPPORT 1" "$D/build/tiff/libtiff/tiffconf.h" &&
  grep -q "^#define ZIP_SUPPORT 1" "$D/build/tiff/libtiff/tiffconf.h" ||
  { echo "fuzz/build-deps.sh: libtiff configured without JPEG or zlib; see $log" >&2; exit 1; }
echo "built libtiff ($V) into $P"

echo "$want" >"$stamp"
