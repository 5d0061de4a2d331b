#!/bin/sh
# Instructions per cache hit (get + put), counted by callgrind: libmrmgr
# and UCX's rcache on bench/compare's hit workload (R regions of 64 KiB,
# get+put of a random 4 KiB page), 1 thread. Only the measured loop is
# collected (--toggle-collect on the driver's hit loop); the loop's own
# instructions (the random numbers, the address) are subtracted, so what
# is left is what the library calls execute, PLT stubs included.
# Deterministic: the same figures every run. Each cache runs in the
# process valgrind starts (--child: no child processes, which callgrind
# would not follow). Under valgrind libmrmgr's default memory-event source
# (the patched libc) steps aside, and nothing would be cached: libmrmgr
# runs with MRMGR_MONITOR=external here (the hit path is the same code).
#
#   make -C build bench-callgrind        (or: bench/callgrind.sh RUNNER)
#
# RUNNER runs a program from the build tree (libtool --mode=execute).
# Environment: CG_REGIONS (default "1 1000 100000"), CG_OPS (100000).
#
# SPDX-License-Identifier: MIT
set -eu
runner=${1:-}
regions=${CG_REGIONS:-1 1000 100000}
ops=${CG_OPS:-100000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

# count IMPL LOOPFN R -> instructions per op inside the library
count() {
	MRMGR_MONITOR=external $runner valgrind --tool=callgrind \
		--callgrind-out-file="$out/cg.$1.$3" \
		--toggle-collect="$2" ./bench/compare --only hit --child "$1" \
		--regions "$3" --threads 1 --no-key-rows --ops "$ops" >/dev/null 2>"$out/log" || {
		cat "$out/log" >&2
		exit 1
	}
	total=$(callgrind_annotate "$out/cg.$1.$3" |
		awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
	self=$(callgrind_annotate --inclusive=no "$out/cg.$1.$3" |
		awk -v fn="$2" 'index($0, fn) { gsub(",", "", $1); s += $1 }
				END { print s + 0 }')
	echo $(((total - self) / ops))
}

have_ucx=1
echo "instructions per get+put (callgrind, $ops hits, 1 thread)"
echo
echo "| regions | libmrmgr | UCX | libmrmgr/UCX |"
echo "|---:|---:|---:|---:|"
for r in $regions; do
	m=$(count libmrmgr m_hit_loop "$r")
	u=$(count UCX u_hit_loop "$r" 2>/dev/null) || { u=; have_ucx=0; }
	if [ -n "$u" ] && [ "$u" -gt 0 ]; then
		echo "| $r | $m | $u | $(awk -v a="$m" -v b="$u" 'BEGIN { printf "%.2f", a / b }') |"
	else
		echo "| $r | $m | - | - |"
	fi
done
[ "$have_ucx" = 1 ] || echo "(UCX was not found at configure time: libmrmgr alone)"
