#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_*.c as a libFuzzer program (clang, ASan + UBSan) into
# build-fuzz/, then runs each for FUZZ_SECONDS (default 20) on a scratch copy of its seed
# corpus tests/fuzz/corpus/<name>/ (name = the file name without "fuzz_" and ".c").
# Exits non-zero if a target fails to build or the fuzzer finds a crash, leak or timeout;
# the input that did it is left in build-fuzz/crashes/.
#
# Each target says what it needs in comment lines of its own:
#   FUZZ_SOURCES: common/foo.c common/bar.c    (required: the code under test)
#   FUZZ_LIBS: -lelf -lz                       (optional: extra libraries)
#   FUZZ_ARGS: -max_len=65536                  (optional: extra libFuzzer flags)
#
#   FUZZ_SECONDS=60 bash tests/fuzz/run.sh           all targets, a minute each
#   bash tests/fuzz/run.sh procmaps                  just fuzz_procmaps
set -euo pipefail
cd "$(dirname "$0")/../.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
CLANG=${CLANG:-clang}
OUT=build-fuzz
CFLAGS=(-std=gnu11 -g -O1 -fno-omit-frame-pointer -D_GNU_SOURCE -I. -Icommon -Iinjector
	-Wall -Wextra -Werror -Wshadow -Wformat=2 -Wno-unused-parameter -Wno-format-nonliteral
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)

if ! command -v "$CLANG" >/dev/null; then
	echo "fuzz: $CLANG not found (apt-get install clang)" >&2
	exit 1
fi

# One header field of a target: the text after "NAME:" on its line, or empty.
field() { sed -n "s/^.*$2:[[:space:]]*//p" "$1" | head -n1; }

targets=()
for src in tests/fuzz/fuzz_*.c; do
	[ -e "$src" ] || continue
	name=$(basename "$src" .c)
	name=${name#fuzz_}
	if [ $# -gt 0 ]; then
		want=0
		for a in "$@"; do [ "$a" = "$name" ] && want=1; done
		[ "$want" = 1 ] || continue
	fi
	targets+=("$src")
done
if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz: no targets" >&2
	exit 1
fi

# headers the build generates (bpf/syscall_names.h) come from its folder
BUILD=${BUILD:-build}
[ -f "$BUILD/bpf/syscall_names.h" ] || make -s "$BUILD/bpf/syscall_names.h" BUILD="$BUILD" >/dev/null
CFLAGS+=(-I"$BUILD/bpf")

mkdir -p "$OUT/crashes"
scratch=$(mktemp -d /tmp/aiprof-fuzz-XXXXXX)
trap 'rm -rf "$scratch"' EXIT

failed=()
passed=0
for src in "${targets[@]}"; do
	name=$(basename "$src" .c)
	name=${name#fuzz_}
	read -r -a sources <<<"$(field "$src" FUZZ_SOURCES)"
	read -r -a libs <<<"$(field "$src" FUZZ_LIBS)"
	read -r -a args <<<"$(field "$src" FUZZ_ARGS)"
	if [ ${#sources[@]} -eq 0 ]; then
		echo "fuzz: $src has no FUZZ_SOURCES: line" >&2
		failed+=("$name (build)")
		continue
	fi

	echo "== fuzz_$name: build"
	if ! "$CLANG" "${CFLAGS[@]}" -o "$OUT/fuzz_$name" "$src" "${sources[@]}" \
		${libs[@]+"${libs[@]}"} -lstdc++; then
		failed+=("$name (build)")
		continue
	fi

	corpus="$scratch/$name"
	mkdir -p "$corpus"
	if [ "$name" = elfsym ] && [ ! -d tests/fuzz/corpus/elfsym ]; then
		# ELF seeds are built, not committed
		bash tests/fuzz/corpus/make-elf-seeds.sh >/dev/null
	fi
	if [ -d "tests/fuzz/corpus/$name" ]; then
		cp -r "tests/fuzz/corpus/$name/." "$corpus/"
	fi
	dict=()
	[ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")

	echo "== fuzz_$name: ${FUZZ_SECONDS}s on $(find "$corpus" -type f | wc -l) seeds"
	log="$OUT/fuzz_$name.log"
	if ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
		"$OUT/fuzz_$name" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$OUT/crashes/$name-" \
		${dict[@]+"${dict[@]}"} ${args[@]+"${args[@]}"} "$corpus" >"$log" 2>&1; then
		grep -E '^(stat::number_of_executed_units|stat::new_units_added|#[0-9]+[[:space:]]+DONE)' "$log" || true
		passed=$((passed + 1))
	else
		tail -n 60 "$log"
		echo "fuzz_$name: FAILED (full log: $log; inputs in $OUT/crashes/)"
		failed+=("$name")
	fi
done

echo "fuzz: ${passed} passed, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
	printf '  failed: %s\n' "${failed[@]}"
	exit 1
fi
