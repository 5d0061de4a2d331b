#!/bin/bash
# guest-odp-suite.sh TEST... - runs INSIDE the ODP tier's guest (the newest
# Debian kernel, a sid root; tests/rxe/odp-tier.sh hands it in as the text
# of a bash -c), in the build directory: what the kernel and the userspace
# are, each real-device test binary given, the kernel bug's reproducer
# with its verdict, and mrmgr_info on rxe0.
# Exits 0 when everything passed, 1 otherwise.
set -u

DEVICE=${MRMGR_TEST_DEVICE:-rxe0}
results=()
failed=0
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
record() { # name status seconds [note]
	results+=("$(printf '%-32s %-5s %6.1f s  %s' "$1" "$2" "$3" "${4:-}")")
	[ "$2" = PASS ] || failed=1
}

echo "==== kernel and userspace"
kver=$(uname -r)
echo "kernel $kver; $(. /etc/os-release && echo "$PRETTY_NAME");" \
	"glibc $(dpkg-query -W -f='${Version}' libc6);" \
	"rdma-core $(dpkg-query -W -f='${Version}' libibverbs1)"
if [ ! -e "/sys/class/infiniband/$DEVICE" ]; then
	echo "guest-odp-suite: $DEVICE does not exist"
	exit 1
fi
ibv_devinfo -v -d "$DEVICE" | grep -E 'hca_id|vendor_id|_odp_caps|SUPPORT|active_mtu' |
	tr -s '\t' ' '

for t in "$@"; do
	echo
	echo "==== $t"
	t0=$(now)
	"./$t" --verbose --jobs=1
	rc=$?
	case $rc in
	0) record "$t" PASS "$(elapsed "$t0")" ;;
	*) echo "guest-odp-suite: $t exited $rc"; record "$t" FAIL "$(elapsed "$t0")" ;;
	esac
done

# The kernel bug, standalone. Expected present on 6.15 and later kernels
# up to the fixed version the library knows (MRMGR_RXE_ODP_FIXED_IN; none
# known yet): a verdict the other way is a failure, so the day a kernel
# fixes it this tier says so.
echo
echo "==== tests/rxe/odp_offset_repro (rxe's ODP copy and the page offset)"
t0=$(now)
./tests/rxe/odp_offset_repro -d "$DEVICE"
rc=$?
base=${kver%%[-+]*}
ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
expect=0
if ge "$base" 6.15 && { [ -z "${MRMGR_RXE_ODP_FIXED_IN:-}" ] ||
	! ge "$base" "$MRMGR_RXE_ODP_FIXED_IN"; }; then
	expect=1
fi
if [ $rc = 1 ] && [ $expect = 1 ]; then
	echo "guest-odp-suite: KNOWN KERNEL DEFECT reproduced on $kver (doc/rxe-odp-page-offset-bug.md)"
	record "odp_offset_repro" PASS "$(elapsed "$t0")" "known kernel defect: present, as expected"
elif [ $rc = 0 ] && [ $expect = 0 ]; then
	record "odp_offset_repro" PASS "$(elapsed "$t0")" "no bug on $kver, as expected"
elif [ $rc = 0 ]; then
	echo "guest-odp-suite: THE KERNEL CHANGED: $kver has no rxe ODP page-offset bug;" \
		"set the fixed version (MRMGR_RXE_ODP_FIXED_IN, lib/device/quirk.c) and the docs"
	record "odp_offset_repro" FAIL "$(elapsed "$t0")" "bug gone: update the quirk's range"
elif [ $rc = 1 ]; then
	echo "guest-odp-suite: the bug is present on $kver, a kernel the range calls fixed"
	record "odp_offset_repro" FAIL "$(elapsed "$t0")" "bug present past the fixed version"
else
	record "odp_offset_repro" FAIL "$(elapsed "$t0")" "could not run (exit $rc)"
fi

# mrmgr_info: rxe0 with ODP, advice working, the quirk said.
echo
echo "==== tools/mrmgr_info"
t0=$(now)
out=$(./tools/mrmgr_info 2>&1)
rc=$?
printf '%s\n' "$out" | sed -n '/^Devices/,$p'
why=""
if [ $rc -ne 0 ]; then
	why="exited $rc"
elif ! grep -q "^  $DEVICE\$" <<<"$out"; then
	why="no $DEVICE"
elif ! grep -q '^    ODP  *explicit$' <<<"$out"; then
	why="rxe0's explicit ODP not reported"
elif ! grep -q '^    ibv_advise_mr  *yes' <<<"$out"; then
	why="ibv_advise_mr not working (rdma-core >= 59 and kernel >= 6.17 needed)"
elif [ $expect = 1 ] && ! grep -q '^    ODP quirk  *rxe page-offset bug' <<<"$out"; then
	why="the quirk is not reported"
fi
if [ -n "$why" ]; then
	echo "guest-odp-suite: mrmgr_info: $why"
	record "tools/mrmgr_info" FAIL "$(elapsed "$t0")"
else
	record "tools/mrmgr_info" PASS "$(elapsed "$t0")"
fi

# An unmodified ODP program: on an affected kernel the library falls back
# to pinned registrations, and the example says so and exits 0.
echo
echo "==== examples/odp_prefetch"
t0=$(now)
out=$(./examples/odp_prefetch 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
	record "examples/odp_prefetch" FAIL "$(elapsed "$t0")" "exited $rc"
elif ! grep -q "^device: $DEVICE\b" <<<"$out"; then
	record "examples/odp_prefetch" FAIL "$(elapsed "$t0")" "not on $DEVICE"
else
	record "examples/odp_prefetch" PASS "$(elapsed "$t0")"
fi

echo
echo "==== summary ($DEVICE, kernel $kver)"
printf '%s\n' "${results[@]}"
if [ $failed -ne 0 ]; then
	echo "guest-odp-suite: FAILED"
	exit 1
fi
echo "guest-odp-suite: all passed"
