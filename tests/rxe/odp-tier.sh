#!/bin/bash
# odp-tier.sh TEST... - what `make check-rxe-odp` runs, from the build
# directory: the ODP tier of the real-verbs tests. Debian 12's 6.1 kernel
# (`make check-rxe`) has no rxe ODP; this boots the newest Debian kernel
# (trixie-backports or sid: rxe ODP from 6.15, ibv_advise_mr prefetch from
# 6.17) over a sid userspace (rdma-core >= 59: the rxe provider passes
# ibv_advise_mr to the kernel; it needs glibc >= 2.38, newer than this
# host's), in which the library and its tests are built.
#
#  1. kernel: the highest linux-image-amd64 of trixie-backports and sid,
#     found with a PRIVATE apt configuration (the machine's sources are only
#     read, for the mirror); its packages (from 7.x: linux-binary-*,
#     linux-modules-*, linux-base-*) are downloaded and unpacked with
#     dpkg -x, vmlinux extracted for the PVH entry. Cached.
#  2. userspace: a debootstrap root of sid with the build dependencies.
#     Cached; rebuilt when the dependency list changes or with
#     MRMGR_ODP_REFRESH=1.
#  3. build: the tree's files are copied into the root (/src) and built
#     there (/build, kept between runs: an incremental build).
#  4. one guest boot (tests/rxe/run-in-vm.sh with MRMGR_VM_KERNEL_DIR and
#     MRMGR_VM_ROOT, TCG single-threaded, rxe0 on a 9000-byte-MTU netdev)
#     running tests/rxe/guest-odp-suite.sh with TEST... (paths relative to
#     the build directory).
# The console goes to standard output and tests/rxe/check-rxe-odp.log, the
# exit status to tests/rxe/check-rxe-odp.rc.
#
# Exit status: 0 passed; 1 a test failed; 124 timeout; 125 INFRASTRUCTURE
# FAILURE (not root, no mirror, a download, debootstrap, the build root,
# the guest boot): not a test result. A failure to BUILD the tree in the
# root is a test failure (1): the code does not build on sid.
#
# Environment:
#   MRMGR_ODP_CACHE     cache directory          [/var/cache/mrmgr-odp]
#   MRMGR_ODP_KERNEL    pin a kernel ABI, e.g. 7.3.4+deb13 [the newest]
#   MRMGR_ODP_REFRESH   1: ask the mirror for a newer kernel and rebuild
#                       the sid root now (default: the package lists are
#                       refreshed when older than 7 days, the root kept)
#   MRMGR_DEBIAN_MIRROR the archive URL [the one the machine's sources name]
#   MRMGR_VM_TIMEOUT    seconds for the guest [900]
set -u
PROG=check-rxe-odp
here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
builddir=$(pwd -P)
CACHE=${MRMGR_ODP_CACHE:-/var/cache/mrmgr-odp}
REFRESH=${MRMGR_ODP_REFRESH:-0}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# What the root needs to build the library, its rxe tests and tools, and
# what the guest's init uses from it (ip, rdma; kmod for debugging).
DEPS="build-essential autoconf automake libtool pkg-config libibverbs-dev
      ibverbs-providers librdmacm-dev libcriterion-dev iproute2 kmod
      ibverbs-utils"
mkdir -p tests/rxe
log=tests/rxe/check-rxe-odp.log
rcfile=tests/rxe/check-rxe-odp.rc
rm -f "$rcfile"
exec > >(tee "$log") 2>&1

say() { printf '%s: %s\n' "$PROG" "$*"; }
banner() {
	echo "************************************************************************"
	echo "$PROG: $*"
	echo "************************************************************************"
}
finish() { # rc message
	echo "$1" >"$rcfile"
	case $1 in
	0) say "PASS: $2" ;;
	124) banner "TIMEOUT: $2" ;;
	125) banner "INFRASTRUCTURE FAILURE (exit 125): $2" \
		"This is not a test result. Log: $builddir/$log" ;;
	*) banner "FAIL (exit $1): $2; log $builddir/$log" ;;
	esac
	exit "$1"
}
infra() { finish 125 "$*"; }
now() { date +%s; }
T0=$(now)

[ "$(id -u)" -eq 0 ] || infra "needs root (debootstrap, chroot, mounts)"
for t in debootstrap dpkg-deb apt-get apt-cache chroot xz zstd depmod modprobe flock; do
	command -v "$t" >/dev/null || infra "missing host tool $t (scripts/install-deps.sh)"
done
[ -r "$KEYRING" ] || infra "$KEYRING missing (debian-archive-keyring)"
mkdir -p "$CACHE" || infra "cannot create $CACHE"
exec {lockfd}>"$CACHE/.lock"
flock "$lockfd"

# The Debian mirror of the machine's own sources (one-line or deb822).
mirror() {
	[ -z "${MRMGR_DEBIAN_MIRROR:-}" ] || { echo "$MRMGR_DEBIAN_MIRROR"; return; }
	{
		sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' \
			/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
		sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
			tr ' ' '\n'
	} | grep -E '^https?://[^ ]*/debian/?$' | head -n1
}

# ------------------------------------------------------------- kernel ---
APT=$CACHE/apt
apt_private() { # apt-get|apt-cache ARGS...
	local tool=$1
	shift
	"$tool" -q -o Dir::Etc::sourcelist="$APT/sources.list" \
		-o Dir::Etc::sourceparts=- -o Dir::State::Lists="$APT/lists" \
		-o Dir::State::status="$APT/status" -o Dir::Cache="$APT/cache" \
		-o Dir::Cache::archives="$APT/cache/archives" \
		-o APT::Architecture=amd64 -o APT::Architectures=amd64 \
		-o APT::Sandbox::User=root "$@"
}
apt_update() {
	local m
	m=$(mirror)
	[ -n "$m" ] || return 1
	mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
	: >"$APT/status"
	printf 'deb [arch=amd64 lang=none target=Packages signed-by=%s] %s %s main\n' \
		"$KEYRING" "$m" trixie-backports "$KEYRING" "$m" sid >"$APT/sources.list"
	apt_private apt-get update >"$APT/update.log" 2>&1 || { cat "$APT/update.log"; return 1; }
	touch "$APT/updated"
}
# The ABI (e.g. 7.3.4+deb13) of the highest linux-image-amd64 known.
newest_abi() {
	local v
	v=$(apt_private apt-cache madison linux-image-amd64 2>/dev/null |
		awk -F'|' '{ gsub(/ /, "", $2); print $2 }' | sort -V | tail -n1)
	[ -n "$v" ] || return 1
	apt_private apt-cache show "linux-image-amd64=$v" 2>/dev/null |
		sed -n 's/^Depends:.*linux-image-\([0-9][^ ,]*\)-amd64.*/\1/p' | head -n1
}
# Download and unpack the packages of ABI $1 into $2 (made ready to boot).
fetch_kernel() {
	local abi=$1 dir=$2 p pkgs="" kver off vmlinuz
	rm -rf "$dir" && mkdir -p "$dir/deb"
	# 7.x: the image package is a metapackage over binary/modules/base.
	for p in linux-image linux-binary linux-modules linux-base; do
		apt_private apt-cache show "$p-$abi-amd64" >/dev/null 2>&1 && pkgs="$pkgs $p-$abi-amd64"
	done
	[ -n "$pkgs" ] || return 1
	say "downloading$pkgs"
	# shellcheck disable=SC2086
	(cd "$dir/deb" && apt_private apt-get download $pkgs >/dev/null) || return 1
	for p in "$dir"/deb/*.deb; do dpkg-deb -x "$p" "$dir/root" || return 1; done
	# Merged /usr: modules under usr/lib/modules, where depmod -b and
	# modprobe -d look under lib/modules.
	[ -e "$dir/root/lib" ] || ln -s usr/lib "$dir/root/lib"
	kver=$(find "$dir/root/lib/modules/" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n1)
	[ -n "$kver" ] || return 1
	depmod -b "$dir/root" "$kver" || return 1
	vmlinuz=$(find "$dir/root/boot/vmlinuz-$kver" "$dir/root/lib/modules/$kver/vmlinuz" \
		2>/dev/null | head -n1)
	[ -n "$vmlinuz" ] || return 1
	# The ELF inside the bzImage boots through qemu's PVH entry, skipping
	# the in-guest decompression (tests/rxe/run-in-vm.sh does the same).
	# Debian's payload is xz up to 6.x, zstd from 7.x; the decoder stops
	# at the end of its frame (what follows is the bzImage's trailer).
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n1 | cut -d: -f1)
	if [ -n "$off" ]; then
		xz -dc --single-stream <(tail -c +"$((off + 1))" "$vmlinuz") >"$dir/vmlinux" 2>/dev/null
	else
		off=$(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$vmlinuz" | head -n1 | cut -d: -f1)
		[ -z "$off" ] || tail -c +"$((off + 1))" "$vmlinuz" | zstd -qdc >"$dir/vmlinux" 2>/dev/null
	fi
	if [ -s "$dir/vmlinux" ] &&
	   [ "$(head -c4 "$dir/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
		:
	else
		rm -f "$dir/vmlinux"
		say "no ELF vmlinux in $vmlinuz: booting the bzImage (slower)"
		ln -sf "$vmlinuz" "$dir/vmlinux"
	fi
	echo "$kver" >"$dir/kver"
	rm -rf "$dir/deb"
	touch "$dir/.ready"
}

tk=$(now)
lists_fresh=0
[ -e "$APT/updated" ] && [ -z "$(find "$APT/updated" -mtime +7)" ] && lists_fresh=1
[ "$REFRESH" != 1 ] || lists_fresh=0
if [ $lists_fresh = 0 ]; then
	apt_update || say "apt-get update of trixie-backports and sid failed (no mirror?)"
fi
abi=${MRMGR_ODP_KERNEL:-}
[ -n "$abi" ] || abi=$(newest_abi 2>/dev/null)
if [ -z "$abi" ]; then
	# Offline: any kernel fetched before will do.
	kdir=$(find "$CACHE" -mindepth 2 -maxdepth 2 -path "$CACHE/kernel-*/.ready" | sort -V | tail -n1)
	[ -n "$kdir" ] || infra "no kernel: the package lists name none and none is cached"
	kdir=$(dirname "$kdir")
	say "newest kernel unknown; using cached $(basename "$kdir")"
else
	kdir=$CACHE/kernel-$abi
	if [ ! -e "$kdir/.ready" ]; then
		fetch_kernel "$abi" "$kdir" || { rm -rf "$kdir"; infra "could not fetch kernel $abi"; }
		# Older kernels are of no use once a newer one is ready.
		find "$CACHE" -mindepth 1 -maxdepth 1 -name 'kernel-*' ! -name "kernel-$abi" \
			-exec rm -rf {} +
	fi
fi
KVER=$(cat "$kdir/kver")
say "kernel $KVER ($(($(now) - tk)) s)"

# ----------------------------------------------------------- sid root ---
ROOT=$CACHE/sid
mounted=""
umount_all() {
	for m in $mounted; do umount -l "$m" 2>/dev/null || true; done
	mounted=""
}
trap umount_all EXIT
mount_all() {
	local m
	for m in proc sys dev dev/pts; do
		mountpoint -q "$ROOT/$m" && continue
		mkdir -p "$ROOT/$m"
		case $m in
		proc) mount -t proc proc "$ROOT/proc" ;;
		sys) mount -t sysfs sysfs "$ROOT/sys" ;;
		dev) mount --bind /dev "$ROOT/dev" ;;
		dev/pts) mount -t devpts -o newinstance,ptmxmode=0666 devpts "$ROOT/dev/pts" ;;
		esac || return 1
		mounted="$ROOT/$m $mounted"
	done
}
in_root() {
	chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

tr_=$(now)
deps=$(echo $DEPS)
if [ "$REFRESH" = 1 ] || [ ! -f "$ROOT/.mrmgr-debootstrap-done" ]; then
	m=$(mirror)
	[ -n "$m" ] || infra "no Debian mirror in the apt sources (set MRMGR_DEBIAN_MIRROR)"
	say "debootstrap sid into $ROOT"
	rm -rf "$ROOT.tmp"
	debootstrap --variant=minbase --include="${deps// /,}" sid "$ROOT.tmp" "$m" \
		>"$CACHE/debootstrap.log" 2>&1 ||
		{ tail -n 30 "$CACHE/debootstrap.log"; rm -rf "$ROOT.tmp"; infra "debootstrap sid failed"; }
	echo "$deps" >"$ROOT.tmp/.mrmgr-deps"
	touch "$ROOT.tmp/.mrmgr-debootstrap-done"
	rm -rf "$ROOT" && mv "$ROOT.tmp" "$ROOT"
fi
mount_all || infra "mounts in $ROOT"
if [ "$(cat "$ROOT/.mrmgr-deps" 2>/dev/null)" != "$deps" ]; then
	say "apt-get install in the root: $deps"
	{ in_root apt-get update -qq && in_root apt-get install -y -qq --no-install-recommends \
		$deps >/dev/null && in_root apt-get clean; } || infra "apt-get install in $ROOT"
	echo "$deps" >"$ROOT/.mrmgr-deps"
fi
say "sid root ready ($(($(now) - tr_)) s): glibc $(in_root dpkg-query -W -f='${Version}' libc6)," \
	"rdma-core $(in_root dpkg-query -W -f='${Version}' libibverbs1)"

# -------------------------------------------------------------- build ---
tb=$(now)
rm -rf "$ROOT/src"
mkdir -p "$ROOT/src" "$ROOT/build"
# The files git knows (committed or not); tar keeps their times, so the
# build in /build, kept between runs, only redoes what changed.
if git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1; then
	(cd "$srcdir" && git ls-files -z --cached --others --exclude-standard |
		xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf -) | tar -xf - -C "$ROOT/src" || infra "copying the tree"
else
	(cd "$srcdir" && tar --exclude='./build*' -cf - .) | tar -xf - -C "$ROOT/src" ||
		infra "copying the tree"
fi
# autogen's output is kept (with its times) while its inputs stay the same,
# so configure is not remade and the build stays incremental.
akey=$(cd "$ROOT/src" && cat configure.ac autogen.sh $(find . -name Makefile.am -o -name '*.m4' |
	LC_ALL=C sort) 2>/dev/null | sha256sum | cut -c1-16)
if [ -s "$ROOT/autogen-$akey.tar" ]; then
	tar -xf "$ROOT/autogen-$akey.tar" -C "$ROOT/src" || infra "autogen cache"
else
	rm -f "$ROOT"/autogen-*.tar
	(cd "$ROOT/src" && find . -type f | LC_ALL=C sort >/tmp/mrmgr-odp-before.$$)
	in_root /bin/sh -c 'cd /src && ./autogen.sh' >"$CACHE/autogen.log" 2>&1 ||
		finish 1 "autogen.sh failed in the sid root ($CACHE/autogen.log)"
	(cd "$ROOT/src" && find . -type f | LC_ALL=C sort |
		comm -13 /tmp/mrmgr-odp-before.$$ - | tar -cf "$ROOT/autogen-$akey.tar" -T -)
	rm -f /tmp/mrmgr-odp-before.$$
fi
# The targets: the library, the tools, the examples, the guest's tests and
# the reproducer of the kernel bug.
targets="all $* tests/rxe/odp_offset_repro"
in_root /bin/sh -euc '
cd /build
[ -f Makefile ] || /src/configure -q --enable-werror
make -s -j2 '"$targets"' >/build/make.out 2>&1 || { tail -n 60 /build/make.out; exit 1; }
' || finish 1 "the tree does not build in the sid root (see above)"
say "built in the sid root ($(($(now) - tb)) s)"
umount_all

# --------------------------------------------------------------- guest ---
suite=$(cat "$here/guest-odp-suite.sh") || infra "no guest-odp-suite.sh"
modules="virtio_pci 9pnet_virtio 9p overlay dummy veth rdma_rxe ib_uverbs rdma_ucm ib_umad"
# Kernels up to 6.14 need crc32_generic before rxe adds a link.
if modprobe -d "$kdir/root" -S "$KVER" --show-depends crc32_generic >/dev/null 2>&1; then
	modules="$modules crc32_generic"
fi
export MRMGR_VM_KERNEL_DIR=$kdir MRMGR_VM_ROOT=$ROOT MRMGR_VM_SHARE=$ROOT/build \
	MRMGR_VM_MODULES=$modules MRMGR_VM_CACHE=$CACHE/vm MRMGR_VM_TCG_THREAD=single \
	MRMGR_VM_NET_MTU=9000 MRMGR_TEST_REQUIRE_DEVICE=1 \
	MRMGR_VM_TIMEOUT=${MRMGR_VM_TIMEOUT:-900}
flock -u "$lockfd"
tg=$(now)
(cd "$ROOT/build" && bash "$here/run-in-vm.sh" bash -c "$suite" guest-odp-suite.sh "$@")
rc=$?
say "guest $(($(now) - tg)) s; the tier $(($(now) - T0)) s in all"
case $rc in
0) finish 0 "the ODP tier passed on $KVER (rxe0, sid userspace)" ;;
124) finish 124 "the guest ran past ${MRMGR_VM_TIMEOUT} s" ;;
125) finish 125 "the guest could not run the tests" ;;
*) finish "$rc" "ODP tests failed on $KVER" ;;
esac
