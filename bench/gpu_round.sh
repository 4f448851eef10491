#!/usr/bin/env bash
# The GPU checks of this round, on a machine with a CUDA GPU, in one run:
# build, the GPU tests (make test-gpu and the GPU cases of the Python tests),
# then (with --more) compute-sanitizer on the quick GPU test subset, the
# pinned-batch guard with and without it, and device="cuda" from remote
# shards and from the formats the GPU does not decode.
#
# usage: bench/gpu_round.sh [--more FORMATS_DIR]
# Environment: PYTHON (python3); CMAKE_ARGS (-DCMAKE_PREFIX_PATH=...) where the
# libraries are not installed system-wide.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ "${1:-}" != --more ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null || exit 1
  cmake --build build -j "$(nproc)" 2>&1 | grep -E "error|warning:" ; cmake --build build -j "$(nproc)" >/dev/null || exit 1
  echo "== make test-gpu"
  make --no-print-directory test-gpu PYTHON="$PY" 2>&1 | tail -n 25
  echo "== GPU cases of the other Python tests"
  PYTHONPATH=python "$PY" -m pytest -q -rs python/tests/test_pinned_release.py python/tests/test_hostile_gpu.py \
    python/tests/test_bicubic_warps.py python/tests/test_timm.py python/tests/test_formats.py python/tests/test_augment.py -k "gpu or cuda or queued or device" 2>&1 | tail -n 15
  exit 0
fi
FORMATS=${2:?usage: bench/gpu_round.sh --more FORMATS_DIR}
echo "== compute-sanitizer (STK_TEST_QUICK=1 tests/test_gpu)"
for tool in memcheck racecheck; do
  STK_TEST_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 99 build/tests/test_gpu >/tmp/san-$tool.log 2>&1
  echo "$tool: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards' /tmp/san-$tool.log) clean summaries)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" /tmp/san-$tool.log | tail -n 3
done
D=$(mktemp -d)
build/stoker synth "$D/img" --images 2000 --classes 10 --seed 0 >/dev/null
build/stoker pack "$D/img" "$D/shards" --tar --shard-size 4M >/dev/null
echo "== pinned batches copied with non_blocking=True, freed at once"
PYTHONPATH=python "$PY" bench/pinned_reuse.py "$D/img"
PYTHONPATH=python "$PY" bench/pinned_reuse.py "$D/img" --without-guard
echo "== device=cuda from http:// shards and from other formats"
PYTHONPATH=python "$PY" bench/remote_gpu.py "$D/shards" "$FORMATS"
