#!/bin/sh
# scripts/release.sh passes on this tree, and fails when any one of the
# version numbers it checks is changed alone: the release version in
# configure.ac, ChangeLog, debian/changelog, the spec's Version and its
# %changelog, a libtool version, a baseline's soname or version node, a
# version script's node. Each change is made in a copy of the files.
# Skips (77) in a tree without debian/ (the release tarball carries no
# Debian packaging).
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
release=$top_srcdir/scripts/release.sh
[ -f "$top_srcdir/debian/changelog" ] ||
	{ echo "check-release: no debian/ here (a release tarball): skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
fail=0
files="configure.ac Makefile.am ChangeLog debian/changelog debian/control
	rpm/libmrmgr.spec lib/libmrmgr.map sim/libmrmgr-sim.map
	share/libmrmgr-share.map tests/abi/libmrmgr.abi tests/abi/libmrmgr.abi.symbols
	tests/abi/libmrmgr-sim.abi tests/abi/libmrmgr-sim.abi.symbols
	tests/abi/libmrmgr-share.abi tests/abi/libmrmgr-share.abi.symbols"
fresh() {
	rm -rf "$work/t" && mkdir "$work/t"
	for f in $files; do
		mkdir -p "$work/t/$(dirname "$f")"
		cp "$top_srcdir/$f" "$work/t/$f"
	done
}

fresh
if sh "$release" --srcdir "$work/t" >"$work/out" 2>&1; then
	echo "check-release: release.sh passes on this tree"
else
	cat "$work/out" >&2
	echo "FAIL: release.sh fails on the unchanged tree" >&2
	exit 1
fi
V=$(sed -n 's/^AC_INIT(\[libmrmgr\], *\[\([^]]*\)\].*/\1/p' "$top_srcdir/configure.ac")
# A version one patch release later.
W=${V%.*}.$((${V##*.} + 1))

# description | file | sed expression (one number changed)
while IFS='|' read -r desc file expr; do
	[ -n "$desc" ] || continue
	fresh
	sed -i "$expr" "$work/t/$file"
	if cmp -s "$top_srcdir/$file" "$work/t/$file"; then
		echo "FAIL: $desc: the edit changed nothing in $file (the test is stale)" >&2
		fail=1
		continue
	fi
	if sh "$release" --srcdir "$work/t" >"$work/out" 2>&1; then
		echo "FAIL: release.sh passes with $desc" >&2
		fail=1
	else
		echo "check-release: fails as it should with $desc: $(grep FAIL "$work/out" | head -n1)"
	fi
done <<CASES
configure.ac's version alone|configure.ac|s/^AC_INIT(\[libmrmgr\], *\[$V\]/AC_INIT([libmrmgr], [$W]/
ChangeLog's release alone|ChangeLog|0,/\* Release $V/s//* Release $W/
debian/changelog's version alone|debian/changelog|1s/($V-/($W-/
the spec's Version alone|rpm/libmrmgr.spec|s/^Version:\( *\)$V/Version:\1$W/
the spec's %changelog alone|rpm/libmrmgr.spec|/^%changelog/,\$s/- $V-/- $W-/
libmrmgr's libtool current alone|configure.ac|s/^AC_SUBST(\[MRMGR_LT_VERSION\], \[\([0-9]*\):/AC_SUBST([MRMGR_LT_VERSION], [9\1:/
libmrmgr-sim's libtool age alone|configure.ac|s/^AC_SUBST(\[MRMGR_SIM_LT_VERSION\], \[\([0-9]*:[0-9]*\):\([0-9]*\)\])/AC_SUBST([MRMGR_SIM_LT_VERSION], [\1:1\2])/
the hooks library's libtool version alone|Makefile.am|s/^\(lib_libmrmgr_hooks_la_LDFLAGS = -version-info \)\([0-9]*\):/\19\2:/
libmrmgr's ABI baseline soname alone|tests/abi/libmrmgr.abi|1s/libmrmgr\.so\.\([0-9]*\)/libmrmgr.so.9\1/
libmrmgr-share's baseline symbols' node alone|tests/abi/libmrmgr-share.abi.symbols|1s/@MRMGR_SHARE_\([0-9]*\)\./@MRMGR_SHARE_9\1./
libmrmgr's version script node alone|lib/libmrmgr.map|s/^MRMGR_\([0-9]*\)\.\([0-9]*\) {/MRMGR_\1.9\2 {/
CASES

[ "$fail" = 0 ] || exit 1
echo "check-release: release.sh fails whenever one version number is changed alone"
