#!/bin/sh
# mrmgr_perftest(1) on the simulated HCA: the table, CSV and JSON hold the
# same rows (tests/tools/perftest-check.py); the cached loop registers
# less than the per-message one; a PNG is drawn; the rxe personality's
# rereg and ODP rows say "unsupported"; SIGINT at every kind of point
# (an MR registered in the curve, in the rereg/advise rows, in the
# per-message loop; a region held in a cache) leaves the device with no
# MR and no pinned page, and so does a real SIGINT from outside; a device
# that cannot be opened gives one line and exit 1. Runs the built tool.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
tool="$top_builddir/tools/mrmgr_perftest"
check_py="$top_srcdir/tests/tools/perftest-check.py"
command -v python3 >/dev/null 2>&1 || { echo "mrmgr_perftest.sh: no python3" >&2; exit 77; }
w=$(mktemp -d)
bg=""
trap '[ -n "$bg" ] && kill "$bg" 2>/dev/null; rm -rf "$w"' EXIT INT TERM
fail=0
check() { # description, command...
	desc=$1
	shift
	if ! "$@"; then
		echo "FAIL: $desc" >&2
		fail=1
	fi
}
unset MRMGR_PERFTEST_TEST_SIGINT MRMGR_MAX_BYTES MRMGR_MONITOR
small="--max 256K --runs 3 --messages 2000"

# mlx5 personality: everything measured.
# shellcheck disable=SC2086
"$tool" --sim $small --csv "$w/a.csv" --json "$w/a.json" --plot "$w/a.png" \
	>"$w/a.out" 2>"$w/a.err"
rc=$?
check "--sim exits 0 (got $rc; $(head -c 300 "$w/a.err"))" test $rc -eq 0
for h in "^mrmgr_perftest: libmrmgr [0-9]" "^  device +simulated HCA" "^  firmware " \
	"^  driver " "^  kernel +Linux " "^  monitor " "^  memlock +RLIMIT_MEMLOCK" "^  limit +262144 bytes"; do
	check "header line /$h/" grep -Eq "$h" "$w/a.out"
done
check "table, CSV and JSON agree; the cache registers less; ODP measured" \
	python3 "$check_py" "$w/a.out" "$w/a.csv" "$w/a.json" --expect cache-fewer odp
check "sizes over --max are skipped with the reason" \
	grep -Eq '^rereg +translation +1MiB .* skipped +twice the size is over --max 256KiB' "$w/a.out"
check "the dma-buf cache's hit and miss rows" \
	sh -c "grep -Eq '^cache +dmabuf-miss +64KiB' '$w/a.out' && grep -Eq '^cache +dmabuf-hit +64KiB' '$w/a.out'"
check "a size over the limit is not in the curve" sh -c "! grep -Eq '^curve +reg-pinned +512KiB' '$w/a.out'"
if command -v gnuplot >/dev/null 2>&1; then
	check "--plot draws a PNG" sh -c "head -c 8 '$w/a.png' | od -An -c | grep -q 'P   N   G'"
else
	check "--plot says gnuplot is missing" grep -q 'gnuplot is not installed' "$w/a.err"
fi

# rxe personality: no rereg, no ODP, said so.
# shellcheck disable=SC2086
"$tool" --sim=rxe $small --csv "$w/b.csv" --json "$w/b.json" >"$w/b.out" 2>"$w/b.err"
rc=$?
check "--sim=rxe exits 0 (got $rc)" test $rc -eq 0
check "rxe: rows agree; rereg and ODP unsupported; the cache registers less" \
	python3 "$check_py" "$w/b.out" "$w/b.csv" "$w/b.json" \
	--expect cache-fewer rereg-unsupported no-odp
check "rxe: the dma-buf row says unsupported, with the device's error" \
	grep -Eq '^cache +dmabuf-hit .*unsupported +mrmgr_get_dmabuf of a memfd: Operation not supported' "$w/b.out"
check "rxe: the reason is the device's" grep -Eq '^rereg +translation .*unsupported +not supported: ibv_rereg_mr said Operation not supported' "$w/b.out"

# SIGINT at a point where something is registered (the tool's test hook
# raises it there): one line, exit 130, nothing left on the device.
interrupt() { # phase:n, what the line must also say, options...
	at=$1 what=$2
	shift 2
	MRMGR_PERFTEST_TEST_SIGINT=$at "$tool" --sim "$@" >"$w/i.out" 2>"$w/i.err"
	rc=$?
	check "SIGINT at $at: exit 130 (got $rc)" test $rc -eq 130
	check "SIGINT at $at: one line on stderr" test "$(grep -c 'mrmgr_perftest: interrupted' "$w/i.err")" -eq 1
	check "SIGINT at $at: $what ($(cat "$w/i.err"))" grep -Eq "$what" "$w/i.err"
	check "SIGINT at $at: no MR, no pinned page left" \
		grep -q 'left on the device: 0 MRs, 0 pinned bytes$' "$w/i.err"
	check "SIGINT at $at: no table" sh -c "! grep -q '^section ' '$w/i.out'"
}
# shellcheck disable=SC2086
interrupt curve:5 "in registration curve: deregistered 1 MR;" $small
# shellcheck disable=SC2086
interrupt seeds:4 "in rereg: deregistered 1 MR;" $small --no-curve
# shellcheck disable=SC2086
interrupt loop:700 "in per-message loop: deregistered 1 MR;" $small --no-curve --no-seeds
# The cached loop: its checkpoints follow the per-message loop's 2000.
# shellcheck disable=SC2086
interrupt loop:2900 "in cached loop: deregistered 0 MRs, put the held region, destroyed the cache;" \
	$small --no-curve --no-seeds
# shellcheck disable=SC2086
interrupt hitmiss:2 "in hit and miss: deregistered 0 MRs, put the held region, destroyed the cache;" \
	$small --no-curve --no-seeds
# shellcheck disable=SC2086
interrupt dmabuf:2 "in dma-buf: deregistered 0 MRs, destroyed the cache;" \
	$small --no-curve --no-seeds

# A real SIGINT from outside, mid-run (the loop would run for hours).
"$tool" --sim --max 256K --no-curve --no-seeds --messages 2000000000 >"$w/k.out" 2>"$w/k.err" &
bg=$!
i=0
while [ $i -lt 600 ] && ! grep -q 'per-message loop: ' "$w/k.err"; do
	sleep 0.1
	i=$((i + 1))
done
check "progress on stderr after a second" grep -q 'per-message loop: [0-9]* of 2000000000 messages ([0-9]* s)$' "$w/k.err"
kill -INT "$bg"
wait "$bg"
rc=$?
bg=""
check "outside SIGINT: exit 130 (got $rc)" test $rc -eq 130
check "outside SIGINT: no MR, no pinned page left ($(tail -n1 "$w/k.err"))" \
	grep -q '^mrmgr_perftest: interrupted in per-message loop: .* left on the device: 0 MRs, 0 pinned bytes$' "$w/k.err"

# A device that cannot be opened: one line, exit 1, nothing on stdout.
"$tool" -d no-such-device0 >"$w/d.out" 2>"$w/d.err"
rc=$?
check "unknown device: exit 1 (got $rc)" test $rc -eq 1
check "unknown device: one line" test "$(wc -l <"$w/d.err")" -eq 1
check "unknown device: says which" grep -q '^mrmgr_perftest: cannot open device no-such-device0: ' "$w/d.err"
check "unknown device: nothing on stdout" test ! -s "$w/d.out"
"$tool" --bogus >/dev/null 2>&1
check "bad option: exit 2" test $? -eq 2

[ $fail -eq 0 ] && echo "mrmgr_perftest.sh: all checks passed"
exit $fail
