#!/bin/sh
# CI job "examples": every example once on the simulated HCA (and the
# ones that take --rxe on the simulated rxe profile). From build/.
set -eu
./examples/basic_cache
./examples/demo --messages 5000 >/dev/null
./examples/odp_prefetch >/dev/null
./examples/odp_prefetch --rxe >/dev/null
./examples/shared_mr >/dev/null
./examples/export_import >/dev/null
./examples/export_import --rxe >/dev/null 2>&1
./examples/dmabuf_cache >/dev/null
./examples/device_va_cache >/dev/null
