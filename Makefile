# stoker: a Makefile front for the CMake build.
#   make         build build/stoker and build/libstoker.so
#   make demo    install what is missing, build, make the synthetic dataset, benchmark it
#   make test    build and run every test, also under AddressSanitizer and UBSan
#   make test-gpu the GPU tests alone (they skip without a GPU)
#   make test-wheel  the wheel: built, repaired by auditwheel, tested installed in a fresh venv
#   make install [PREFIX=/usr/local]  the header, libstoker.so, stoker, stoker.pc, CMake package
#   make fuzz SECONDS=N  run every fuzz target for N seconds (clang, libFuzzer)
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_DIR   ?= data/synth
DEMO_IMAGES ?= 2000
DEMO_CLASSES ?= 100
# CI turns warnings into errors.
CMAKE_FLAGS ?= $(if $(CI),-DSTK_WERROR=ON,)

.PHONY: all deps demo test test-c test-asan test-py test-gpu clean

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
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS)

# The Python package's tests, with the interpreter torch is installed for.
PYTHON ?= /usr/bin/python3
test-py: all
	PYTHONPATH=python $(PYTHON) -m pytest -q python/tests

# The GPU tests alone (they skip cleanly without a GPU).
test-gpu: all
	cd $(BUILD) && ctest --output-on-failure -R test_gpu
	PYTHONPATH=python $(PYTHON) -m pytest -q -rs python/tests/test_gpu.py

# The wheel as users get it: built by pip from the declared build
# dependencies, repaired by auditwheel (libjpeg-turbo and libspng inside),
# installed into fresh virtualenvs and tested from outside the tree. Needs PyPI.
.PHONY: test-wheel install
test-wheel:
	PYTHON=$(PYTHON) scripts/test-wheel.sh

# For C users, under $(PREFIX) (DESTDIR is honoured): stoker.h, libstoker.so,
# the stoker command, stoker.pc and the CMake package (find_package(stoker)).
PREFIX ?= /usr/local
install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

test:
	@scripts/install-deps.sh --python
	@$(MAKE) --no-print-directory test-c
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory test-py
	@$(MAKE) --no-print-directory test-wheel

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

# Fuzzing (fuzz/): builds the libFuzzer targets with clang under ASan and
# UBSan in $(FUZZ_BUILD), then runs each for $(SECONDS) seconds, one at a
# time. New inputs collect in $(FUZZ_BUILD)/corpus/, crashes in
# $(FUZZ_BUILD)/crashes/; docs/RELIABILITY.md has the figures.
FUZZ_BUILD ?= build-fuzz
SECONDS    ?= 60
FUZZ_TARGETS ?= jpeg png markers list tar cache
.PHONY: fuzz
fuzz:
	@scripts/install-deps.sh --fuzz
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DSTK_FUZZ=ON \
	  -DSTK_TESTS=OFF -DSTK_PYTHON=OFF -DSTK_GPU=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
	@fuzz/run.sh $(FUZZ_BUILD) $(SECONDS) $(FUZZ_TARGETS)
