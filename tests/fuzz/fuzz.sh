#!/bin/sh
# Build and run the libFuzzer targets (tests/fuzz/fuzz_*.c): `make fuzz`
# after `configure --enable-fuzz`, which passes the variables below.
#
# Every tests/fuzz/fuzz_*.c in the source tree is a target: a new one needs
# no rule, only its file and a seed corpus in tests/fuzz/corpus/<name>/.
# The library's sources are compiled once with the fuzzer's coverage and
# ASan+UBSan (any UB aborts), and linked into each target.
#
# For each target: replay its corpus (every input once), then fuzz for
# FUZZ_SECONDS (default 30, at most 60) from it. A crash, a leak, a
# sanitizer report or an input slower than FUZZ_TIMEOUT seconds fails;
# the input that did it is kept in tests/fuzz/artifacts/<name>/ of the
# build directory, and the run goes on with the next target.
#
# Environment: FUZZ_CC, FUZZ_SRCDIR, FUZZ_LIB_SOURCES (from make),
# FUZZ_CPPFLAGS, FUZZ_LIBS, FUZZ_SECONDS, FUZZ_TIMEOUT, FUZZ_TARGETS
# (names to run, default all), FUZZ_JOBS (compile jobs, default 2).
# FUZZ_BUILD_ONLY=1: build, do not run.
set -eu
: "${FUZZ_CC:=clang}"
: "${FUZZ_SRCDIR:?run through make fuzz}"
: "${FUZZ_LIB_SOURCES:?run through make fuzz}"
: "${FUZZ_SECONDS:=30}"
: "${FUZZ_TIMEOUT:=10}"
: "${FUZZ_JOBS:=2}"
[ "$FUZZ_SECONDS" -le 60 ] || { echo "fuzz: FUZZ_SECONDS is at most 60" >&2; exit 2; }

out=tests/fuzz
obj=$out/obj
mkdir -p "$obj"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cflags="-std=gnu11 -g -O1 $san -Wall -Wno-unused-parameter ${FUZZ_CPPFLAGS:-}"

# ---------------------------------------------------------------- build
# A header newer than the last archive: every object again.
if [ -f "$obj/libmrmgr_fuzz.a" ] &&
	[ -n "$(find "$FUZZ_SRCDIR" -name '*.h' -newer "$obj/libmrmgr_fuzz.a" 2>/dev/null | head -n 1)" ]; then
	rm -f "$obj"/*.o
fi
objs=""
list=""
for f in $FUZZ_LIB_SOURCES; do
	case $f in *.c) ;; *) continue ;; esac
	o=$obj/$(echo "$f" | tr / _ | sed 's/\.c$/.o/')
	objs="$objs $o"
	list="$list $FUZZ_SRCDIR/$f:$o"
done
echo "  CC       library objects (-fsanitize=fuzzer-no-link,address,undefined)"
# shellcheck disable=SC2086 # word lists on purpose
printf '%s\n' $list | xargs -P "$FUZZ_JOBS" -n 1 sh -c '
	src=${0%%:*}; o=${0#*:}
	[ -f "$o" ] && [ "$o" -nt "$src" ] && exit 0
	exec '"$FUZZ_CC"' '"$cflags"' -fsanitize=fuzzer-no-link -fvisibility=hidden -c "$src" -o "$o"'
rm -f "$obj/libmrmgr_fuzz.a"
# shellcheck disable=SC2086
ar rcs "$obj/libmrmgr_fuzz.a" $objs

targets=""
for src in "$FUZZ_SRCDIR"/tests/fuzz/fuzz_*.c; do
	[ -f "$src" ] || continue
	name=$(basename "$src" .c)
	if [ -n "${FUZZ_TARGETS:-}" ]; then
		case " $FUZZ_TARGETS " in *" $name "*) ;; *) continue ;; esac
	fi
	echo "  CCLD     $out/$name (-fsanitize=fuzzer,address,undefined)"
	# shellcheck disable=SC2086
	$FUZZ_CC $cflags -fsanitize=fuzzer -o "$out/$name" "$src" \
		"$obj/libmrmgr_fuzz.a" ${FUZZ_LIBS:-} -lpthread
	targets="$targets $name"
done
[ -n "$targets" ] || { echo "fuzz: no target found" >&2; exit 1; }
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0

# ---------------------------------------------------------------- run
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for name in $targets; do
	corpus=$FUZZ_SRCDIR/tests/fuzz/corpus/$name
	art=$out/artifacts/$name
	work=$out/work/$name
	mkdir -p "$art" "$work"
	log=$out/$name.log
	if [ ! -d "$corpus" ]; then
		echo "fuzz: $name has no seed corpus (tests/fuzz/corpus/$name)" >&2
		status=1
		continue
	fi
	printf '%-22s replay %s inputs ... ' "$name" "$(ls "$corpus" | wc -l)"
	if ! "$out/$name" -runs=0 -timeout="$FUZZ_TIMEOUT" \
		-artifact_prefix="$art/" "$corpus" >"$log" 2>&1; then
		echo "FAILED (see $log)"
		tail -n 40 "$log" >&2
		status=1
		continue
	fi
	printf 'ok; fuzz %ss ... ' "$FUZZ_SECONDS"
	# New inputs go to a scratch corpus; the checked-in seeds stay as
	# they are. -rss_limit_mb bounds a run's memory (a leak shows).
	if ! "$out/$name" -max_total_time="$FUZZ_SECONDS" \
		-timeout="$FUZZ_TIMEOUT" -rss_limit_mb=2048 -max_len=4096 \
		-print_final_stats=1 -artifact_prefix="$art/" \
		"$work" "$corpus" >>"$log" 2>&1; then
		echo "FAILED (see $log; input in $art/)"
		tail -n 60 "$log" >&2
		status=1
		continue
	fi
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	echo "ok (${execs:-?} runs)"
done
exit $status
