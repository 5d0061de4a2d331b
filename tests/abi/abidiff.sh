#!/bin/sh
# Compare the built library's ABI with the checked-in baseline
# (tests/abi/libmrmgr.abi, made by abidw). Incompatible changes fail;
# compatible additions are reported. After a release that adds symbols on
# purpose, refresh the baseline with: tests/abi/abidiff.sh --update
set -eu
srcdir=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$srcdir/../.." && pwd)
lib=$(find "${top_builddir:-$top/build}/lib/.libs" -name 'libmrmgr.so.*.*' | head -n1)
[ -n "$lib" ] || { echo "abidiff: libmrmgr.so not built" >&2; exit 1; }
if ! command -v abidw >/dev/null; then
	echo "abidiff: abigail-tools not installed (apt-get install abigail-tools)" >&2
	exit 1
fi
if [ "${1:-}" = --update ]; then
	abidw --no-corpus-path --no-comp-dir-path --headers-dir "$top/include/mrmgr" \
		--out-file "$srcdir/libmrmgr.abi" "$lib"
	echo "abidiff: baseline updated from $lib"
	exit 0
fi
set +e
abidiff --headers-dir2 "$top/include/mrmgr" "$srcdir/libmrmgr.abi" "$lib"
rc=$?
set -e
# abidiff: bit 8 = incompatible change, bit 4 = some change, 1/2 = error.
if [ $((rc & 8)) -ne 0 ] || [ $((rc & 3)) -ne 0 ]; then
	echo "abidiff: incompatible ABI change or tool error (exit $rc)" >&2
	exit 1
fi
[ $((rc & 4)) -ne 0 ] && echo "abidiff: compatible changes (see above)" || \
	echo "abidiff: ABI identical to the baseline"
