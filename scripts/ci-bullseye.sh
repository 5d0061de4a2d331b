#!/bin/sh
# Build and test the tree on Debian 11 "bullseye" (glibc 2.31, rdma-core 33,
# kernel headers 5.10: the generation of RHEL 8 and SLES 15) in a
# debootstrap chroot, since a binary built here cannot load under an older
# libc. Then, under bullseye's own libc with no MRMGR_* set: the default
# monitor's source, hits of 1,000 gets of one buffer, and the default-mode
# torture (doc/portability.md).
#
# The chroot is cached (MRMGR_CHROOT_CACHE, default /var/cache/mrmgr-chroot)
# and reused by the next run; its build dependencies are installed with
# apt-get inside it. The mirror is the one the machine's own apt sources
# name. Needs root (chroot, mounts) and debootstrap (scripts/install-deps.sh).
#   scripts/ci-bullseye.sh            create or reuse, build, test
#   scripts/ci-bullseye.sh --shell    a shell in the chroot (debugging)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
suite=bullseye
cache=${MRMGR_CHROOT_CACHE:-/var/cache/mrmgr-chroot}
root=$cache/$suite
# What the build and `make check` need there (doxygen, python3 and man-db
# so the man-page test runs rather than skips, Capstone for the decoder
# test; no MPI: the MPI example is
# optional and left out to keep the chroot small).
deps="build-essential autoconf automake libtool pkg-config
      libibverbs-dev ibverbs-providers librdmacm-dev libcriterion-dev
      doxygen python3 man-db groff-base git libcapstone-dev"

[ "$(id -u)" -eq 0 ] || { echo "ci-bullseye: needs root (chroot, mounts)" >&2; exit 1; }
command -v debootstrap >/dev/null ||
	{ echo "ci-bullseye: debootstrap not installed (scripts/install-deps.sh)" >&2; exit 1; }

# The Debian mirror of the machine's own apt sources (one-line or deb822
# format), not the security or updates archive.
mirror() {
	{
		cat /etc/apt/sources.list 2>/dev/null | sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p'
		cat /etc/apt/sources.list.d/*.list 2>/dev/null | sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p'
		cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
	} | grep -E '^https?://[^ ]*/debian/?$' | head -n1
}

mounted=""
umount_all() {
	for m in $mounted; do umount -l "$m" 2>/dev/null || true; done
	mounted=""
}
trap umount_all EXIT
trap 'exit 130' INT TERM
mount_all() {
	# /proc for the library's maps reads and the monitor's probes, /sys
	# for libibverbs' device scan, /dev (and devpts) for /dev/null,
	# /dev/userfaultfd and ptys; /dev/shm for POSIX shared memory.
	for m in proc sys dev dev/pts dev/shm; do
		mountpoint -q "$root/$m" && continue
		mkdir -p "$root/$m"
		case $m in
		proc) mount -t proc proc "$root/proc" ;;
		sys) mount -t sysfs sysfs "$root/sys" ;;
		dev) mount --bind /dev "$root/dev" ;;
		dev/pts) mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" ;;
		dev/shm) mount -t tmpfs -o mode=1777 shm "$root/dev/shm" ;;
		esac
		mounted="$root/$m $mounted"
	done
}
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

t0=$(date +%s)
if [ ! -f "$root/.mrmgr-debootstrap-done" ]; then
	m=$(mirror)
	[ -n "$m" ] || { echo "ci-bullseye: no Debian mirror in the apt sources" >&2; exit 1; }
	echo "ci-bullseye: debootstrap $suite into $root from the configured mirror"
	rm -rf "$root"
	mkdir -p "$cache"
	debootstrap --variant=minbase "$suite" "$root" "$m" >"$cache/$suite-debootstrap.log" 2>&1 ||
		{ tail -n 30 "$cache/$suite-debootstrap.log" >&2; exit 1; }
	printf '%s\n' "$m" >"$root/.mrmgr-mirror"
	touch "$root/.mrmgr-debootstrap-done"
fi
mount_all
# Installed when the list changes (a new dependency reaches a cached root).
if [ "$(cat "$root/.mrmgr-deps" 2>/dev/null)" != "$(echo $deps)" ]; then
	echo "ci-bullseye: apt-get install in the chroot: $(echo $deps)"
	in_root apt-get update -qq
	# man-db's index rebuild takes minutes on a busy 2-core machine; man(1)
	# finds pages without it (tests/man/check-man.sh uses man -M and -l).
	echo "man-db man-db/auto-update boolean false" | in_root debconf-set-selections
	# shellcheck disable=SC2086 # a word list on purpose
	in_root apt-get install -y -qq --no-install-recommends $deps >/dev/null
	in_root apt-get clean
	echo $deps >"$root/.mrmgr-deps"
fi
t1=$(date +%s)
echo "ci-bullseye: chroot ready in $((t1 - t0)) s"

if [ "${1:-}" = --shell ]; then
	in_root /bin/bash
	exit
fi

# A copy of the tree: the files git knows (committed or not), or, outside a
# git checkout, everything but the build directories.
rm -rf "$root/src"
mkdir -p "$root/src"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
	(cd "$top" && git ls-files -z --cached --others --exclude-standard |
		xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf -) | tar -xf - -C "$root/src"
else
	(cd "$top" && tar --exclude='./build*' -cf - .) | tar -xf - -C "$root/src"
fi
# The copy has no .git: tests/arch/check-layers.sh scans the files listed
# here, as it does in a distribution tarball (where make dist writes it).
(cd "$root/src" && find . -type f ! -path ./tests/arch/dist-files |
	sed 's|^\./||' | LC_ALL=C sort >tests/arch/dist-files)

in_root /bin/sh -eu -c '
cd /src
printf "ci-bullseye: %s, %s\n" "$(ldd --version | head -n1)" \
	"libibverbs-dev $(dpkg-query -W -f="\${Version}" libibverbs-dev)"
./autogen.sh >/dev/null 2>&1
./configure -q --enable-werror
make -s -j2
# The suites are built in parallel and run one at a time, as in the main
# run: consumer.sh and check-man.sh `make install` into a staging root,
# and with the libtool of Debian 11 that rewrites lib/.libs while a suite run
# beside it loads from there ("libmrmgr-sim.so.1: file too short").
make -s -j2 check TESTS= >/dev/null
if ! make -s check >check.out 2>&1; then
	cat check.out; cat test-suite.log >&2 || true
	exit 1
fi
grep -E "^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):" check.out
# A skipped suite is named with its reason, then the disabled or skipped
# cases inside suites that ran.
for l in $(grep -l "^:test-result: SKIP" $(find tests -name "*.trs")); do
	echo "ci-bullseye: skipped ${l%.trs}: $(grep -m1 "SKIP:" "${l%.trs}.log")"
done
grep -h "^\[SKIP\]" tests/unit/*.log | sed "s/^/ci-bullseye: skipped case /" || true
'

# The default monitor under bullseye's libc, with no MRMGR_* set (the
# chroot's environment is empty; MRMGR_TEST_TORTURE_EVENTS only sizes the
# test). The torture skips where no two-sided source runs: a skip fails.
in_root /bin/sh -eu -c '
cd /src
cc -Iinclude -o /tmp/default_hits tests/portability/default_hits.c \
	-Llib/.libs -lmrmgr-sim -lmrmgr -lpthread -Wl,-rpath,/src/lib/.libs
fail=0
/tmp/default_hits || fail=1
# The torture: every case at its own size, then the figure of issue 20: two
# threads and 100,000 events (MRMGR_BULLSEYE_TORTURE_EVENTS).
torture() {
	tests/unit/test_monitor_cases --filter "$1" -j1 --verbose >/tmp/torture.out 2>&1 ||
		{ cat /tmp/torture.out; fail=1; }
	grep -E "stale|^\[(PASS|FAIL)\]|Synthesis" /tmp/torture.out || true
	# (--filter lists the cases it leaves out as disabled)
	if grep "^\[SKIP\] torture::" /tmp/torture.out | grep -v "Test is disabled"; then
		echo "ci-bullseye: the torture did not run (no two-sided source)" >&2
		fail=1
	fi
}
torture "torture/*"
export MRMGR_TEST_TORTURE_EVENTS='"${MRMGR_BULLSEYE_TORTURE_EVENTS:-100000}"'
torture "torture/two_threads_malloc_free_realloc_under_load"
exit $fail
'
t2=$(date +%s)
echo "ci-bullseye: build and tests in $((t2 - t1)) s, $((t2 - t0)) s in all"
