#!/bin/sh
# ci-packages.sh - the release tarball, and the RPM and Debian packages
# built from that same tarball (doc/design/release.md):
#  1. the tarball: TARBALL if given, else `make dist` in BUILDDIR (default
#     ./build, configured); scripts/release.sh checks that every version
#     number agrees and writes TARBALL.sha256;
#  2. RPM: `rpmbuild -ta --nodeps` on the tarball (it carries
#     rpm/libmrmgr.spec; the BuildRequires have Fedora's names, which
#     Debian's rpm cannot resolve), with Fedora's directory layout
#     (%{_libdir} = /usr/lib64, ...); `rpm -qlp` of every package
#     against the files each must hold (every library, header, .pc file,
#     man page, and a section-3 page per exported function); every
#     payload unpacked into a fresh root, where a consumer is built with
#     pkg-config alone and run on the simulated HCA, and mrmgr_info runs;
#     `rpmlint` on the binary and source packages: any error fails;
#  3. Debian: scripts/build-deb.sh with MRMGR_DEB_TARBALL=TARBALL (the
#     tarball unpacked, debian/ from this tree added, as a .debian.tar
#     would), which runs lintian (errors fail) and its own checks.
#
#   scripts/ci-packages.sh [TARBALL]        (BUILDDIR: env, default build)
# Exit status 0: all packages built and checked.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=${BUILDDIR:-$top/build}
work=$(mktemp -d "${TMPDIR:-/tmp}/mrmgr-pkg.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
step() { printf '== ci-packages: %s\n' "$*"; }
die() { echo "ci-packages: $*" >&2; exit 1; }
t0=$(date +%s)

for tool in rpmbuild rpm rpm2cpio cpio rpmlint sha256sum pkg-config; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool missing: scripts/install-deps.sh (packages rpm, rpmlint, cpio)"
done

# ---- 1. the tarball
V=$(sed -n 's/^AC_INIT(\[libmrmgr\], *\[\([^]]*\)\].*/\1/p' "$top/configure.ac")
tarball=${1:-}
if [ -z "$tarball" ]; then
	step "make dist in $builddir"
	[ -f "$builddir/Makefile" ] || die "$builddir is not configured: scripts/build.sh"
	make -s -C "$builddir" dist >/dev/null
	tarball=$builddir/libmrmgr-$V.tar.gz
fi
tarball=$(cd "$(dirname "$tarball")" && pwd)/$(basename "$tarball")
[ -f "$tarball" ] || die "no tarball $tarball"
step "scripts/release.sh $(basename "$tarball")"
"$top/scripts/release.sh" "$tarball"

# ---- 2. RPM
step "rpmbuild -ta --nodeps (Fedora's layout)"
# Fedora's directories and unversioned doc directories. Debian's rpm runs
# brp-compress (man pages to .gz) with /bin/sh, dash, which it is not
# written for (`read -d`): bash runs it, as /bin/sh does on Fedora.
rb=$work/rpmbuild
start=$(date +%s)
if ! rpmbuild -ta --nodeps "$tarball" \
	--define "_topdir $rb" \
	--define "_prefix /usr" --define "_exec_prefix /usr" \
	--define "_bindir /usr/bin" --define "_libdir /usr/lib64" \
	--define "_includedir /usr/include" --define "_datadir /usr/share" \
	--define "_mandir /usr/share/man" --define "_docdir /usr/share/doc" \
	--define "_defaultdocdir /usr/share/doc" \
	--define "_defaultlicensedir /usr/share/licenses" \
	--define "_docdir_fmt %%{NAME}" \
	--define "__brp_compress bash /usr/lib/rpm/brp-compress /usr" \
	--define "_smp_mflags -j2" >"$work/rpmbuild.log" 2>&1; then
	tail -n 60 "$work/rpmbuild.log" >&2
	die "rpmbuild failed"
fi
echo "built in $(($(date +%s) - start)) s:"
find "$rb/RPMS" "$rb/SRPMS" -name '*.rpm' | sed 's|.*/|  |' | sort
arch=$(rpm --eval '%{_arch}')
rpmfile() { # package name
	f=$rb/RPMS/$arch/$1-$V-1.$arch.rpm
	[ -f "$f" ] || die "no package $1 ($f)"
	echo "$f"
}

step "payload (rpm -qlp)"
fail=0
# package: files (shell patterns) it must hold
expect() {
	pkg=$1
	shift
	rpm -qlp "$(rpmfile "$pkg")" >"$work/$pkg.list"
	for pat in "$@"; do
		found=
		while read -r f; do
			# shellcheck disable=SC2254 # a pattern on purpose
			case $f in $pat) found=$f; break ;; esac
		done <"$work/$pkg.list"
		if [ -z "$found" ]; then
			echo "FAIL: $pkg has no $pat" >&2
			fail=1
		fi
	done
	echo "  $pkg: $(wc -l <"$work/$pkg.list") files, the $# expected ones present"
}
L=/usr/lib64
M=/usr/share/man
expect libmrmgr $L/libmrmgr.so.1 "$L/libmrmgr.so.1.*" \
	/usr/share/licenses/libmrmgr/COPYING /usr/share/doc/libmrmgr/README.md
expect libmrmgr-share $L/libmrmgr-share.so.1 "$L/libmrmgr-share.so.1.*" \
	/usr/share/licenses/libmrmgr-share/COPYING
expect libmrmgr-sim $L/libmrmgr-sim.so.1 "$L/libmrmgr-sim.so.1.*" \
	/usr/share/licenses/libmrmgr-sim/COPYING
expect libmrmgr-hooks $L/libmrmgr_hooks.so.1 "$L/libmrmgr_hooks.so.1.*" \
	/usr/share/licenses/libmrmgr-hooks/COPYING
expect libmrmgr-devel /usr/include/mrmgr/mrmgr.h /usr/include/mrmgr/device.h \
	/usr/include/mrmgr/sim.h /usr/include/mrmgr/share.h \
	$L/libmrmgr.so $L/libmrmgr-share.so $L/libmrmgr-sim.so $L/libmrmgr_hooks.so \
	$L/pkgconfig/mrmgr.pc $L/pkgconfig/mrmgr-share.pc $L/pkgconfig/mrmgr-sim.pc \
	"$M/man3/mrmgr.3*" "$M/man3/mrmgr_get.3*" "$M/man7/mrmgr-env.7*" \
	/usr/share/doc/libmrmgr-devel/integration.md
expect mrmgr-tools /usr/bin/mrmgr_info "$M/man1/mrmgr_info.1*" \
	/usr/bin/mrmgr_perftest "$M/man1/mrmgr_perftest.1*" \
	/usr/share/licenses/mrmgr-tools/COPYING
# A section-3 page for every function the three libraries export.
for sym in $(cut -d@ -f1 "$top"/tests/abi/*.abi.symbols | sort -u); do
	grep -q "^$M/man3/$sym\.3" "$work/libmrmgr-devel.list" ||
		{ echo "FAIL: libmrmgr-devel has no man page for $sym" >&2; fail=1; }
done
# Nothing in two packages; no libtool archive, no static library.
cat "$work"/*.list | grep -v '^/usr/lib/\.build-id' | sort | uniq -d >"$work/dups"
[ ! -s "$work/dups" ] || { echo "FAIL: files in two packages:" >&2; cat "$work/dups" >&2; fail=1; }
! grep -h '\.la$\|\.a$' "$work"/*.list || { echo "FAIL: .la or .a packaged" >&2; fail=1; }
[ "$fail" = 0 ] || die "the payload is not where Fedora puts it (above)"

step "a consumer and mrmgr_info from the RPMs' payload"
root=$work/root
mkdir "$root"
for p in libmrmgr libmrmgr-share libmrmgr-sim libmrmgr-hooks libmrmgr-devel mrmgr-tools; do
	(cd "$root" && rpm2cpio "$(rpmfile "$p")" | cpio -idm --quiet)
done
PKG_CONFIG_PATH=$root$L/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root \
	pkg-config --cflags --libs mrmgr mrmgr-sim >"$work/flags"
# shellcheck disable=SC2046 # the flags are a word list on purpose
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$work/consumer" \
	"$top/tests/consumer/consumer.c" $(cat "$work/flags")
LD_LIBRARY_PATH=$root$L "$work/consumer"
LD_LIBRARY_PATH=$root$L ldd "$work/consumer" | grep -q "$root$L/libmrmgr.so" ||
	die "the consumer did not load the packaged libmrmgr"
LD_LIBRARY_PATH=$root$L "$root/usr/bin/mrmgr_info" --sim >"$work/info" ||
	{ cat "$work/info" >&2; die "the packaged mrmgr_info failed"; }
head -n 2 "$work/info"

step "rpmlint (errors fail)"
# rpm/rpmlint.toml: Fedora's policy where rpmlint's defaults are
# openSUSE's, each difference with its reason.
set +e
rpmlint -c "$top/rpm/rpmlint.toml" "$rb"/RPMS/*/*.rpm "$rb"/SRPMS/*.rpm >"$work/rpmlint.log" 2>&1
rc=$?
set -e
cat "$work/rpmlint.log"
if [ "$rc" -ne 0 ] || grep -q ' E: ' "$work/rpmlint.log"; then
	die "rpmlint reports errors (exit $rc)"
fi

# ---- 3. Debian, from the same tarball
step "Debian packages from $(basename "$tarball")"
MRMGR_DEB_TARBALL=$tarball "$top/scripts/build-deb.sh"

step "ok in $(($(date +%s) - t0)) s: $(basename "$tarball") ($(cut -d' ' -f1 "$tarball.sha256")), RPMs and Debian packages"
