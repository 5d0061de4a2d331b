#!/bin/sh
# CI jobs "rxe", "rxe-odp", "rxe-2node": `make TARGET` in build/, exiting
# with the tier's own status: make turns every failure into 2, and CI must
# tell an infrastructure failure (125: the qemu guest could not be set up)
# from failed tests (1). Usage: rxe.sh check-rxe|check-rxe-odp|check-rxe-2node
set -eu
target=$1
case $target in
check-rxe | check-rxe-odp | check-rxe-2node) ;;
*) echo "rxe.sh: unknown target $target" >&2; exit 2 ;;
esac
rm -f "tests/rxe/$target.rc"
if ! make -s "$target"; then
	rc=$(cat "tests/rxe/$target.rc" 2>/dev/null || echo 1)
	[ "$rc" != 0 ] || rc=1
	exit "$rc"
fi
