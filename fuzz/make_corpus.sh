#!/bin/sh
# Regenerates the seed corpora fuzz/corpus/<target>/ with fuzz/make_corpus.c,
# built in build-fuzz-replay/ (plain build, no fuzzer needed).
# Usage: fuzz/make_corpus.sh   (from the repository root)
set -eu
B=${FUZZ_REPLAY_BUILD:-build-fuzz-replay}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Debug -DSTK_PYTHON=OFF -DSTK_GPU=OFF >/dev/null
cmake --build "$B" -j 2 --target fuzz_make_corpus >/dev/null
# Only the generated seeds are replaced; hand-added files stay.
"$B/fuzz_make_corpus" fuzz/corpus
du -sh fuzz/corpus
