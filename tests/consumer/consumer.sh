#!/bin/sh
# Install the built library into a staging root, then build and run
# programs with nothing but `pkg-config --cflags --libs mrmgr`, as a user
# of the installed package would:
#  - README's "Using it" program, extracted from README.md (so the two
#    cannot drift) and built exactly as written: it calls libibverbs
#    itself, so the link line must carry -libverbs. It runs on the first
#    RDMA device; where there is none it is built again with sim_shim.h
#    included after its #include lines (its device-opening calls go to
#    the simulated HCA) and run;
#  - consumer.c, which checks hits and misses on the simulated HCA;
#  - a small importer built with `pkg-config mrmgr-share` alone.
# With MRMGR_CONSUMER_PREFIX set, use that real installation instead of
# staging one. SIM_PKG names the pkg-config module of the simulated HCA
# (libmrmgr-sim: mrmgr-sim). The installed production library must not
# carry the simulator, nor the importer and the share helper.
set -eu
srcdir=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$(cd "$srcdir/../.." && pwd)
top_builddir=${top_builddir:-.}
CC=${CC:-cc}
SIM_PKG=${SIM_PKG:-mrmgr-sim}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

if [ -n "${MRMGR_CONSUMER_PREFIX:-}" ]; then
	pcdir=$(dirname "$(find "$MRMGR_CONSUMER_PREFIX" -name mrmgr-sim.pc -path '*pkgconfig*' | head -n1)")
	PKG_CONFIG_PATH=$pcdir
else
	${MAKE:-make} -s -C "$top_builddir" install DESTDIR="$work/root" >/dev/null
	pcdir=$(dirname "$(find "$work/root" -name mrmgr-sim.pc | head -n1)")
	# Paths inside the .pc name the final prefix; the sysroot maps them
	# into the staging root.
	PKG_CONFIG_PATH=$pcdir
	PKG_CONFIG_SYSROOT_DIR=$work/root
	export PKG_CONFIG_SYSROOT_DIR
fi
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs mrmgr)
echo "pkg-config --cflags --libs mrmgr: $flags"
case " $flags " in
*" -libverbs "*) ;;
*) echo "FAIL: the link line lacks -libverbs (the public header uses libibverbs)" >&2
   exit 1 ;;
esac
# The -L flag already carries the sysroot, where there is one.
libdir=$(pkg-config --libs-only-L mrmgr | sed 's/^ *-L//; s/ .*//')
# No static library: a static binary would carry a libc the monitor
# cannot follow (doc/monitor.md, "a static binary"), so it cannot link
# libmrmgr at all.
if ls "$libdir"/libmrmgr*.a >/dev/null 2>&1; then
	echo "FAIL: a static libmrmgr is installed ($(ls "$libdir"/libmrmgr*.a))" >&2
	exit 1
fi
run() {
	LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"
}

# README's program: the first ```c block after "## Using it".
awk '/^## Using it/ { u = 1 } u && /^```c$/ { c = 1; next }
     c && /^```$/ { exit } c { print }' "$top_srcdir/README.md" >"$work/readme.c"
grep -q 'mrmgr_get' "$work/readme.c" || {
	echo "FAIL: no C program under \"## Using it\" in README.md" >&2
	exit 1
}
# shellcheck disable=SC2086 # the flags are a word list on purpose
$CC -std=c11 -Wall -Wextra -Werror -o "$work/readme" "$work/readme.c" $flags
echo "README's program builds with the pkg-config line"
set +e
run "$work/readme"
rc=$?
set -e
if [ $rc -eq 77 ]; then
	simflags=$(pkg-config --cflags --libs "$SIM_PKG")
	last=$(grep -n '^#include' "$work/readme.c" | tail -n1 | cut -d: -f1)
	sed "${last}a #include \"$srcdir/sim_shim.h\"" "$work/readme.c" >"$work/readme_sim.c"
	# shellcheck disable=SC2086
	$CC -std=c11 -Wall -Wextra -Werror -o "$work/readme_sim" \
		"$work/readme_sim.c" $flags $simflags
	run "$work/readme_sim"
	echo "README's program ran on the simulated HCA (no RDMA device)"
elif [ $rc -ne 0 ]; then
	echo "FAIL: README's program exited $rc" >&2
	exit 1
else
	echo "README's program ran on the first RDMA device"
fi

# consumer.c uses the simulated HCA: its module requires mrmgr.
simflags=$(pkg-config --cflags --libs "$SIM_PKG")
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$work/consumer" "$srcdir/consumer.c" $simflags
run "$work/consumer"

case " $(pkg-config --libs mrmgr) " in
*-lmrmgr-sim*) echo "FAIL: mrmgr.pc names the simulator" >&2; exit 1 ;;
esac
if nm -D "$libdir"/libmrmgr.so | grep -q 'mrmgr_sim_'; then
	echo "FAIL: the installed libmrmgr.so carries mrmgr_sim_ symbols" >&2
	exit 1
fi

# The importer and the share helper: their own module (requires mrmgr),
# never on mrmgr's link line nor in the installed libmrmgr.so.
if pkg-config --exists mrmgr-share; then
	cat >"$work/share.c" <<'PROG'
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <mrmgr/share.h>
static void quiet(enum mrmgr_log_level l, const char *m, void *a)
{
	(void)l; (void)m; (void)a;
}
int main(void)
{
	mrmgr_importer_t *imp;
	int fd = open("/dev/null", O_RDONLY);

	mrmgr_set_log_handler(quiet, NULL, MRMGR_LOG_ERROR);
	/* No provider claims /dev/null: refused, never guessed at. */
	if (mrmgr_importer_open(-1, &imp) != EINVAL ||
	    mrmgr_importer_open(fd, &imp) != EOPNOTSUPP)
		return 1;
	printf("libmrmgr-share %s: the importer refuses what no provider claims\n",
	       mrmgr_version_string());
	return 0;
}
PROG
	shareflags=$(pkg-config --cflags --libs mrmgr-share)
	echo "pkg-config --cflags --libs mrmgr-share: $shareflags"
	# shellcheck disable=SC2086
	$CC -std=c11 -Wall -Wextra -Werror -o "$work/share" "$work/share.c" $shareflags
	run "$work/share"
	case " $(pkg-config --libs mrmgr) " in
	*-lmrmgr-share*) echo "FAIL: mrmgr.pc names libmrmgr-share" >&2; exit 1 ;;
	esac
	if nm -D "$libdir"/libmrmgr.so | grep -qE ' (mrmgr_share_|mrmgr_import)'; then
		echo "FAIL: the installed libmrmgr.so carries the importer or the share helper" >&2
		exit 1
	fi
fi
