#!/bin/sh
# CI job "valgrind": every example under valgrind memcheck with
# --track-fds=yes, external monitoring (no monitor thread): each must exit
# cleanly with no memcheck error and no descriptor left open. From build/.
# The default mode under valgrind is the "monitor-tools" job: it must
# finish (the patch source steps aside under valgrind with a warning, and
# then nothing is cached, so the examples' own hit checks would not hold).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
vg="$top/tests/valgrind/run.sh"
failed=0
for ex in "basic_cache" "demo --messages 200" "odp_prefetch" \
	"odp_prefetch --rxe" "growable_buffer" "shared_mr" \
	"export_import --rxe" "export_import"; do
	# shellcheck disable=SC2086 # the example's arguments
	MRMGR_MONITOR=external "$vg" 300 ./examples/$ex || failed=1
done
[ "$failed" = 0 ] || { echo "valgrind: failures above" >&2; exit 1; }
