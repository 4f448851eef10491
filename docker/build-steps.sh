#!/usr/bin/env bash
# The build steps of docker/Dockerfile, one stage per call, so that the tests
# run the very same steps outside a container (python/tests/test_container.py).
#
#   build-steps.sh system          the compiler, CMake and the image libraries'
#                                  development files (apt; Ubuntu and Debian names;
#                                  libspng from source where the archive has none)
#   build-steps.sh spng            libspng alone, from its pinned release tarball
#   build-steps.sh install SRC     pip install SRC (stoker's source tree) and
#                                  tensorboard (train.py --tensorboard) into the
#                                  current Python, then check that stoker loads
#
# Environment: PYTHON (default python3); STOKER_OS_RELEASE (/etc/os-release);
#              STOKER_SPNG_URL, STOKER_SPNG_PREFIX (/usr/local): libspng's source build.
set -euo pipefail

stage=${1:?usage: build-steps.sh system | spng | install SRC}
PY=${PYTHON:-python3}

# libspng's release, pinned by its checksum (the source build's).
SPNG_VERSION=0.7.4
SPNG_SHA256=47ec02be6c0a6323044600a9221b049f63e1953faf816903e7383d4dc4234487
SPNG_URL=${STOKER_SPNG_URL:-https://github.com/randy408/libspng/archive/refs/tags/v$SPNG_VERSION.tar.gz}
SPNG_PREFIX=${STOKER_SPNG_PREFIX:-/usr/local}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# The first of the packages that the archive has (printed), or failure.
first_known() {
  local p
  for p in "$@"; do
    if apt-cache show "$p" >/dev/null 2>&1; then echo "$p"; return 0; fi
  done
  return 1
}
build_spng() {
  local tmp
  tmp=$(mktemp -d)
  curl -fsSL -o "$tmp/libspng.tar.gz" "$SPNG_URL"
  if ! echo "$SPNG_SHA256  $tmp/libspng.tar.gz" | sha256sum -c --status -; then
    echo "build-steps: $SPNG_URL: checksum mismatch (expected sha256 $SPNG_SHA256): not built" >&2
    rm -rf "$tmp"
    exit 1
  fi
  tar -xzf "$tmp/libspng.tar.gz" -C "$tmp"
  cmake -S "$tmp/libspng-$SPNG_VERSION" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$SPNG_PREFIX" -DSPNG_STATIC=OFF -DBUILD_EXAMPLES=OFF
  cmake --build "$tmp/build" -j "$(nproc)"
  cmake --install "$tmp/build"
  ldconfig
  rm -rf "$tmp"
  echo "build-steps: libspng $SPNG_VERSION installed under $SPNG_PREFIX"
}

case "$stage" in
system)
  # The release's package names: libjpeg-turbo8-dev (Ubuntu) or
  # libjpeg62-turbo-dev (Debian), whichever the archive has; libspng-dev
  # where the archive has it, else libspng built from source (Ubuntu 22.04,
  # the PyTorch devel images' OS, has none).
  os_release=${STOKER_OS_RELEASE:-/etc/os-release}
  # shellcheck disable=SC1090
  . "$os_release"
  spng_present() {
    installed libspng-dev || [ -e "$SPNG_PREFIX/include/spng.h" ]
  }
  jpeg_present() { installed libjpeg-turbo8-dev || installed libjpeg62-turbo-dev; }
  missing=""
  for p in build-essential cmake pkg-config libwebp-dev libtiff-dev; do installed "$p" || missing="$missing $p"; done
  jpeg_present || missing="$missing libjpeg-turbo"
  spng_present || missing="$missing libspng"
  if [ -z "$missing" ]; then
    echo "build-steps: system packages present (${PRETTY_NAME:-${ID:-?}})"
    exit 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "build-steps: missing$missing (run as root to install them)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  pkgs="build-essential cmake pkg-config libwebp-dev libtiff-dev"
  if ! jpeg_present; then
    jpeg=$(first_known libjpeg-turbo8-dev libjpeg62-turbo-dev) ||
      { echo "build-steps: no libjpeg-turbo development package in ${PRETTY_NAME:-this release}'s archive" >&2; exit 1; }
    pkgs="$pkgs $jpeg"
  fi
  spng_source=""
  if ! spng_present; then
    if first_known libspng-dev >/dev/null; then
      pkgs="$pkgs libspng-dev"
    else
      echo "build-steps: ${PRETTY_NAME:-this release} has no libspng-dev: libspng $SPNG_VERSION from source"
      spng_source=1
      pkgs="$pkgs zlib1g-dev curl ca-certificates"
    fi
  fi
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs
  [ -z "$spng_source" ] || build_spng
  rm -rf /var/lib/apt/lists/*
  ;;
spng)
  # libspng from its release tarball into $SPNG_PREFIX (/usr/local), for a
  # system whose archive has no libspng-dev; needs cmake, a compiler, zlib1g-dev, curl.
  build_spng
  ;;
install)
  src=${2:?usage: build-steps.sh install SRC}
  # No pip cache: it would only make the image larger.
  "$PY" -m pip install --no-cache-dir "$src" tensorboard
  # From outside the source tree, so that the installed package is the one imported.
  (cd / && "$PY" -c "import stoker, stoker._stoker; print('stoker', stoker.__version__, 'installed in', stoker.__file__)")
  ;;
*)
  echo "build-steps: unknown stage $stage" >&2
  exit 2
  ;;
esac
