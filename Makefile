# Makefile: a thin wrapper around CMake (the build is CMakeLists.txt).
#
#   make          install missing Debian packages, configure build/, build
#   make run      build, then the sbxlua REPL (ARGS='--session-opts {...}')
#   make test     build build-test/ with ASan+UBSan and -Werror, run every test
#   make bench    build, run the exec latency benchmark (tests/bench/run.sh)
#   make fuzz     build the libFuzzer targets (tests/fuzz) into build-fuzz/, run each FUZZ_SECONDS (60)
#   make compat   build, CPython's test suite on the host and in a session, diffed (tests/compat)
#   make soak     build, 10,000 runs over 50 sessions (tests/soak; SOAK_RUNS, SOAK_SESSIONS)
#   make abuse    build, each HTTP/2 attack class 20 s against sbxd, one row each (ABUSE_SECONDS, ABUSE_ONLY)
#   make format   clang-format the C sources
#   make install  build and install under PREFIX (default /usr/local; DESTDIR works)
#   make image    build, the container image as an OCI archive (IMAGE: build/sbx-image.oci.tar)
#   make e2e      make image, then the image under podman and three nodes behind haproxy
#   make clean    remove the build directories

BUILD      ?= build
TEST_BUILD ?= build-test
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE      ?= cmake
ARGS       ?=
PREFIX     ?= /usr/local

.PHONY: all deps build run test test-build bench compat fuzz soak abuse format install clean help \
	image e2e

all: build

help:
	@sed -n '3,15s/^# //p' Makefile

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

# COMPAT_ARGS: e.g. --backend userns --backend privileged --timeout 900 test_os
compat: build
	$(BUILD)/bin/sbxlua tests/compat/run.lua $(COMPAT_ARGS)

FUZZ_BUILD    ?= build-fuzz
FUZZ_SECONDS  ?= 60
SOAK_RUNS     ?= 10000
SOAK_SESSIONS ?= 50

fuzz: deps
	$(MAKE) -C tests/fuzz run OUT=$(abspath $(FUZZ_BUILD)) FUZZ_SECONDS=$(FUZZ_SECONDS)

soak: build
	$(BUILD)/bin/sbxlua tests/soak/soak.lua $(SOAK_RUNS) $(SOAK_SESSIONS)

# Debian's python3 (python3-h2); exits 1 when a bound of issue 14 is broken.
ABUSE_SECONDS ?= 20
ABUSE_ONLY    ?=
abuse: build
	/usr/bin/python3 tests/server/abuse.py --sbxd $(BUILD)/bin/sbxd --seconds $(ABUSE_SECONDS) \
		$(if $(ABUSE_ONLY),--only $(ABUSE_ONLY))

# The prefix is compiled in (an installed sbxlua finds lua/ and policies/
# there), so install configures build/ with it.
install: deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	$(CMAKE) --build $(BUILD) -j$(JOBS)
	$(CMAKE) --install $(BUILD)

# Issue 19: Debian packages and this build only (scripts/build-image.sh);
# the base root is cached in $(BUILD)/image/.
IMAGE ?= $(BUILD)/sbx-image.oci.tar
image: build
	@scripts/bootstrap-deps.sh --image
	scripts/build-image.sh $(BUILD) $(IMAGE)

e2e: image
	SBX_IMAGE=$(abspath $(IMAGE)) tests/e2e/run.sh $(BUILD)

format:
	@command -v clang-format >/dev/null || \
		{ echo "make format needs clang-format: apt-get install clang-format" >&2; exit 1; }
	find src tests -name '*.[ch]' -print0 | xargs -0 -r clang-format -i

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(FUZZ_BUILD)
