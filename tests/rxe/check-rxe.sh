#!/bin/sh
# check-rxe.sh TEST... - what `make check-rxe` runs, from the build
# directory: ONE qemu guest boot (tests/rxe/run-in-vm.sh) that runs every
# real-device test binary given, the demo and the examples on Soft-RoCE
# (tests/rxe/guest-suite.sh). The console goes to standard output and to
# tests/rxe/check-rxe.log; the exit status also goes to tests/rxe/check-rxe.rc
# (make itself turns any failure into 2).
#
# Exit status: 0 all passed; 1 a test failed; 124 timeout;
# 125 INFRASTRUCTURE FAILURE (no guest: kernel fetch, qemu, modules, rxe0),
# which is not a test result and must not be mistaken for one.
set -u
here=$(cd "$(dirname "$0")" && pwd)
builddir=$(pwd -P)
mkdir -p tests/rxe
log=tests/rxe/check-rxe.log
rcfile=tests/rxe/check-rxe.rc
rm -f "$rcfile"

# The guest writes nothing but may need to (core files, logs): share the
# build directory itself, whatever git says about where it lives.
MRMGR_VM_SHARE=${MRMGR_VM_SHARE:-$builddir}
# A guest without a device must fail the tests, never skip them.
MRMGR_TEST_REQUIRE_DEVICE=1
# The suite takes well under a minute on an idle host; leave room for a
# busy CI machine, but not the harness's 15 minutes.
MRMGR_VM_TIMEOUT=${MRMGR_VM_TIMEOUT:-600}
export MRMGR_VM_SHARE MRMGR_TEST_REQUIRE_DEVICE MRMGR_VM_TIMEOUT

# The suite goes in as text, not as a path: the source tree may be where
# the guest cannot see it (under /tmp, which the guest mounts afresh).
suite=$(cat "$here/guest-suite.sh") || exit 125

start=$(date +%s)
{
	bash "$here/run-in-vm.sh" bash -c "$suite" guest-suite.sh "$@" 2>&1
	echo $? >"$rcfile"
} | tee "$log"
rc=$(cat "$rcfile" 2>/dev/null || echo 125)
secs=$(($(date +%s) - start))

banner() {
	echo "************************************************************************"
	echo "check-rxe: $*"
	echo "************************************************************************"
}
case $rc in
0) echo "check-rxe: PASS: the real-verbs tier passed on Soft-RoCE (${secs} s; log $builddir/$log)" ;;
124) banner "TIMEOUT after ${MRMGR_VM_TIMEOUT} s (exit 124); log $builddir/$log" >&2 ;;
125) banner "INFRASTRUCTURE FAILURE (exit 125): the guest could not run the tests." \
	"This is not a test result. Log: $builddir/$log" >&2 ;;
*) banner "FAIL: real-verbs tests failed (exit $rc, ${secs} s); log $builddir/$log" >&2 ;;
esac
exit "$rc"
