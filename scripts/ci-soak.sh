#!/bin/sh
# The torture tests, repeated beside a CPU hog for SOAK_SECONDS (default
# 600): the default mode's (test_monitor_cases torture/*: 2 and 4 threads
# malloc/free/realloc, 2 and 4 threads on neighbouring cells) and
# userfaultfd's (test_monitor_torture: 2 and 4 threads, every kind of
# memory event, raw system calls too). Prints runs, events and stale
# accesses; any stale access, failed or crashed run, or a soak in which a
# suite never ran, fails.
#
# usage: ci-soak.sh [BUILDDIR]   (make check-soak runs it in the build)
# SOAK_SECONDS: how long to start new rounds (a round already running
# finishes); SOAK_UFFD_EVENTS: events per userfaultfd run (default
# 20000, so a round stays short); MRMGR_TEST_TORTURE_EVENTS: events per
# default-mode run (the suite's own default when unset).
set -eu
b=${1:-.}
secs=${SOAK_SECONDS:-600}
uffd_events=${SOAK_UFFD_EVENTS:-20000}
cases=$b/tests/unit/test_monitor_cases
uffd=$b/tests/unit/test_monitor_torture
for t in "$cases" "$uffd"; do
	[ -x "$t" ] || { echo "ci-soak: $t not built (make check builds it)" >&2; exit 1; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/mrmgr-soak.XXXXXX")
logs=$b/tests/soak
mkdir -p "$logs"
rm -f "$logs"/*.log

# The hog: one busy process beside the tests' own threads, bounded so it
# never outlives the soak even if this script is killed.
timeout $((secs + 1800)) yes >/dev/null &
hog=$!
trap 'kill "$hog" 2>/dev/null || true; rm -rf "$out"' EXIT INT TERM

runs=0 failed=0 events=0 stale=0 rounds=0 ran_cases=0 ran_uffd=0
start=$(date +%s)
end=$((start + secs))

# Run one suite and add its counts; $1 names it, the rest is the command.
# Sets ran (tests that ran and were not skipped).
soak_one() {
	name=$1
	shift
	log=$out/run.log
	rc=0
	timeout 1500 "$@" --verbose >"$log" 2>&1 || rc=$?
	syn=$(grep 'Synthesis:' "$log" | tail -1 || true)
	n=$(printf '%s\n' "$syn" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
	f=$(printf '%s\n' "$syn" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
	c=$(printf '%s\n' "$syn" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
	n=${n:-0} f=${f:-0} c=${c:-0}
	skipped=$(grep '^\[SKIP\]' "$log" | grep -vc 'Test is disabled' || true)
	# No synthesis (killed, timed out) or a failing status with no
	# failure counted: one failed run.
	if [ -z "$syn" ] || { [ "$rc" -ne 0 ] && [ $((f + c)) -eq 0 ]; }; then
		f=$((f + 1))
	fi
	# Stale writes as each test counted them (a failing test may stop
	# before its line: then its failure counts).
	s=$(sed -n 's/.* \([0-9][0-9]*\) stale.*/\1/p' "$log" |
		awk '{ t += $1 } END { print t + 0 }')
	# Events: the userfaultfd runs print theirs, the default mode's
	# malloc/free runs their gets; the cells runs print none and count
	# MRMGR_TEST_TORTURE_EVENTS (6000 unless set) each.
	e=$(sed -n -e 's/.*torture uffd: [0-9]* threads, \([0-9]*\) events.*/\1/p' \
		-e 's/.* threads: \([0-9]*\) gets,.*/\1/p' "$log" |
		awk '{ t += $1 } END { print t + 0 }')
	cells=$(grep -c 'cells, [0-9]* threads:' "$log" || true)
	e=$((e + cells * ${MRMGR_TEST_TORTURE_EVENTS:-6000}))
	ran=$((n - skipped))
	runs=$((runs + ran)) failed=$((failed + f + c)) stale=$((stale + s))
	events=$((events + e))
	if [ $((f + c)) -ne 0 ] || [ "$s" -ne 0 ]; then
		cp "$log" "$logs/$name-round$rounds.log"
		echo "ci-soak: round $rounds, $name: $f failed, $c crashed, $s stale" \
			"(log: $logs/$name-round$rounds.log)"
		grep -E '^\[(FAIL|----)\]' "$log" | grep -v '^\[----\] *$' | tail -20 || true
	fi
}

while [ "$(date +%s)" -lt "$end" ]; do
	rounds=$((rounds + 1))
	soak_one default "$cases" --filter 'torture/*'
	ran_cases=$((ran_cases + ran))
	soak_one uffd env MRMGR_TEST_TORTURE_EVENTS="$uffd_events" "$uffd"
	ran_uffd=$((ran_uffd + ran))
	echo "ci-soak: round $rounds done at $(($(date +%s) - start)) s:" \
		"$runs runs, $failed failed, $events events, $stale stale"
done

echo "ci-soak: $(($(date +%s) - start)) s beside a CPU hog, $rounds rounds:" \
	"$runs runs ($ran_cases default mode, $ran_uffd userfaultfd)," \
	"$failed failed, $events events, $stale stale accesses"
status=0
[ "$failed" -eq 0 ] || status=1
[ "$stale" -eq 0 ] || status=1
if [ "$ran_cases" -eq 0 ] || [ "$ran_uffd" -eq 0 ]; then
	echo "ci-soak: a suite never ran (skipped: no page identity, no" \
		"userfaultfd or no two-sided source?)" >&2
	status=1
fi
exit "$status"
