#!/bin/sh
# The shared library exports only mrmgr_* symbols, every one versioned,
# and exactly the set in the checked-in baseline (name@version): a symbol
# removed or moved to another version node is an ABI break; a new one must
# be added to the baseline (and to a new node in lib/libmrmgr.map) on
# purpose.
set -eu
srcdir=$(cd "$(dirname "$0")" && pwd)
top_builddir=${top_builddir:-.}
lib=$(find "$top_builddir/lib/.libs" -name 'libmrmgr.so.*.*' | head -n1)
[ -n "$lib" ] || { echo "libmrmgr.so not built" >&2; exit 1; }
got=$(mktemp)
trap 'rm -f "$got"' EXIT
nm -D --defined-only --with-symbol-versions "$lib" |
	awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | grep -v '^MRMGR_[0-9.]*@@' |
	sed 's/@@*/@/' | sort >"$got"
bad=$(grep -v '^mrmgr_[a-z0-9_]*@MRMGR_[0-9.]*$' "$got" || true)
if [ -n "$bad" ]; then
	echo "symbols that are not versioned mrmgr_* exports:" >&2
	echo "$bad" >&2
	exit 1
fi
if ! diff -u "$srcdir/libmrmgr.abi.symbols" "$got"; then
	echo "exported symbols differ from tests/abi/libmrmgr.abi.symbols" >&2
	exit 1
fi
echo "$(wc -l <"$got") exported symbols, all versioned mrmgr_*, match the baseline"
