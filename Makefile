# brisk — top-level commands over CMake.
#   make             release build in build/ (libbrisk.so, libbrisk.a)
#   make test        the whole suite: release, ASan+UBSan and TSan builds, through ctest
#                    (FUZZ_SECONDS=n: how long the ASan tree's fuzz test runs, default 120)
#   make bench       release build + the benchmark comparison against the peer allocators
#                    (QUICK=1 for a short run, ONLY=larson,xmalloc, ONLY=regions or ONLY=real,
#                     ALLOC=brisk,mimalloc, CALLGRIND=1 for instruction counts); a full run
#                    with the region programs rewrites bench/results/published/<date>-regions/
#                    and the README's regions table, one with the real programs (python3,
#                    sqlite3, gcc, g++, git under LD_PRELOAD) <date>-real/ and its table
#   make install     release build, installed under PREFIX (default /usr/local): libbrisk.so
#                    (SONAME libbrisk.so.MAJOR), libbrisk.a, libbrisk-secure.so and .a,
#                    include/brisk.h and brisk/*.h,
#                    lib/pkgconfig/brisk.pc, lib/cmake/brisk/ (DESTDIR=... stages it)
#   make deb         release build + a Debian package, build/package/brisk_VERSION_ARCH.deb
#   make clean
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Debian's interpreter first: the packages ensure-deps installs (matplotlib) are its.
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 120
PREFIX ?= /usr/local

.PHONY: all build test test-release test-asan test-tsan bench install deb clean deps-build \
        deps-test deps-bench deps-deb

all: build

deps-build:
	@sh scripts/ensure-deps.sh build
deps-test:
	@sh scripts/ensure-deps.sh test
deps-bench:
	@sh scripts/ensure-deps.sh bench
deps-deb:
	@sh scripts/ensure-deps.sh deb

build: deps-build
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)

# Each suite is its own build tree; ctest's summary is what CI reads.
test-release: deps-test
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)
	cd build && ctest --output-on-failure -j $(JOBS)

test-asan: deps-test
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRISK_SANITIZE=address \
	  -DBRISK_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS)

test-tsan: deps-test
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRISK_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && ctest --output-on-failure -j $(JOBS)

test: test-release test-asan test-tsan

BENCH_ARGS :=
ifneq ($(QUICK),)
BENCH_ARGS += --quick
endif
ifneq ($(ONLY),)
BENCH_ARGS += --only $(ONLY)
endif
ifneq ($(ALLOC),)
BENCH_ARGS += --alloc $(ALLOC)
endif
ifneq ($(CALLGRIND),)
BENCH_ARGS += --callgrind
endif

bench: deps-bench build
	$(PYTHON) bench/run.py --build build $(BENCH_ARGS)

# cmake --install reads DESTDIR from the environment, where make puts it.
install: build
	cmake --install build --prefix "$(PREFIX)"

deb: deps-deb build
	cd build && cpack -G DEB

clean:
	rm -rf build build-asan build-tsan
