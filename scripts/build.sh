#!/bin/sh
# Configure and build into ./build (out of tree). Extra arguments go to
# configure. MRMGR_WERROR=1 builds with -Werror (CI does).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] && [ configure -nt configure.ac ] && [ Makefile.in -nt Makefile.am ] ||
	./autogen.sh
mkdir -p build
cd build
werror=""
[ "${MRMGR_WERROR:-0}" = 1 ] && werror=--enable-werror
if [ ! -f Makefile ] || [ -n "$werror" ] || [ $# -gt 0 ]; then
	../configure -q $werror "$@"
fi
make -s -j"$(nproc)"
