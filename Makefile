# The two commands the README promises: `make run` and `make test`.
# Both install what is missing (apt), build, and run. Builds use the CMake
# presets in CMakePresets.json; build trees live under build/<preset>.
.PHONY: run test bench asan tsan fuzz deps build-release build-dev install clean

JOBS ?= 2
PREFIX ?= /usr/local
FUZZ_SECONDS ?= 60

deps:
	@bash scripts/install-deps.sh

build-release: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

build-dev: deps
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev -j $(JOBS)

# The main job: the guide's MLP on Fashion-MNIST under MirroredStrategy.
# Builds the lockstep command alone (the tests, benchmarks and examples are
# `make test`'s): on a fresh machine that is the difference between a few
# minutes and the whole tree.
run: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS) --target lockstep_cli
	@./build/release/cli/lockstep train

test: build-release
	@ctest --preset release

bench: build-release
	@./build/release/bench/tensor_bench
	@./build/release/bench/model_bench
	@./build/release/bench/data_bench
	@./build/release/bench/distribute_bench
	@./build/release/bench/checkpoint_bench
	@bench/multi_worker.sh build/release

# Headers, libraries, the lockstep command, a CMake package and lockstep.pc
# under $(PREFIX) (README: "Use Lockstep in your program").
install: build-release
	@cmake --install build/release --prefix $(PREFIX)

asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)
	@ASAN_OPTIONS=detect_leaks=1 ctest --preset asan

# Every parser of untrusted input under libFuzzer (clang, ASan + UBSan), each
# for FUZZ_SECONDS from the seeds in fuzz/corpus/ (docs/reliability.md).
fuzz: deps
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS) --target fuzz_targets
	@fuzz/run.sh build/fuzz $(FUZZ_SECONDS)

tsan: deps
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS)
	@ctest --preset tsan

clean:
	rm -rf build
