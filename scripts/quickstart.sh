#!/bin/sh
# Quick start, first command: install what is needed, build, run the demo
# (on the first RDMA device, or the simulated HCA when there is none).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh"
exec "$top/build/examples/demo" "$@"
