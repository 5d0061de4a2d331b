#!/bin/sh
# Regenerate the build system from configure.ac and Makefile.am.
set -e
cd "$(dirname "$0")"
# libtoolize fills m4/ (ignored by git, so absent in a fresh clone);
# aclocal warns when the folder it is told to read is missing.
mkdir -p m4
autoreconf -fi
