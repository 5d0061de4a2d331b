#!/bin/sh
# The examples under ASan+UBSan behave as without: built in build-asan/
# (configure --enable-sanitizers: -fsanitize=address,undefined), run with
# no MRMGR_* variable set, so the library's automatic mode decides (under
# a sanitizer the patched libc with the sanitizer allocator's hooks:
# doc/monitor.md, "Under a sanitizer"), and their output
# compared with the ordinary build's (build/, built already) after
# addresses, keys, pids and timings are normalised. The caching examples
# must report hits.
#
# Usage: scripts/ci-sanitizer-examples.sh   (from anywhere)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
plain="$top/build"
asan="$top/build-asan"

for v in $(env | sed -n 's/^\(MRMGR_[A-Z_]*\)=.*/\1/p'); do
	unset "$v"
done
[ -x "$plain/examples/basic_cache" ] || {
	echo "ci-sanitizer-examples: build the ordinary tree first (scripts/build.sh)" >&2
	exit 1
}
mkdir -p "$asan"
cd "$asan"
[ -f Makefile ] || ../configure -q --enable-sanitizers CFLAGS='-g -O1'
make -s -j2 >/dev/null

# Differences that say nothing about behaviour: addresses and keys, pids,
# timings and sizes with a fraction (the sanitizer's allocator lays
# memory out otherwise), the order of two processes' lines.
# The demo's counters depend on where its 48 malloc'd buffers land (their
# page spans decide what the 6 MiB bound evicts; the sanitizer's
# allocator aligns them otherwise): for it, hits > 0 and no stale access
# are checked, not the counts.
norm() {
	sed -E -e 's/0x[0-9a-f]+/HEX/g' -e 's/pid [0-9]+/pid N/g' \
		-e 's/[0-9]+\.[0-9]+/N.N/g' -e 's/ +/ /g' "$1" |
		if [ "$2" = demo ]; then
			grep -v '^ *\(hits\|invalidations\|merges\|regions now\|registrations\|peak\) '
		else
			cat
		fi | sort
}

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
for ex in "basic_cache" "demo --messages 2000" "odp_prefetch" "odp_prefetch --rxe" \
	"growable_buffer" "shared_mr" "export_import" "export_import --rxe"; do
	name=$(echo "$ex" | tr ' -' '__')
	# shellcheck disable=SC2086 # the example's arguments
	if ! "$plain"/examples/$ex >"$out/$name.plain" 2>"$out/$name.plain.err"; then
		echo "  $ex: fails without the sanitizer" >&2
		cat "$out/$name.plain.err" >&2
		failed=1
		continue
	fi
	# shellcheck disable=SC2086
	if ! timeout 300 "$asan"/examples/$ex >"$out/$name.asan" 2>"$out/$name.asan.err"; then
		echo "  $ex: fails under ASan+UBSan" >&2
		cat "$out/$name.asan" "$out/$name.asan.err" >&2
		failed=1
		continue
	fi
	if grep -q "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" \
			"$out/$name.asan.err"; then
		echo "  $ex: sanitizer report" >&2
		cat "$out/$name.asan.err" >&2
		failed=1
		continue
	fi
	norm "$out/$name.plain" "${ex%% *}" >"$out/$name.plain.n"
	norm "$out/$name.asan" "${ex%% *}" >"$out/$name.asan.n"
	if ! diff -u "$out/$name.plain.n" "$out/$name.asan.n" >"$out/$name.diff"; then
		echo "  $ex: output differs under ASan+UBSan (normalised):" >&2
		cat "$out/$name.diff" >&2
		failed=1
		continue
	fi
	hits=$(sed -n 's/^ *hits *\([0-9][0-9]*\).*/\1/p' "$out/$name.asan" | head -n 1)
	case $ex in
	basic_cache* | demo*)
		if [ "${hits:-0}" -le 0 ]; then
			echo "  $ex: no hits under ASan+UBSan" >&2
			failed=1
			continue
		fi
		echo "  $ex: same output, hits $hits" ;;
	*)
		echo "  $ex: same output" ;;
	esac
done
# Nothing on standard error either (the library says at info level that
# userfaultfd replaced the patched libc: test_monitor_modes checks it).
for f in "$out"/*.asan.err; do
	n=${f%.asan.err}
	if ! diff -u "$n.plain.err" "$f" >/dev/null; then
		echo "  ${n##*/}: standard error differs under ASan+UBSan:" >&2
		diff -u "$n.plain.err" "$f" >&2 || true
		failed=1
	fi
done
[ "$failed" = 0 ] || { echo "ci-sanitizer-examples: failures above" >&2; exit 1; }
