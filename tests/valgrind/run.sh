#!/bin/sh
# Run a program under valgrind memcheck with --track-fds=yes.
#   run.sh TIMEOUT program [args...]   (from the build directory)
# Exit status: 0 clean; 1 memcheck errors, a descriptor left open at exit
# (other than the inherited ones and the library's per-process /proc/self
# files, procfs.h), or the program failed; 124 it did not finish within
# TIMEOUT seconds (then killed).
set -u
timeout=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# One log per process: a forked child (the examples' importers) reports
# at its _exit the descriptors it inherited, which are not leaks. Its
# memcheck errors make it exit 99, which its parent reports.
timeout -k 10 "$timeout" ./libtool --mode=execute valgrind -q \
	--track-fds=yes --error-exitcode=99 --suppressions="$here/mrmgr.supp" \
	--log-file="$dir/vg.%p" "$@" >/dev/null 2>&1
rc=$?
cat "$dir"/vg.* >"$dir/all" 2>/dev/null
log=$dir/all
main=$(ls "$dir"/vg.* 2>/dev/null | sed 's/.*vg\.//' | sort -n | head -n 1)
# Open descriptors at exit of the main process, from the --track-fds
# report: an entry is "Open file descriptor N: what", then its origin
# ("<inherited from parent>" or a stack).
leaked=$(cat "$dir/vg.$main" 2>/dev/null | awk '
	/Open (file|AF_UNIX socket|AF_INET) descriptor/ { flush(); d = $0; inh = 0; next }
	/<inherited from parent>/ { inh = 1 }
	/^==[0-9]+== *$/ { flush() }
	function flush() { if (d != "" && !inh && d !~ /\/proc\/self\//) print d; d = "" }
	END { flush() }')
case $rc in
0) ;;
124|137) echo "TIMEOUT after ${timeout}s: $*"; exit 124 ;;
99) echo "MEMCHECK ERRORS: $*"; grep -v '^--' "$log" | head -n 60; exit 1 ;;
*) echo "FAILED (exit $rc): $*"; grep -v '^--' "$log" | head -n 40; exit 1 ;;
esac
if [ -n "$leaked" ]; then
	echo "DESCRIPTORS LEFT OPEN: $*"
	echo "$leaked"
	exit 1
fi
echo "ok: $*"
