#!/bin/sh
# Each shared library exports only its own symbols, every one versioned,
# and exactly the set in its checked-in baseline (name@version):
# libmrmgr.so the mrmgr_* API (never an mrmgr_sim_, mrmgr_share_ or
# mrmgr_import one), libmrmgr-sim.so the mrmgr_sim_* calls,
# libmrmgr-share.so the mrmgr_share_* and mrmgr_import* calls. A symbol removed or moved to another version node
# is an ABI break; a new one must be added to the baseline (and to a new
# node of the library's map) on purpose.
set -eu
srcdir=$(cd "$(dirname "$0")" && pwd)
top_builddir=${top_builddir:-.}
got=$(mktemp)
trap 'rm -f "$got"' EXIT

# check LIBNAME SYMBOL_RE NODE BASELINE
check() {
	# The built file itself, not libtool's relink leftovers (*.so.x.y.zT).
	lib=$(find "$top_builddir/lib/.libs" -name "$1.so.*" |
		grep -E "/$1\.so\.[0-9]+\.[0-9]+\.[0-9]+\$" | head -n1)
	[ -n "$lib" ] || { echo "$1.so not built" >&2; exit 1; }
	nm -D --defined-only --with-symbol-versions "$lib" |
		awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | grep -v "^$3_[0-9.]*@@" |
		sed 's/@@*/@/' | sort >"$got"
	bad=$(grep -v "^$2@$3_[0-9.]*\$" "$got" || true)
	[ "$1" = libmrmgr ] &&
		bad="$bad$(grep -E '^mrmgr_(sim_|share_|import)' "$got" || true)"
	if [ -n "$bad" ]; then
		echo "$1.so: symbols that are not versioned $2 exports:" >&2
		echo "$bad" >&2
		exit 1
	fi
	if ! diff -u "$srcdir/$4" "$got"; then
		echo "$1.so: exported symbols differ from tests/abi/$4" >&2
		exit 1
	fi
	echo "$1.so: $(wc -l <"$got") exported symbols, all versioned, match the baseline"
}

check libmrmgr 'mrmgr_[a-z0-9_]*' MRMGR libmrmgr.abi.symbols
check libmrmgr-sim 'mrmgr_sim_[a-z0-9_]*' MRMGR_SIM libmrmgr-sim.abi.symbols
check libmrmgr-share 'mrmgr_\(share_\|import\)[a-z0-9_]*' MRMGR_SHARE \
	libmrmgr-share.abi.symbols
