# gpuslice — the two commands: `make run` and `make test`. Both install their own dependencies.
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz
BUILD_DEB  ?= build-deb
FUZZ_SECONDS ?= 60
FUZZ_CI_SECONDS ?= 15
FUZZ_TARGETS ?=
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?=
# A compiler cache, when the machine has one (it is not a dependency): rebuilds of the three
# build trees share it.
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
CMAKE_FLAGS += -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
endif

.PHONY: all deps build build-asan build-fuzz run sim test test-asan fuzz fuzz-ci bench deb clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

$(BUILD_ASAN)/build.ninja:
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGPUSLICE_SANITIZE=ON -DGPUSLICE_BUILD_BENCH=OFF $(CMAKE_FLAGS)

build-asan: deps $(BUILD_ASAN)/build.ninja
	cmake --build $(BUILD_ASAN) -j $(JOBS)

# The libFuzzer targets (clang, ASan + UBSan); only they and the libraries they link are built.
$(BUILD_FUZZ)/build.ninja:
	cmake -S . -B $(BUILD_FUZZ) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DGPUSLICE_FUZZ=ON -DGPUSLICE_BUILD_BENCH=OFF $(CMAKE_FLAGS)

build-fuzz: deps $(BUILD_FUZZ)/build.ninja
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target $(if $(FUZZ_TARGETS),$(addsuffix _fuzz,$(FUZZ_TARGETS)),fuzz_targets)

# Runs gpuslice's main job (see README).
run: build
	scripts/run

# The simulator: the FGD paper's protocol on the bundled openb trace, every policy, seeds 42-51.
sim: build
	$(BUILD)/apps/gpuslice/gpuslice sim fgd

# Every test, in the normal build.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Every test again under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS) -LE no-asan

# Every fuzz target (or those in FUZZ_TARGETS, e.g. "http memcap") for FUZZ_SECONDS each, one
# after another (docs/fuzzing.md).
fuzz: build-fuzz
	fuzz/run $(BUILD_FUZZ) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The same, briefly (FUZZ_CI_SECONDS each): the seed corpora, which hold every crash found so
# far, plus a little new ground.
fuzz-ci: build-fuzz
	fuzz/run $(BUILD_FUZZ) $(FUZZ_CI_SECONDS) $(FUZZ_TARGETS)

bench: build
	scripts/bench

# The Debian package (packaging/CMakeLists.txt), from its own build: Debian's hardening flags,
# no tests or benchmarks; then lintian, which must be clean. Writes
# $(BUILD_DEB)/deb/gpuslice_<version>_<arch>.deb.
$(BUILD_DEB)/build.ninja:
	cmake -S . -B $(BUILD_DEB) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUSLICE_HARDENING=ON \
	  -DGPUSLICE_BUILD_TESTS=OFF -DGPUSLICE_BUILD_BENCH=OFF $(CMAKE_FLAGS)

deb: deps $(BUILD_DEB)/build.ninja
	cmake --build $(BUILD_DEB) -j $(JOBS)
	rm -f $(BUILD_DEB)/deb/*.deb
	cd $(BUILD_DEB) && cpack -G DEB --config CPackConfig.cmake
	lintian --fail-on error,warning,info --tag-display-limit 0 $(BUILD_DEB)/deb/*.deb
	@ls -l $(BUILD_DEB)/deb/*.deb

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_DEB)
