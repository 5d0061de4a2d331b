#!/bin/sh
# CI step: the patch source's instruction decoders against Capstone over
# every exported function of the libc matrix's libcs (bullseye, trixie,
# sid; amd64 and arm64), not only the host's. `make check` already ran
# tests/unit/test_decode_ref over whatever the cache held; this step
# fetches the matrix first (scripts/fetch-libc.sh, cached: a second run
# fetches nothing) and requires all six libcs to be compared.
# Run from the build directory (as scripts/test-all.sh does).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
fetch=$top/scripts/fetch-libc.sh
if [ ! -x "$fetch" ] && [ ! -f "$fetch" ]; then
	echo "ci-decode: $fetch missing (the libc matrix's fetcher): skipped"
	exit 0
fi
n=0
for suite in bullseye trixie sid; do
	for arch in amd64 arm64; do
		sh "$fetch" "$suite" "$arch" >/dev/null
		n=$((n + 1))
	done
done
cache=$(dirname "$(dirname "$(sh "$fetch" sid amd64)")")
# The cache directory: SUITE-ARCH/root/... under it.
while [ ! -d "$cache/sid-amd64" ] && [ "$cache" != / ]; do
	cache=$(dirname "$cache")
done
MRMGR_LIBC_CACHE=$cache MRMGR_DECODE_REQUIRE=$n ./tests/unit/test_decode_ref
