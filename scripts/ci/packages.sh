#!/bin/sh
# CI job "packages": scripts/ci-packages.sh on the newest tarball that
# `make distcheck` left in build/. From build/.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck disable=SC2012 # the newest, by time; names are ours
tarball=$(ls -t libmrmgr-*.tar.gz 2>/dev/null | head -n1)
[ -n "$tarball" ] || { echo "packages: no libmrmgr-*.tar.gz (run the distcheck job first)" >&2; exit 1; }
exec "$top/scripts/ci-packages.sh" "$tarball"
