#!/bin/sh
# The device-memory checks on a real NVIDIA GPU (doc/device-memory.md):
# tools/gpu_check.c against libcuda loaded with dlopen. Unattended;
# the last line is the verdict: "PASS: ...", "FAIL: ..." (exit 1) or
# "SKIP: ..." (exit 0: no GPU or no libcuda, as on CI's machines).
# Needs a built tree (scripts/build.sh): BUILD=<dir>, default build/.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' &&
	! [ -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] &&
	! [ -e /usr/lib64/libcuda.so.1 ]; then
	echo "SKIP: no libcuda.so.1 (no NVIDIA driver on this machine)"
	exit 0
fi
prog=$build/tools/gpu_check
if ! [ -x "$prog" ]; then
	make -s -C "$build" tools/gpu_check >/dev/null 2>&1 || {
		echo "FAIL: could not build tools/gpu_check in $build"
		exit 1
	}
fi
# libtool's wrapper finds the uninstalled libraries.
timeout 300 "$prog"
rc=$?
[ "$rc" = 124 ] && echo "FAIL: gpu_check ran past 300 s"
exit "$rc"
