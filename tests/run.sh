#!/usr/bin/env bash
# The test runner behind `make test`: unit tests (cmocka), the same unit tests under
# ASan/UBSan, then the integration tests (pytest, real processes, run as root).
# Ends with one line "tests: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
passed=0 failed=0 skipped=0
failures=()

run_cmocka_dir() { # $1 = build dir, $2 = label
	local t out rc runs fails
	for t in "$1"/tests/unit/test_*; do
		[ -x "$t" ] && [ -f "$t" ] || continue
		case "$t" in *.o|*.d) continue;; esac
		out=$(CMOCKA_MESSAGE_OUTPUT=stdout "$t" 2>&1); rc=$?
		runs=$(grep -c '^\[ RUN      \]' <<<"$out")
		fails=$(grep -cE '^\[  (FAILED|ERROR) +\] [^0-9]' <<<"$out")
		skips=$(grep -c '^\[  SKIPPED \] [^0-9]' <<<"$out")
		if [ "$rc" -ne 0 ] && [ "$fails" -eq 0 ]; then fails=1; fi
		passed=$((passed + runs - fails - skips)); failed=$((failed + fails)); skipped=$((skipped + skips))
		if [ "$fails" -ne 0 ]; then
			failures+=("$2 $(basename "$t")")
			echo "$out"
		fi
		printf '%-6s %-40s %3d run, %d failed\n' "$2" "$(basename "$t")" "$runs" "$fails"
	done
}

# pytest on $2...; counts into the totals, and $1 into the failures if any failed
run_pytest() {
	local label=$1 out rc line p f s n
	shift
	out=$(BUILD="$BUILD" /usr/bin/python3 -m pytest -q -p no:cacheprovider -rfEs "$@" 2>&1); rc=$?
	echo "$out"
	line=$(grep -E '^[=]* ?[0-9]+ (passed|failed|error|skipped)' <<<"$out" | tail -1)
	p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+'); p=${p:-0}
	f=0; for n in $(grep -oE '[0-9]+ (failed|error|errors)' <<<"$line" | grep -oE '[0-9]+'); do f=$((f + n)); done
	s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+'); s=${s:-0}
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
	[ "$f" -eq 0 ] || failures+=("$label")
}

echo "== unit tests"
run_cmocka_dir "$BUILD" unit

# the test doubles check themselves: a double that lies would make every test lie
if out=$("$BUILD/tests/doubles/selftest" 2>&1); then
	passed=$((passed + 1)); echo "unit   doubles selftest                          ok"
else
	echo "$out"; failed=$((failed + 1)); failures+=("doubles selftest")
fi

if [ "${SKIP_SAN:-0}" != 1 ]; then
	echo "== unit tests under ASan/UBSan"
	if make -s -j"$JOBS" SAN=1 BUILD=build-san sanitized-unit-tests sanitized-injector \
		>/tmp/aiprof-san-build.log 2>&1; then
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
			run_cmocka_dir build-san san
	else
		cat /tmp/aiprof-san-build.log
		failed=$((failed + 1)); failures+=("san build")
	fi
fi

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
	echo "== fuzz targets (${FUZZ_SECONDS:-15}s each)"
	out=$(FUZZ_SECONDS=${FUZZ_SECONDS:-15} bash tests/fuzz/run.sh 2>&1); rc=$?
	echo "$out" | tail -20
	line=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
	p=$(sed -E 's/^fuzz: ([0-9]+) passed.*/\1/' <<<"$line"); p=${p:-0}
	f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line"); f=${f:-0}
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	passed=$((passed + p)); failed=$((failed + f))
	[ "$f" -eq 0 ] || failures+=("fuzz")
fi

if [ "${SKIP_INTEGRATION:-0}" != 1 ]; then
	echo "== integration tests"
	dirs=(tests/integration)
	[ -d e2e ] && ls e2e/test_*.py >/dev/null 2>&1 && dirs+=(e2e)
	run_pytest integration ${PYTEST_ARGS:-} "${dirs[@]}"
fi

# A target that damages its ring, against the injector built with ASan/UBSan: a read past
# a buffer that happens not to crash the plain build shows here. The library injected is
# the plain one (an ASan library cannot be loaded into a process without the ASan runtime).
if [ "${SKIP_SAN:-0}" != 1 ] && [ "${SKIP_INTEGRATION:-0}" != 1 ] && [ -x build-san/aiprof ]; then
	echo "== the hostile ring, against aiprof built with ASan/UBSan"
	AIPROF_BIN="$PWD/build-san/aiprof" AIPROF_LIB="$PWD/$BUILD/libaiprof.so" \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
		run_pytest "hostile ring under ASan" tests/integration/test_hostile_ring.py
fi

[ "${#failures[@]}" -eq 0 ] || printf 'FAILED: %s\n' "${failures[@]}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
