#!/usr/bin/env bash
# The build steps of docker/Dockerfile, one stage per call, so that the tests
# run the very same steps outside a container (python/tests/test_container.py).
#
#   build-steps.sh system          the compiler, CMake and the image libraries'
#                                  development files (apt; Ubuntu and Debian names)
#   build-steps.sh install SRC     pip install SRC (stoker's source tree) and
#                                  tensorboard (train.py --tensorboard) into the
#                                  current Python, then check that stoker loads
#
# Environment: PYTHON (default python3).
set -euo pipefail

stage=${1:?usage: build-steps.sh system | install SRC}
PY=${PYTHON:-python3}

case "$stage" in
system)
  # shellcheck disable=SC1091
  . /etc/os-release
  case "${ID:-}" in
    ubuntu) jpeg=libjpeg-turbo8-dev ;;
    *) jpeg=libjpeg62-turbo-dev ;;  # Debian's name for the same library
  esac
  pkgs="build-essential cmake pkg-config $jpeg libspng-dev"
  missing=""
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing="$missing $p"
  done
  if [ -z "$missing" ]; then
    echo "build-steps: system packages present: $pkgs"
    exit 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "build-steps: missing$missing (run as root to install them)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
  rm -rf /var/lib/apt/lists/*
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
