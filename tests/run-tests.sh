#!/usr/bin/env bash
# run-tests.sh: run every test of a build: the C unit tests (ctest) and the
# busted specs (run by the build's own sbxlua, so they exercise the real
# embedded runtime), with `luacheck .` and a clang-format check before the
# specs as one test each, then
# print, as the very last line:
#     tests: P passed, F failed, S skipped
# P = ctest passed + luacheck + clang-format + busted successes, F = failures + errors of all,
# S = ctest tests not run + busted pending.  Exits non-zero when anything
# failed, when a runner did not report, or when no test ran at all.
#
# usage: tests/run-tests.sh [BUILD_DIR [busted args...]]   (default: build-test)
# env:   SBX_SPEC_TIMEOUT (s, default 1500), SBX_UNIT_TIMEOUT (s, default 180)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${1:-build-test}
shift || true
build=$(cd "$build" 2>/dev/null && pwd) || {
	echo "run-tests: no build directory '${1:-build-test}' (run make test)" >&2
	echo "tests: 0 passed, 1 failed, 0 skipped"
	exit 1
}

passed=0 failed=0 skipped=0 broken=()
log=$(mktemp -d "${TMPDIR:-/tmp}/sbx-tests.XXXXXX")
trap 'rm -rf "$log"' EXIT
strip_ansi() { sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g'; }

# ---- C unit tests ----
echo "==> C unit tests (ctest)"
timeout -k 10 "${SBX_UNIT_TIMEOUT:-180}" \
	ctest --test-dir "$build" --output-on-failure 2>&1 | tee "$log/ctest"
ctest_rc=${PIPESTATUS[0]}
if grep -q 'No tests were found' "$log/ctest"; then
	: # none yet: counted as zero, the total check below catches "nothing ran"
elif summary=$(grep -E '[0-9]+ tests? failed out of [0-9]+' "$log/ctest" | tail -n1) &&
	[[ -n $summary ]]; then
	f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
	t=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$summary")
	# "The following tests did not run:" lists skipped tests, counted as passed by ctest
	s=$(grep -cE '^[[:space:]]+[0-9]+ - .*\((Skipped|Disabled)\)' "$log/ctest")
	passed=$((passed + t - f - s))
	failed=$((failed + f))
	skipped=$((skipped + s))
else
	broken+=("ctest did not report (exit $ctest_rc)")
	failed=$((failed + 1))
fi

# ---- luacheck: the Lua tree against the committed .luacheckrc ----
# One test: passed when `luacheck .` reports nothing, else failed with its
# report (a missing luacheck fails too: scripts/bootstrap-deps.sh installs it).
echo "==> luacheck ."
if ! command -v luacheck >/dev/null; then
	echo "run-tests: luacheck missing (apt-get install lua-check; scripts/bootstrap-deps.sh)"
	failed=$((failed + 1))
elif luacheck --formatter plain . >"$log/luacheck" 2>&1; then
	echo "luacheck: ok"
	passed=$((passed + 1))
else
	cat "$log/luacheck"
	echo "luacheck: FAILED (its report above)"
	failed=$((failed + 1))
fi

# ---- clang-format: the C tree against the committed .clang-format ----
# One test, like luacheck: passed when every C source and header is already
# formatted (make format fixes them), else failed with the files named.
echo "==> clang-format --dry-run"
if ! command -v clang-format >/dev/null; then
	echo "run-tests: clang-format missing (apt-get install clang-format; scripts/bootstrap-deps.sh)"
	failed=$((failed + 1))
else
	unformatted=$(find src tests -name '*.[ch]' -print | sort | while read -r f; do
		clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"
	done)
	if [[ -z $unformatted ]]; then
		echo "clang-format: ok"
		passed=$((passed + 1))
	else
		echo "$unformatted"
		echo "clang-format: FAILED: the files above differ from make format's output"
		failed=$((failed + 1))
	fi
fi

# ---- busted specs, run by sbxlua ----
spec_dirs=()
for d in tests/spec tests/security; do
	if [[ -n $(find "$d" -name '*_spec.lua' -print -quit 2>/dev/null) ]]; then
		spec_dirs+=("$d")
	fi
done
echo "==> Lua specs (busted under $build/bin/sbxlua): ${spec_dirs[*]:-none}"
if ((${#spec_dirs[@]})); then
	# ASan, UBSan and LeakSanitizer all stay on here (sbxlua's os.exit, which
	# busted ends with, closes the Lua state first, so what Lua still held is
	# freed, not reported).  If LSan ever misfires in the processes that clone
	# into namespaces, run with ASAN_OPTIONS=detect_leaks=0: it passes through.
	# Every program of the build starts with src/sanitize/asan_defaults.c's
	# defaults (GCC 12's libasan DTLS bug that crashed LSan's tracer at exit).
	timeout -k 10 "${SBX_SPEC_TIMEOUT:-1500}" \
		"$build/bin/sbxlua" /usr/bin/busted -o utfTerminal "$@" "${spec_dirs[@]}" \
		</dev/null 2>&1 | tee "$log/busted"
	busted_rc=${PIPESTATUS[0]}
	re='([0-9]+) success(es)? / ([0-9]+) failures? / ([0-9]+) errors? / ([0-9]+) pending'
	if summary=$(strip_ansi <"$log/busted" | grep -E "$re" | tail -n1) && [[ -n $summary ]]; then
		[[ $summary =~ $re ]]
		passed=$((passed + BASH_REMATCH[1]))
		failed=$((failed + BASH_REMATCH[3] + BASH_REMATCH[4]))
		skipped=$((skipped + BASH_REMATCH[5]))
		if ((busted_rc != 0 && BASH_REMATCH[3] + BASH_REMATCH[4] == 0)); then
			broken+=("busted exited $busted_rc after reporting no failure")
			failed=$((failed + 1))
		fi
	else
		broken+=("busted did not report (exit $busted_rc)")
		failed=$((failed + 1))
	fi
fi

# ---- fuzz smoke: each libFuzzer target for SBX_FUZZ_SMOKE_SECONDS (10) ----
# One test per target (tests/fuzz): passed when it ran its time without a
# crash (its committed corpus, regressions included, is replayed first).
echo "==> fuzz smoke (tests/fuzz, ${SBX_FUZZ_SMOKE_SECONDS:-10}s each)"
if ! command -v clang >/dev/null; then
	echo "run-tests: clang missing, fuzz targets skipped (scripts/bootstrap-deps.sh)"
	skipped=$((skipped + 4))
elif ! make -s -C tests/fuzz OUT="$build/fuzz" >"$log/fuzz-build" 2>&1; then
	cat "$log/fuzz-build"
	broken+=("the fuzz targets did not build")
	failed=$((failed + 1))
else
	for t in files codec match proxy h2guard; do
		scratch=$(mktemp -d "$log/fuzz-$t.XXXXXX")
		if timeout -k 10 $((${SBX_FUZZ_SMOKE_SECONDS:-10} + 60)) "$build/fuzz/fuzz_$t" \
			-rss_limit_mb=1024 -malloc_limit_mb=256 -max_len=4096 -timeout=10 -print_final_stats=1 \
			-max_total_time="${SBX_FUZZ_SMOKE_SECONDS:-10}" -artifact_prefix="$scratch/" \
			"$scratch" "tests/fuzz/corpus/$t" >"$log/fuzz-$t" 2>&1; then
			echo "fuzz_$t: ok ($(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log/fuzz-$t" | grep -oE '[0-9]+$') runs)"
			passed=$((passed + 1))
		else
			tail -n 40 "$log/fuzz-$t"
			echo "fuzz_$t: FAILED (crash input kept in build dir: $build/fuzz/)"
			cp "$scratch"/crash-* "$scratch"/oom-* "$scratch"/timeout-* "$build/fuzz/" 2>/dev/null
			failed=$((failed + 1))
		fi
	done
fi

status=0
for b in "${broken[@]}"; do
	echo "run-tests: $b" >&2
	status=1
done
if ((passed + failed == 0)); then
	echo "run-tests: no test ran" >&2
	status=1
fi
((failed == 0)) || status=1
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
