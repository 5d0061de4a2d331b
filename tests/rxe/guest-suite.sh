#!/bin/bash
# guest-suite.sh TEST... - runs INSIDE the run-in-vm.sh guest, in the build
# directory (check-rxe.sh hands it in as the text of a bash -c): every
# real-device test binary given, then the demo and the examples, each of
# which must use the real device.
# Prints each one's output and a summary; exits 0 when everything passed,
# 1 otherwise.
set -u

# The device the tests use; the demo and the examples open the first
# device libibverbs lists, which in this guest is rxe0.
DEVICE=${MRMGR_TEST_DEVICE:-rxe0}
FIRST_DEVICE=rxe0
# One test at a time: the guest has 2 (emulated) CPUs, the kernel's rxe
# tasks need one, and serial output reads better.  CRITERION_JOBS wins.
jobs=${CRITERION_JOBS:-1}
results=()
failed=0

now() { date +%s.%N; }
record() { # name status seconds
	results+=("$(printf '%-28s %-5s %6.1f s' "$1" "$2" "$3")")
	[ "$2" = PASS ] || failed=1
}
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

echo "==== device"
if [ ! -e "/sys/class/infiniband/$DEVICE" ]; then
	echo "guest-suite: $DEVICE does not exist"
	exit 1
fi
for d in /sys/class/infiniband/*; do
	n=${d##*/}
	echo "$n: node_guid $(cat "$d/node_guid")" \
	     "port 1 state $(cat "$d/ports/1/state" 2>/dev/null)" \
	     "gid0 $(cat "$d/ports/1/gids/0" 2>/dev/null)"
done

# The monitor's simulated-HCA suites (tests/unit/test_monitor*) run here
# for this kernel's code paths. Their torture test does ~1.3 ms per event
# under TCG: 101,000 events would take over two minutes, so fewer here
# (the host run keeps the full count).
export MRMGR_TEST_TORTURE_EVENTS=${MRMGR_TEST_TORTURE_EVENTS:-4000}
# Free huge pages let test_monitor's private huge-page test run.
echo 8 >/proc/sys/vm/nr_hugepages 2>/dev/null || true

for t in "$@"; do
	echo
	echo "==== $t"
	t0=$(now)
	j=$jobs
	# Simulated-HCA suites leave the rxe tasks idle: two at a time
	# halves their time (mostly Criterion's per-test fork under TCG).
	case $t in tests/unit/*) j=${CRITERION_JOBS:-2} ;; esac
	"./$t" --verbose --jobs="$j"
	rc=$?
	case $rc in
	0) status=PASS ;;
	77) status=FAIL; echo "guest-suite: $t skipped every test: the device was not usable" ;;
	*) status=FAIL; echo "guest-suite: $t exited $rc" ;;
	esac
	record "$t" "$status" "$(elapsed "$t0")"
done

# Programs that must print "device: <FIRST_DEVICE>" and exit 0; with
# EXPECT=regex in their environment, also a line matching it.
run_example() { # name command...
	local name=$1 out rc t0
	shift
	echo
	echo "==== $name"
	t0=$(now)
	out=$("$@" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	if [ $rc -ne 0 ]; then
		echo "guest-suite: $name exited $rc"
		record "$name" FAIL "$(elapsed "$t0")"
	elif ! grep -q "^device: $FIRST_DEVICE\b" <<<"$out"; then
		echo "guest-suite: $name did not run on $FIRST_DEVICE"
		record "$name" FAIL "$(elapsed "$t0")"
	elif [ -n "${EXPECT:-}" ] && ! grep -q -- "$EXPECT" <<<"$out"; then
		echo "guest-suite: $name printed no line matching '$EXPECT'"
		record "$name" FAIL "$(elapsed "$t0")"
	else
		record "$name" PASS "$(elapsed "$t0")"
	fi
}
# (examples/growable_buffer is not here: it plays the remote peer with
# mrmgr_sim_write(), so it runs on the simulated HCA only;
# tests/rxe/test_growth covers growable buffers on the device.)
run_example examples/demo ./examples/demo --messages 3000
run_example examples/basic_cache ./examples/basic_cache
# rxe has no ODP: the example must say that it fell back to pinning.
EXPECT='^fallback: ' run_example examples/odp_prefetch ./examples/odp_prefetch
# Two PDs of the first device, one region, RDMA keys in each.
EXPECT='^share set: 2 MRs' run_example examples/shared_mr ./examples/shared_mr
# rxe has no ibv_import_*: the example must say so, and exit 0.
EXPECT='^export: not supported on ' run_example examples/export_import ./examples/export_import
# Two MPI ranks (Open MPI, shared memory and TCP: MPI stays off the
# device) bootstrap an RC QP pair on rxe0 and move data with RDMA through
# libmrmgr's buffers: reused, grown, remapped, moved; every byte checked.
# Built only where configure found MPI (the same command as
# tests/mpi/mpi_rdma.sh, which the source tree may not show the guest).
if [ -x examples/mpi_rdma ]; then
	EXPECT='^mpi_rdma: 12 rounds, .* every byte as expected' \
		run_example examples/mpi_rdma mpirun --allow-run-as-root \
		--oversubscribe -np 2 --mca pml ob1 --mca btl self,vader,tcp \
		--mca btl_vader_single_copy_mechanism none ./examples/mpi_rdma
fi

# README's "Using it" program (tests/consumer/readme, extracted from
# README.md): on the first device, two gets, exit 0.
echo
echo "==== README's program"
t0=$(now)
out=$(./tests/consumer/readme 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ] || [ "$(grep -c '^lkey 0x[0-9a-f]* rkey ' <<<"$out")" -ne 2 ]; then
	echo "guest-suite: README's program exited $rc or printed no keys"
	record "README program" FAIL "$(elapsed "$t0")"
else
	record "README program" PASS "$(elapsed "$t0")"
fi

# mrmgr_info(1) on the real devices: rxe0 listed, what rxe lacks said.
echo
echo "==== tools/mrmgr_info"
t0=$(now)
out=$(./tools/mrmgr_info 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
	echo "guest-suite: mrmgr_info exited $rc"
	record "tools/mrmgr_info" FAIL "$(elapsed "$t0")"
elif ! grep -q "^  $FIRST_DEVICE\$" <<<"$out" ||
     ! grep -q '^    ibv_rereg_mr  *no' <<<"$out" ||
     ! grep -q '^    ibv_import_device  *no' <<<"$out" ||
     ! grep -q '^    ODP  *no' <<<"$out"; then
	echo "guest-suite: mrmgr_info did not describe $FIRST_DEVICE as rxe"
	record "tools/mrmgr_info" FAIL "$(elapsed "$t0")"
else
	record "tools/mrmgr_info" PASS "$(elapsed "$t0")"
fi

# mrmgr_perftest(1) on the real device: rxe's own numbers; rereg and ODP
# said to be unsupported; the cached loop registering less and doing
# more messages/s; table, CSV and JSON agreeing; a PNG. Everything it
# wrote stays in the build directory (tests/rxe/perftest/).
echo
echo "==== tools/mrmgr_perftest"
t0=$(now)
pdir=tests/rxe/perftest
mkdir -p "$pdir"
rm -f "$pdir"/rxe0.*
./tools/mrmgr_perftest -d "$FIRST_DEVICE" --max 64M --runs 5 --messages 3000 \
	--csv "$pdir/rxe0.csv" --json "$pdir/rxe0.json" --plot "$pdir/rxe0.png" \
	>"$pdir/rxe0.txt" 2>"$pdir/rxe0.err"
rc=$?
cat "$pdir/rxe0.txt" "$pdir/rxe0.err"
why=""
if [ $rc -ne 0 ]; then
	why="exited $rc"
elif ! grep -Eq "^  device +$FIRST_DEVICE\$" "$pdir/rxe0.txt"; then
	why="did not run on $FIRST_DEVICE"
elif ! python3 tests/rxe/perftest-check.py "$pdir/rxe0.txt" "$pdir/rxe0.csv" \
	"$pdir/rxe0.json" --expect cache-fewer cache-faster rereg-unsupported no-odp; then
	why="rows disagree, or rxe not described as rxe, or the cache saved nothing"
elif [ "$(head -c 4 "$pdir/rxe0.png" | od -An -c | tr -d ' ')" != '211PNG' ]; then
	why="drew no PNG"
fi
if [ -n "$why" ]; then
	echo "guest-suite: mrmgr_perftest $why"
	record "tools/mrmgr_perftest" FAIL "$(elapsed "$t0")"
else
	record "tools/mrmgr_perftest" PASS "$(elapsed "$t0")"
fi

echo
echo "==== summary ($DEVICE)"
printf '%s\n' "${results[@]}"
if [ $failed -ne 0 ]; then
	echo "guest-suite: FAILED"
	exit 1
fi
echo "guest-suite: all passed"
