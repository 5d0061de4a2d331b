#!/bin/sh
# scripts/ci-allocators.sh [EVENTS]: the allocator matrix (issue 26, item 6).
#
# tests/allocators/torture.c, built against the installed library (make
# install into a staging root, pkg-config --cflags --libs mrmgr
# mrmgr-sim), runs with no MRMGR_* set under every allocator Debian 12
# ships that a program can load, each preloaded (LD_PRELOAD) and linked
# (first on the link line, so it comes ahead of libc): glibc's malloc,
# jemalloc, gperftools' tcmalloc (minimal and full), mimalloc, oneTBB's
# tbbmalloc (its malloc-replacing proxy) and LLVM's scudo (standalone,
# from libclang-rt-14-dev). Two threads, EVENTS (default 10000) changes
# each: free/malloc, realloc, munmap/mmap, mmap(MAP_FIXED), MADV_DONTNEED,
# mremap shrink/grow; seven forked children. Not sbrk/brk: every one of
# these allocators moves the break itself (glibc's main arena, tcmalloc's
# sbrk allocator), and a program shrinking it under them corrupts their
# heap; a definition's sbrk is followed in tests/unit/test_monitor_follow
# (sbrk_shrink), libc's in test_monitor_modes. Not shmat/shmdt: no
# allocator defines them.
#
# Each run must have no stale write, every child must pass, and its hits
# must be at least half of glibc malloc's (following the calls must not
# turn into caching nothing). Prints the table; exits non-zero when a run
# failed. An allocator whose library is missing fails the run too
# (scripts/install-deps.sh installs them), unless ALLOW_MISSING=1.
# Electric Fence (electric-fence) is not in the matrix: a debugger that
# gives every allocation pages of its own and a guard page, it defines no
# memory call of its own (its mmap/munmap/mprotect are glibc's, followed
# as glibc malloc's are) and makes a 2-thread run of this size take
# minutes. MRMGR_BUILDDIR: the build tree (default ./build).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${MRMGR_BUILDDIR:-$top/build}" && pwd)
events=${1:-10000}
for v in $(env | sed -n 's/^\(MRMGR_[A-Za-z0-9_]*\)=.*/\1/p'); do
	unset "$v"
done
lib=/usr/lib/$(${CC:-cc} -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
scudo=$(ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.scudo_standalone-"$(uname -m)".so 2>/dev/null | tail -n 1 || true)
# name path
allocators="glibc -
jemalloc $lib/libjemalloc.so.2
tcmalloc-minimal $lib/libtcmalloc_minimal.so.4
tcmalloc $lib/libtcmalloc.so.4
mimalloc $lib/libmimalloc.so.2
tbbmalloc $lib/libtbbmalloc_proxy.so.2
scudo ${scudo:-/missing/libclang_rt.scudo_standalone.so}"

work=$builddir/tests/allocators
stage=$work/stage
rm -rf "$work"
mkdir -p "$work"
make -s -C "$builddir" all >/dev/null
make -s -C "$builddir" install DESTDIR="$stage/root" >/dev/null
pcdir=$(dirname "$(find "$stage/root" -name mrmgr-sim.pc | head -n 1)")
flags=$(PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR=$stage/root \
	pkg-config --cflags --libs mrmgr mrmgr-sim)
instlib=$(PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR=$stage/root \
	pkg-config --libs-only-L mrmgr | sed 's/^ *-L//; s/ .*//')
# A library from before mrmgr_monitor_info.foreign_object (a baseline run).
old=
grep -rqs foreign_object "$stage/root" --include=mrmgr.h || old=-DTORTURE_OLD_API
build() { # OUT [ALLOCATOR-LIBRARY]
	out=$1
	shift
	# shellcheck disable=SC2086 # word lists on purpose
	${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror $old -o "$out" \
		"$top/tests/allocators/torture.c" \
		${1:+-Wl,--no-as-needed "$1" -Wl,-rpath,"$(dirname "$1")" -Wl,--as-needed} \
		$flags -lpthread -Wl,-rpath,"$instlib"
}
build "$work/torture"
echo "allocator matrix: tests/allocators/torture.c built with pkg-config --cflags --libs mrmgr mrmgr-sim; $events events x 2 threads"

table=$work/table
: >"$table"
failed=0
glibc_hits=
t0=$(date +%s)
echo "$allocators" | while read -r name path; do
	for mode in preload link; do
		[ "$name" = glibc ] && [ "$mode" = link ] && continue
		if [ "$path" != - ] && [ ! -e "$path" ]; then
			echo "$name $mode missing - - - - - FAIL" >>"$table"
			[ "${ALLOW_MISSING:-0}" = 1 ] || echo "  $name: $path missing (scripts/install-deps.sh)"
			continue
		fi
		prog=$work/torture pre=
		if [ "$mode" = link ] && [ "$path" != - ]; then
			prog=$work/torture-$name
			build "$prog" "$path"
		elif [ "$path" != - ]; then
			pre=$path
		fi
		log=$work/$name-$mode.log
		rc=0
		ALLOCATOR=$name LINK_MODE=$mode LD_PRELOAD=$pre \
			timeout 300 "$prog" "$events" >"$log" 2>&1 || rc=$?
		line=$(grep '^allocator=' "$log" || true)
		v() { echo "$line" | sed -n "s/.* $1=\\([^ ]*\\).*/\\1/p"; }
		gets=$(v gets) hits=$(v hits) stale=$(v stale) ev=$(v events) kids=$(v children)
		[ "$name" = glibc ] && glibc_hits=$hits && echo "$hits" >"$work/glibc-hits"
		glibc_hits=$(cat "$work/glibc-hits" 2>/dev/null || echo 0)
		verdict=ok
		if [ $rc != 0 ] || [ -z "$line" ]; then
			verdict="FAIL(exit $rc)"
		elif [ "$((hits * 2))" -lt "$glibc_hits" ]; then
			verdict="FAIL(hits < half of glibc's $glibc_hits)"
		fi
		echo "$name $mode ${gets:--} ${hits:--} ${stale:--} ${ev:--} ${kids:--} $verdict" >>"$table"
		if [ "$verdict" != ok ]; then
			echo "  $name ($mode): $verdict"
			sed 's/^/      /' "$log" | tail -n 8
		fi
	done
done
printf '\n%-17s %-8s %7s %7s %6s %7s %9s  %s\n' allocator link gets hits stale events children result
while read -r n m g h s e k r; do
	printf '%-17s %-8s %7s %7s %6s %7s %9s  %s\n' "$n" "$m" "$g" "$h" "$s" "$e" "$k" "$r"
	case $r in ok) ;; *) failed=1 ;; esac
done <"$table"
echo "allocator matrix: $(($(date +%s) - t0)) s"
exit $failed
