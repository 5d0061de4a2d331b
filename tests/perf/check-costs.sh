#!/bin/sh
# The costs that do not move between runs, each printed with its bound,
# failing when one is passed (issue 27 item 5: a change that adds a system
# call or a few hundred instructions to every miss is caught the day it
# lands, not by the next benchmark run):
#   - instructions per hit (get+put), 1 and 1,000 regions: callgrind on
#     bench/compare's hit loop (bench/callgrind.sh's method);
#   - instructions per miss: callgrind on bench/misschurn's loop (zero
#     registration cost; external mode, since under valgrind the patched
#     libc steps aside: the watch's own queries are the next row's);
#   - system calls per miss in the default configuration, counted by
#     strace -f -c over two runs of bench/misschurn (N and 2N operations,
#     the same seed: the difference is the misses' own), with
#     PROCMAP_QUERY (Linux 6.11+) and with /proc/self/maps read as text
#     (the query refused by a seccomp filter, as before 6.11).
# Seconds on an idle machine; needs valgrind and strace (install-deps.sh).
#
#   make -C build check-costs     (or: tests/perf/check-costs.sh RUNNER)
#
# RUNNER runs a program from the build tree (libtool --mode=execute); run
# from the build directory. Bounds: CC_HIT_MAX (139), CC_MISS_MAX (3100),
# CC_SYSCALLS_MAX (0.05 per miss).
#
# SPDX-License-Identifier: MIT
set -eu
runner=${1:-}
hit_max=${CC_HIT_MAX:-139}
miss_max=${CC_MISS_MAX:-3100}
sys_max=${CC_SYSCALLS_MAX:-0.05}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM
fail=0

for tool in valgrind callgrind_annotate strace; do
	command -v "$tool" >/dev/null || {
		echo "check-costs: $tool not found (scripts/install-deps.sh)" >&2
		exit 1
	}
done

# verdict WHAT VALUE BOUND UNIT
verdict() {
	if awk -v v="$2" -v b="$3" 'BEGIN { exit !(v <= b) }'; then
		echo "ok    $1: $2${4:+ $4} (bound $3)"
	else
		echo "FAIL  $1: $2${4:+ $4} (bound $3)"
		fail=1
	fi
}

# cg_lib FILE FN -> instructions outside FN's own code (what it calls)
cg_lib() {
	total=$(callgrind_annotate "$1" |
		awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
	self=$(callgrind_annotate --inclusive=no "$1" |
		awk -v fn="$2" 'index($0, fn) { gsub(",", "", $1); s += $1 }
				END { print s + 0 }')
	echo $((total - self))
}

hit_ops=20000
for r in 1 1000; do
	MRMGR_MONITOR=external $runner valgrind --tool=callgrind \
		--callgrind-out-file="$out/hit.$r" --toggle-collect=m_hit_loop \
		./bench/compare --only hit --child libmrmgr --regions "$r" \
		--threads 1 --no-key-rows --ops "$hit_ops" >/dev/null 2>"$out/log" || {
		cat "$out/log" >&2
		exit 1
	}
	verdict "instructions per hit (get+put), $r regions" \
		$(($(cg_lib "$out/hit.$r" m_hit_loop) / hit_ops)) "$hit_max" ""
done

# misschurn prints "OPS ops, MISSES misses, NS ns per miss, U unwatched"
field() { awk -v k="$2" '{ for (i = 2; i <= NF; i++) if ($i ~ "^" k) { print $(i - 1); exit } }' "$1"; }

MRMGR_MONITOR=external $runner valgrind --tool=callgrind \
	--callgrind-out-file="$out/miss" --toggle-collect=churn_loop \
	./bench/misschurn 20000 >"$out/miss.txt" 2>"$out/log" || {
	cat "$out/log" >&2
	exit 1
}
misses=$(field "$out/miss.txt" misses)
verdict "instructions per miss (zero registration cost)" \
	$(($(cg_lib "$out/miss" churn_loop) / misses)) "$miss_max" ""

# syscalls OPS [text] -> "CALLS MISSES UNWATCHED"
syscalls() {
	$runner strace -f -qq -c -o "$out/st" ./bench/misschurn "$@" >"$out/sc.txt" 2>"$out/log" || {
		cat "$out/log" >&2
		exit 1
	}
	echo "$(awk '$NF == "total" { print $4 }' "$out/st")" \
		"$(field "$out/sc.txt" misses)" "$(field "$out/sc.txt" unwatched)"
}

for how in query text; do
	arg=
	[ "$how" = text ] && arg=text
	# shellcheck disable=SC2046 # three numbers from each run, split on purpose
	set -- $(syscalls 10000 $arg) $(syscalls 20000 $arg)
	if [ "$3" != 0 ] || [ "$6" != 0 ]; then
		echo "FAIL  system calls per miss ($how): $3 / $6 gets unwatched (not the default configuration's caching)"
		fail=1
		continue
	fi
	verdict "system calls per miss, default configuration, maps by $how" \
		"$(awk -v a="$1" -v b="$4" -v m="$2" -v n="$5" 'BEGIN { r = (b - a) / (n - m); printf "%.3f", r < 0 ? 0 : r }')" \
		"$sys_max" "per miss"
done
exit $fail
