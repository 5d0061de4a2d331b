#!/bin/sh
# The CUDA tools against the fake libcuda.so.1 of the tests
# (tests/cuda/fake_cuda.c, found through LD_LIBRARY_PATH): the program of
# scripts/gpu-check.sh runs every case a GPU would and its verdict is
# PASS -- the cuMemFree of an address allocated again missing with no
# report among them -- and mrmgr_info says the CUDA domain is present and
# follows frees. Without a GPU this is the only run that program gets.
set -u
top_builddir=${top_builddir:-.}
libdir=$(cd "$top_builddir/tests/cuda/.libs" 2>/dev/null && pwd) || {
	echo "SKIP: the fake libcuda is not built"
	exit 77
}
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
fail=0

out=$("$top_builddir/tools/gpu_check" 2>&1)
echo "$out"
case $(printf '%s\n' "$out" | tail -n 1) in
PASS:*) ;;
*) echo "FAIL: gpu_check's verdict against the fake libcuda" >&2; fail=1 ;;
esac
printf '%s\n' "$out" | grep -q '^PASS address reused after cuMemFree, not reported: a miss' || {
	echo "FAIL: gpu_check did not check an unreported cuMemFree" >&2
	fail=1
}
printf '%s\n' "$out" | grep -q '^INFO CUDA memory domain: frees followed' || {
	echo "FAIL: the CUDA domain does not follow frees in gpu_check" >&2
	fail=1
}

info=$("$top_builddir/tools/mrmgr_info" 2>&1)
printf '%s\n' "$info" | grep -E '^  cuda +present: .*; frees followed: ' || {
	echo "FAIL: mrmgr_info's cuda line:" >&2
	printf '%s\n' "$info" | grep -E '^  cuda' >&2
	fail=1
}
exit "$fail"
