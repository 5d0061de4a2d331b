#!/bin/sh
# Two runs of bench/misschurn set against each other, run against run:
# A, then B, PAIRS times, and the median of the pairs' ratios (A's ns per
# miss over B's) with its quartiles. A and B run a second or less apart,
# so a shared machine's slow spells, which last seconds, fall on both: on
# a machine whose speed swings 2-3x within seconds, 150 pairs of 30,000
# operations set apart a difference of 3-5%, where the medians of each
# side alone did not set apart 10% (doc/perf.md, "The zero-cost miss").
#
#   cd build && ../bench/misschurn-ab.sh [-n PAIRS] 'A' 'B'
#
# A and B: misschurn's arguments, after any VAR=value settings for its
# environment, e.g. "30000 threads" against "30000 thread" (what the hit
# section's stripes cost), or "LD_LIBRARY_PATH=/tmp/old 30000" against
# "30000" (a build against another: the library is looked for there
# first). Runs bench/.libs/misschurn with the build's libraries.
#
# SPDX-License-Identifier: MIT
set -eu
pairs=150
if [ "${1:-}" = "-n" ]; then
	pairs=$2
	shift 2
fi
[ $# -eq 2 ] || {
	echo "usage: $0 [-n PAIRS] 'A' 'B' (misschurn's arguments)" >&2
	exit 2
}
[ -x bench/.libs/misschurn ] || {
	echo "$0: run from the build directory after make bench/misschurn" >&2
	exit 2
}
# one SPEC -> ns per miss: SPEC's VAR=value words set the environment
# (an LD_LIBRARY_PATH goes before the build's libraries), the rest are
# misschurn's arguments.
one() {
	libs="$PWD/lib/.libs"
	envs=
	args=
	for w in $1; do
		case "$w" in
		LD_LIBRARY_PATH=*) libs="${w#LD_LIBRARY_PATH=}:$libs" ;;
		*=*) envs="$envs $w" ;;
		*) args="$args $w" ;;
		esac
	done
	# shellcheck disable=SC2086 # the words split on purpose
	env LD_LIBRARY_PATH="$libs" $envs bench/.libs/misschurn $args |
		sed -n 's/.* misses, \([0-9.]*\) ns per miss.*/\1/p'
}

i=0
while [ "$i" -lt "$pairs" ]; do
	a=$(one "$1")
	b=$(one "$2")
	echo "$a $b"
	i=$((i + 1))
done | awk -v A="$1" -v B="$2" '
	$1 > 0 && $2 > 0 { r[n++] = $1 / $2; sa += $1; sb += $2 }
	END {
		if (!n) { print "no runs"; exit 1 }
		for (i = 0; i < n; i++)
			for (j = i + 1; j < n; j++)
				if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
		printf "A: %s\nB: %s\n%d pairs: A/B median %.3f, quartiles %.3f-%.3f; mean ns per miss A %.0f, B %.0f\n",
			A, B, n, r[int((n - 1) / 2)], r[int(n / 4)], r[int(3 * n / 4)], sa / n, sb / n
	}'
