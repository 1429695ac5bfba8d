# Makefile: a thin wrapper around CMake (the build is CMakeLists.txt).
#
#   make          install missing Debian packages, configure build/, build
#   make run      build, then the sbxlua REPL (ARGS='--session-opts {...}')
#   make test     build build-test/ with ASan+UBSan and -Werror, run every test
#   make bench    build, run the exec latency benchmark (tests/bench/run.sh)
#   make format   clang-format the C sources
#   make install  build and install under PREFIX (default /usr/local; DESTDIR works)
#   make clean    remove the build directories

BUILD      ?= build
TEST_BUILD ?= build-test
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE      ?= cmake
ARGS       ?=
PREFIX     ?= /usr/local

.PHONY: all deps build run test test-build bench format install clean help

all: build

help:
	@sed -n '3,10s/^# //p' Makefile

deps:
	@scripts/bootstrap-deps.sh

# cmake --build reconfigures by itself when CMakeLists.txt or a globbed
# directory changes; configure explicitly only the first time.
build: deps
	@test -f $(BUILD)/CMakeCache.txt || \
		$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	$(CMAKE) --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/bin/sbxlua $(ARGS)

test-build: deps
	@test -f $(TEST_BUILD)/CMakeCache.txt || \
		$(CMAKE) -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Debug \
			-DSBX_SANITIZE=ON -DSBX_WERROR=ON
	$(CMAKE) --build $(TEST_BUILD) -j$(JOBS)

# A build failure still ends with the closing line CI reads.
test: deps
	@$(MAKE) --no-print-directory test-build || \
		{ echo "make test: the test build failed"; echo "tests: 0 passed, 1 failed, 0 skipped"; exit 1; }
	tests/run-tests.sh $(TEST_BUILD)

bench: build
	tests/bench/run.sh $(BUILD)

# The prefix is compiled in (an installed sbxlua finds lua/ and policies/
# there), so install configures build/ with it.
install: deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	$(CMAKE) --build $(BUILD) -j$(JOBS)
	$(CMAKE) --install $(BUILD)

format:
	@command -v clang-format >/dev/null || \
		{ echo "make format needs clang-format: apt-get install clang-format" >&2; exit 1; }
	find src tests -name '*.[ch]' -print0 | xargs -0 -r clang-format -i

clean:
	rm -rf $(BUILD) $(TEST_BUILD)
