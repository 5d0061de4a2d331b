#!/bin/sh
# release.sh - check that every version number of a release agrees, and
# write the release tarball's SHA-256 (doc/design/release.md).
#
#   scripts/release.sh [--srcdir DIR] [TARBALL]
#
# Checked, from the source tree (DIR, default: this script's tree):
#  - configure.ac's AC_INIT version V (MAJOR.MINOR.PATCH);
#  - ChangeLog's newest entry is "Release V";
#  - the libtool versions (-version-info current:revision:age) of the four
#    libraries: each soname major (current - age) is the one the ABI
#    baseline (tests/abi/*.abi) records, the one the Debian package and the
#    RPM spec name, and libmrmgr's is MAJOR; for the three libraries with
#    a version script, age is the number of version nodes after the first
#    (one node per release that added symbols);
#  - the version nodes: the newest node of each .map is <PREFIX>_MAJOR.y
#    with y <= MINOR, and the ABI baselines (.abi, .abi.symbols) hold
#    exactly the nodes of the .map;
#  - debian/changelog's newest version is V-<debian revision>;
#  - rpm/libmrmgr.spec's Version is V, and its newest %changelog entry is
#    V-<Release>.
# With TARBALL (make distcheck's libmrmgr-V.tar.gz): its name and the
# configure.ac and spec inside it say V; then TARBALL.sha256 is written
# (sha256sum's format: `sha256sum -c libmrmgr-V.tar.gz.sha256`).
# Exit status: 0 all agree, 1 something disagrees (each line says what).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --srcdir ]; then
	src=$(cd "$2" && pwd)
	shift 2
fi
tarball=${1:-}
fail=0
ok() { printf 'ok    %s\n' "$*"; }
bad() { printf 'FAIL  %s\n' "$*" >&2; fail=1; }
need() { [ -f "$src/$1" ] || { bad "$1 is missing"; return 1; }; }

for f in configure.ac Makefile.am ChangeLog debian/changelog debian/control \
	rpm/libmrmgr.spec lib/libmrmgr.map sim/libmrmgr-sim.map \
	share/libmrmgr-share.map; do
	need "$f" || true
done
[ "$fail" = 0 ] || exit 1

# ---- the release version
V=$(sed -n 's/^AC_INIT(\[libmrmgr\], *\[\([^]]*\)\].*/\1/p' "$src/configure.ac")
case $V in
[0-9]*.[0-9]*.[0-9]*) ok "configure.ac: version $V" ;;
*) bad "configure.ac: AC_INIT version \"$V\" is not MAJOR.MINOR.PATCH"; exit 1 ;;
esac
MAJOR=${V%%.*}
rest=${V#*.}
MINOR=${rest%%.*}

# ---- ChangeLog: the newest "* Release X" entry
cl=$(sed -n 's/^[[:space:]]*\* Release \([0-9][0-9.]*[0-9]\).*/\1/p' "$src/ChangeLog" | head -n1)
if [ "$cl" = "$V" ]; then ok "ChangeLog: newest entry is Release $cl"
else bad "ChangeLog: newest \"* Release\" entry is \"$cl\", configure.ac says $V"; fi

# Symbols added since V wait in the next minor release's node.
pending=0
first=$(sed -n 's/^[[:space:]]*\* //p' "$src/ChangeLog" | head -n1)
case $first in "Not yet released"*) pending=1 ;; esac

# ---- debian/changelog
deb=$(sed -n '1s/^libmrmgr (\([^)]*\)).*/\1/p' "$src/debian/changelog")
if [ "${deb%-*}" = "$V" ]; then ok "debian/changelog: $deb"
else bad "debian/changelog: newest version \"$deb\" is not $V-<revision>"; fi

# ---- rpm/libmrmgr.spec
spec=$src/rpm/libmrmgr.spec
sv=$(sed -n 's/^Version:[[:space:]]*//p' "$spec" | head -n1)
sr=$(sed -n 's/^Release:[[:space:]]*\([^%[:space:]]*\).*/\1/p' "$spec" | head -n1)
sc=$(awk '/^%changelog/ { c = 1; next } c && /^\* / { print $NF; exit }' "$spec")
if [ "$sv" = "$V" ]; then ok "rpm/libmrmgr.spec: Version $sv"
else bad "rpm/libmrmgr.spec: Version \"$sv\", configure.ac says $V"; fi
if [ "$sc" = "$V-$sr" ]; then ok "rpm/libmrmgr.spec: newest %changelog entry $sc"
else bad "rpm/libmrmgr.spec: newest %changelog entry is \"$sc\", Version-Release is $V-$sr"; fi

# ---- libraries: libtool version, soname, packages, version nodes, baselines
# name  libtool-version-variable-or-literal  map  node-prefix  debian-package-stem
lt_of() { # AC_SUBST variable in configure.ac
	sed -n "s/^AC_SUBST(\[$1\], *\[\([0-9]*:[0-9]*:[0-9]*\)\])/\1/p" "$src/configure.ac"
}
hooks_lt=$(sed -n 's/^lib_libmrmgr_hooks_la_LDFLAGS = -version-info \([0-9]*:[0-9]*:[0-9]*\).*/\1/p' "$src/Makefile.am")
while read -r lib lt map prefix; do
	case $lt in *:*:*) ;; *) lt=$(lt_of "$lt") ;; esac
	[ -n "$lt" ] || { bad "$lib: no -version-info found"; continue; }
	c=${lt%%:*}; a=${lt##*:}
	so=$((c - a))
	ok "$lib: -version-info $lt, $lib.so.$so"
	if [ "$lib" = libmrmgr ] && [ "$so" != "$MAJOR" ]; then
		bad "libmrmgr.so.$so: the release's major version is $MAJOR (doc/release.md: they are the same number)"
	fi
	# Debian: the runtime package is named after the soname.
	dpkg=$lib$so
	[ "$lib" = libmrmgr_hooks ] && dpkg=libmrmgr-hooks$so
	grep -q "^Package: $dpkg\$" "$src/debian/control" ||
		bad "debian/control: no package $dpkg for $lib.so.$so"
	grep -q "$lib\\.so\\.$so{,\\.\\*}" "$spec" ||
		bad "rpm/libmrmgr.spec: no %files line for $lib.so.$so"
	[ "$map" != - ] || continue
	# Version nodes: the map's, the baselines'.
	nodes=$(sed -n "s/^\\(${prefix}_[0-9][0-9.]*\\) *{.*/\\1/p" "$src/$map")
	n=$(printf '%s\n' "$nodes" | grep -c .)
	newest=$(printf '%s\n' "$nodes" | tail -n1)
	nv=${newest#"${prefix}_"}
	# Between releases (ChangeLog's first entry "Not yet released"), a
	# node may be the next minor release's: symbols added since V.
	if [ "${nv%%.*}" != "$MAJOR" ] ||
		[ "${nv#*.}" -gt $((MINOR + pending)) ]; then
		bad "$map: newest node $newest does not belong to release $V"
	fi
	if [ "$a" != $((n - 1)) ]; then
		bad "$lib: libtool age $a, but $map has $n version node(s) (age = nodes - 1)"
	fi
	abi=$src/tests/abi/$lib.abi
	if [ -f "$abi" ] && [ -f "$abi.symbols" ]; then
		bso=$(sed -n "1s/.*soname='\\([^']*\\)'.*/\\1/p" "$abi")
		[ "$bso" = "$lib.so.$so" ] ||
			bad "tests/abi/$lib.abi: soname $bso, the build makes $lib.so.$so"
		bn=$(grep -o "version='${prefix}_[0-9.]*'" "$abi" | sed "s/version='//; s/'//" | sort -u)
		sn=$(sed -n "s/.*@\\(${prefix}_[0-9.]*\\)\$/\\1/p" "$abi.symbols" | sort -u)
		mn=$(printf '%s\n' "$nodes" | sort -u)
		[ "$bn" = "$mn" ] || bad "tests/abi/$lib.abi: version nodes $(echo $bn), $map has $(echo $mn)"
		[ "$sn" = "$mn" ] || bad "tests/abi/$lib.abi.symbols: version nodes $(echo $sn), $map has $(echo $mn)"
		ok "$map: $n node(s), newest $newest; baselines agree"
	else
		bad "tests/abi/$lib.abi or .abi.symbols missing"
	fi
done <<LIBS
libmrmgr MRMGR_LT_VERSION lib/libmrmgr.map MRMGR
libmrmgr-sim MRMGR_SIM_LT_VERSION sim/libmrmgr-sim.map MRMGR_SIM
libmrmgr-share MRMGR_SHARE_LT_VERSION share/libmrmgr-share.map MRMGR_SHARE
libmrmgr_hooks ${hooks_lt:-none} - -
LIBS

# ---- the tarball
if [ -n "$tarball" ]; then
	name=$(basename "$tarball")
	if [ "$name" != "libmrmgr-$V.tar.gz" ]; then
		bad "tarball $name: expected libmrmgr-$V.tar.gz"
	elif [ ! -f "$tarball" ]; then
		bad "tarball $tarball: not found"
	else
		tv=$(tar -xzOf "$tarball" "libmrmgr-$V/configure.ac" 2>/dev/null |
			sed -n 's/^AC_INIT(\[libmrmgr\], *\[\([^]]*\)\].*/\1/p')
		ts=$(tar -xzOf "$tarball" "libmrmgr-$V/rpm/libmrmgr.spec" 2>/dev/null |
			sed -n 's/^Version:[[:space:]]*//p' | head -n1)
		[ "$tv" = "$V" ] || bad "$name: its configure.ac says \"$tv\""
		[ "$ts" = "$V" ] || bad "$name: its rpm/libmrmgr.spec says \"$ts\""
		if [ "$fail" = 0 ]; then
			(cd "$(dirname "$tarball")" && sha256sum "$name" >"$name.sha256")
			ok "$name: $(cut -d' ' -f1 "$tarball.sha256") written to $name.sha256"
		fi
	fi
fi

if [ "$fail" = 0 ]; then
	echo "release.sh: version $V agrees everywhere"
else
	echo "release.sh: version numbers disagree (lines above)" >&2
	exit 1
fi
