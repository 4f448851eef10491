#!/usr/bin/env bash
# The resampler's NEON code (src/ops/resample.c, aarch64) against the portable
# code, byte for byte, on a machine that is not ARM: tests/test_ops.c with the
# few sources it needs (src/ops/resample.c and geom.c, src/core/common.c; no
# codec libraries) cross-compiled for aarch64 and run under qemu-user. There
# NEON is resample level 1, and the test runs every level on random images
# and geometries (both filters, flip, both pass orders, every dtype and
# layout, odd widths, tight sources) against its scalar reference, and
# checks the recorded checksum. Three builds, each with the project's
# warnings as errors: gcc -O3 (as the release build compiles resample.c),
# clang --target=aarch64-linux-gnu where clang is installed, and gcc -O1 under
# AddressSanitizer + UBSan (fewer cases: about 4x slower under qemu). gcc's
# ASan checks the NEON code's plain vector loads and stores (LD1/ST1), not
# the structured ones (LD3 of the store's levels; ST2-ST4 into the batch,
# where the test's guard bytes past the image catch a write too far).
#
# qemu emulates: its timings say nothing about the speed on ARM hardware.
#
# Usage: scripts/test-neon.sh      (make test-neon, which first runs
#                                   scripts/install-deps.sh --cross)
# Installs nothing: when a tool is missing it says which package has it and
# exits 1.
# Environment: STOKER_NEON_DIR (build-neon), the build folder;
#              STOKER_NEON_CASES (640), random cases of the plain builds;
#              AARCH64_CC (aarch64-linux-gnu-gcc), AARCH64_SYSROOT
#              (/usr/aarch64-linux-gnu), QEMU_AARCH64 (qemu-aarch64, else
#              qemu-aarch64-static).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${STOKER_NEON_DIR:-build-neon}
cases=${STOKER_NEON_CASES:-640}
cc=${AARCH64_CC:-aarch64-linux-gnu-gcc}
sysroot=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
qemu=${QEMU_AARCH64:-$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)}

missing=()
command -v "$cc" >/dev/null 2>&1 || missing+=("$cc (Debian/Ubuntu: gcc-aarch64-linux-gnu)")
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] && [ -e "$sysroot/include/stdio.h" ] ||
  missing+=("the aarch64 C library in $sysroot (Debian/Ubuntu: libc6-dev-arm64-cross)")
[ -n "$qemu" ] && command -v "$qemu" >/dev/null 2>&1 || missing+=("qemu-aarch64 (Debian/Ubuntu: qemu-user or qemu-user-static)")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test-neon: missing, install (scripts/install-deps.sh --cross does on Debian and Ubuntu):" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  exit 1
fi

mkdir -p "$dir"
srcs=(tests/test_ops.c src/ops/resample.c src/ops/geom.c src/core/common.c)
warn=(-std=c11 -ffp-contract=off -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter -Werror -Iinclude -Isrc -Itests)
run() { # NAME CASES: runs $dir/NAME under qemu
  echo "== test-neon: $1 ($2 cases)"
  STK_TEST_RESAMPLE_CASES=$2 ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$qemu" -L "$sysroot" "$dir/$1" | grep -E "resampler|checks" ||
    { echo "test-neon: FAIL: $1" >&2; exit 1; }
}

"$cc" "${warn[@]}" -O3 "${srcs[@]}" -lm -o "$dir/test_ops_gcc"
out=$(STK_TEST_RESAMPLE_CASES=1 "$qemu" -L "$sysroot" "$dir/test_ops_gcc" 2>&1) ||
  { echo "test-neon: FAIL: the aarch64 test under $qemu: $out" >&2; exit 1; }
grep -q "ISA levels 0..1 " <<<"$out" || { echo "test-neon: FAIL: the aarch64 build has no NEON level: $out" >&2; exit 1; }
run test_ops_gcc "$cases"
if command -v clang >/dev/null 2>&1; then
  clang --target=aarch64-linux-gnu "${warn[@]}" -O3 "${srcs[@]}" -lm -o "$dir/test_ops_clang"
  run test_ops_clang "$cases"
else
  echo "== test-neon: no clang, its build skipped"
fi
"$cc" "${warn[@]}" -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
  "${srcs[@]}" -lm -o "$dir/test_ops_asan"
run test_ops_asan 160
echo "test-neon: passed (correctness under qemu only; the speed of the NEON code is not measured)"
