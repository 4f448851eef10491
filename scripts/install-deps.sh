#!/usr/bin/env bash
# Installs the Debian packages stoker builds, tests and benchmarks with.
# Only packages that are missing are installed, so a second run is a no-op.
# Usage: scripts/install-deps.sh [--python]   (--python adds torch, torchvision, PIL, pytest, matplotlib)
#        scripts/install-deps.sh --fuzz       (adds clang and libFuzzer, for make fuzz)
#        scripts/install-deps.sh --sanitizers (adds clang and valgrind, for the sanitizer matrix)
set -eu
pkgs="build-essential cmake pkg-config libjpeg62-turbo-dev libspng-dev libpng-dev libjpeg-turbo-progs"
if [ "${1:-}" = "--python" ]; then
  pkgs="$pkgs python3-dev python3-torch python3-torchvision python3-pil python3-numpy python3-pytest python3-setuptools python3-pip python3-venv python3-yaml python3-matplotlib"
fi
if [ "${1:-}" = "--fuzz" ]; then
  pkgs="$pkgs clang libclang-rt-dev"
fi
# make test-asan-clang, test-tsan and test-valgrind (clang's runtimes; gcc's come with build-essential)
if [ "${1:-}" = "--sanitizers" ]; then
  pkgs="$pkgs clang libclang-rt-dev valgrind"
fi
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing
