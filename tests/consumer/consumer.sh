#!/bin/sh
# Install the built libraries into a staging root, then build and run a
# consumer with nothing but `pkg-config --cflags --libs mrmgr-sim` (which
# requires mrmgr), as a user of the installed packages would, and check
# that the production library does not carry the simulator. With MRMGR_CONSUMER_PREFIX set, use that
# real installation instead of staging one.
set -eu
srcdir=$(cd "$(dirname "$0")" && pwd)
top_builddir=${top_builddir:-.}
CC=${CC:-cc}
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
flags=$(pkg-config --cflags --libs mrmgr-sim)
echo "pkg-config --cflags --libs mrmgr-sim: $flags"
# shellcheck disable=SC2086 # the flags are a word list on purpose
$CC -std=c11 -Wall -Wextra -Werror -o "$work/consumer" "$srcdir/consumer.c" $flags
# The -L flag already carries the sysroot, where there is one.
libdir=$(pkg-config --libs-only-L mrmgr | sed 's/^ *-L//; s/ .*//')
case " $(pkg-config --libs mrmgr) " in
*-lmrmgr-sim*) echo "mrmgr.pc names the simulator" >&2; exit 1 ;;
esac
if nm -D "$libdir"/libmrmgr.so | grep -q 'mrmgr_sim_'; then
	echo "the installed libmrmgr.so carries mrmgr_sim_ symbols" >&2
	exit 1
fi
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/consumer"
