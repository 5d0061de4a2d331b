#!/bin/sh
# CI job "fuzz": the libFuzzer targets in build-fuzz/ (clang): corpus
# replay and a bounded run of FUZZ_SECONDS (default 30) per target.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$top/build-fuzz"
cd "$top/build-fuzz"
[ -f Makefile ] || ../configure -q --enable-fuzz
make -s fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
