#!/bin/sh
# build-deb.sh - the Debian packages, built, checked and used:
#  1. copy the tree (git's files, committed or not) and run
#     `dpkg-buildpackage -us -uc -b` in the copy;
#  2. lintian on the result: any error fails (accepted warnings are in
#     debian/*.lintian-overrides, each with its reason);
#  3. unpack every .deb into a fresh root (dpkg -x: no maintainer scripts,
#     nothing touches the host's dpkg database) and there: compile and run
#     tests/consumer/consumer.c with nothing but pkg-config, find
#     `man mrmgr_get`, run the tools.
# Packages the tree cannot build yet are left out with build profiles:
# pkg.libmrmgr.nosim (no separate simulator library), pkg.libmrmgr.notools
# (no tools/mrmgr_info.c). `make check` is left to the rest of CI
# (DEB_BUILD_OPTIONS=nocheck) unless MRMGR_DEB_CHECK=1.
#
# With MRMGR_DEB_TARBALL=libmrmgr-V.tar.gz, step 1 unpacks that release
# tarball instead and adds this tree's debian/ (scripts/ci-packages.sh).
#
#   scripts/build-deb.sh [OUTDIR]     (the .debs are copied there if given)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/mrmgr-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
step() { printf '== build-deb: %s\n' "$*"; }

for tool in dpkg-buildpackage dh lintian fakeroot; do
	command -v "$tool" >/dev/null 2>&1 ||
		{ echo "build-deb: $tool missing: scripts/install-deps.sh" >&2; exit 1; }
done

mkdir "$work/src"
if [ -n "${MRMGR_DEB_TARBALL:-}" ]; then
	# The release tarball, with debian/ from this tree added, as a
	# .debian.tar would bring it (the tarball carries no debian/).
	step "unpack $(basename "$MRMGR_DEB_TARBALL"), add debian/"
	tar -xzf "$MRMGR_DEB_TARBALL" -C "$work/src" --strip-components=1
	cp -R "$top/debian" "$work/src/debian"
elif git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
	step "copy the tree"
	(cd "$top" && git ls-files -z --cached --others --exclude-standard |
		xargs -0 tar -cf - --no-recursion 2>/dev/null) | tar -xf - -C "$work/src"
else
	step "copy the tree"
	(cd "$top" && tar -cf - --exclude=./build --exclude=./.git .) | tar -xf - -C "$work/src"
fi

profiles=
grep -q 'libmrmgr-sim\.la' "$work/src/Makefile.am" || profiles="$profiles,pkg.libmrmgr.nosim"
[ -f "$work/src/tools/mrmgr_info.c" ] || profiles="$profiles,pkg.libmrmgr.notools"
opts="parallel=2 noautodbgsym"
# The option skips the tests, the profile their build dependencies.
[ "${MRMGR_DEB_CHECK:-0}" = 1 ] || { opts="$opts nocheck"; profiles="$profiles,nocheck"; }
profiles=${profiles#,}
step "dpkg-buildpackage -us -uc -b${profiles:+ -P$profiles} (DEB_BUILD_OPTIONS=$opts)"
start=$(date +%s)
(cd "$work/src" && DEB_BUILD_OPTIONS="$opts ${DEB_BUILD_OPTIONS:-}" \
	dpkg-buildpackage -us -uc -b ${profiles:+-P"$profiles"}) >"$work/build.log" 2>&1 || {
	tail -n 60 "$work/build.log" >&2
	echo "build-deb: dpkg-buildpackage failed" >&2
	exit 1
}
echo "built in $(($(date +%s) - start)) s:"
ls "$work"/*.deb | sed 's|.*/|  |'
changes=$(ls "$work"/*.changes)

step "lintian (errors fail)"
# --profile debian: the Debian rules, whatever the host's vendor.
if ! lintian --profile debian --fail-on error --display-info \
	"$changes" >"$work/lintian.log" 2>&1; then
	cat "$work/lintian.log" >&2
	echo "build-deb: lintian found errors" >&2
	exit 1
fi
if [ -s "$work/lintian.log" ]; then cat "$work/lintian.log"; else echo "lintian: clean"; fi

step "unpack into a fresh root"
root=$work/root
mkdir "$root"
for deb in "$work"/*.deb; do
	dpkg-deb -x "$deb" "$root"
done
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=$root/usr/lib/$ma
[ -f "$libdir/pkgconfig/mrmgr.pc" ] || { echo "build-deb: no mrmgr.pc in the packages" >&2; exit 1; }
dpkg-deb -I "$work"/libmrmgr1_*.deb symbols >/dev/null ||
	{ echo "build-deb: libmrmgr1 has no symbols file" >&2; exit 1; }
echo "libmrmgr1 symbols: $(dpkg-deb -I "$work"/libmrmgr1_*.deb symbols | grep -c '@')"

step "a consumer built with pkg-config against the packages"
PKG_CONFIG_PATH=$libdir/pkgconfig
PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
mods=mrmgr
[ ! -f "$libdir/pkgconfig/mrmgr-sim.pc" ] || mods="$mods mrmgr-sim"
# shellcheck disable=SC2086 # word lists on purpose
flags=$(pkg-config --cflags --libs $mods)
echo "pkg-config --cflags --libs $mods: $flags"
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$work/consumer" \
	"$top/tests/consumer/consumer.c" $flags
LD_LIBRARY_PATH=$libdir "$work/consumer"
# The program must have run from the packages' library, not another one.
LD_LIBRARY_PATH=$libdir ldd "$work/consumer" | grep -q "$libdir/libmrmgr.so" ||
	{ echo "build-deb: the consumer did not load the packaged libmrmgr" >&2; exit 1; }

step "man pages and tools from the packages"
if ! command -v man >/dev/null 2>&1; then
	echo "build-deb: man(1) not installed (man-db): man pages not checked"
else
	page=$(man -M "$root/usr/share/man" -w 3 mrmgr_get) ||
		{ echo "build-deb: man mrmgr_get finds no page in the packages" >&2; exit 1; }
	echo "man mrmgr_get: ${page#"$root"}"
	echo "man pages: $(ls "$root/usr/share/man/man3" | wc -l) in section 3"
fi
if [ -x "$root/usr/bin/mrmgr_info" ]; then
	LD_LIBRARY_PATH=$libdir "$root/usr/bin/mrmgr_info" >"$work/info.txt" ||
		{ cat "$work/info.txt" >&2; echo "build-deb: mrmgr_info failed" >&2; exit 1; }
	head -n 3 "$work/info.txt"
fi
if [ -x "$root/usr/bin/mrmgr_perftest" ]; then
	LD_LIBRARY_PATH=$libdir "$root/usr/bin/mrmgr_perftest" --sim --max 64K --runs 1 \
		--messages 200 --no-seeds >"$work/perftest.txt" 2>&1 ||
		{ cat "$work/perftest.txt" >&2; echo "build-deb: mrmgr_perftest failed" >&2; exit 1; }
	grep '^loop ' "$work/perftest.txt"
fi

if [ -n "$out" ]; then
	mkdir -p "$out"
	cp "$work"/*.deb "$changes" "$out"/
	echo "packages copied to $out"
fi
step "ok"
