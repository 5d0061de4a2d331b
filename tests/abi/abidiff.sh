#!/bin/sh
# Compare the built libraries' ABI (libmrmgr.so, libmrmgr-sim.so,
# libmrmgr-share.so) with the
# checked-in baselines (tests/abi/<lib>.abi, made by abidw). Incompatible
# changes fail; compatible additions are reported. After a release that
# adds symbols on purpose, refresh the baselines with:
# tests/abi/abidiff.sh --update
set -eu
srcdir=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$srcdir/../.." && pwd)
if ! command -v abidw >/dev/null; then
	echo "abidiff: abigail-tools not installed (apt-get install abigail-tools)" >&2
	exit 1
fi
status=0
for name in libmrmgr libmrmgr-sim libmrmgr-share; do
	lib=$(find "${top_builddir:-$top/build}/lib/.libs" -name "$name.so.*" |
		grep -E "/$name\.so\.[0-9]+\.[0-9]+\.[0-9]+\$" | head -n1)
	[ -n "$lib" ] || { echo "abidiff: $name.so not built" >&2; exit 1; }
	if [ "${1:-}" = --update ]; then
		abidw --no-corpus-path --no-comp-dir-path \
			--headers-dir "$top/include/mrmgr" \
			--out-file "$srcdir/$name.abi" "$lib"
		echo "abidiff: $name baseline updated from $lib"
		continue
	fi
	set +e
	abidiff --headers-dir2 "$top/include/mrmgr" "$srcdir/$name.abi" "$lib"
	rc=$?
	set -e
	# abidiff: bit 8 = incompatible change, bit 4 = some change, 1/2 = error.
	if [ $((rc & 8)) -ne 0 ] || [ $((rc & 3)) -ne 0 ]; then
		echo "abidiff: $name: incompatible ABI change or tool error (exit $rc)" >&2
		status=1
	elif [ $((rc & 4)) -ne 0 ]; then
		echo "abidiff: $name: compatible changes (see above)"
	else
		echo "abidiff: $name: ABI identical to the baseline"
	fi
done
exit $status
