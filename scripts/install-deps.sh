#!/bin/sh
# Install every Debian 12 package the project needs to build, test,
# document and benchmark. Safe to run again. Needs root (or sudo).
# The rxe tier's guest runs the host's own binaries (bash, ip, rdma,
# libibverbs and its rxe provider, libcriterion) from the host root, so
# they are all here; qemu's firmware (qboot.rom, pvh.bin) and TCG module
# come with qemu-system-x86's hard dependencies, so --no-install-recommends
# is enough; zstd unpacks the newer kernels of the ODP tier
# (tests/rxe/odp-tier.sh). clang and its runtime (libFuzzer, ASan, UBSan)
# build the fuzz targets in tests/fuzz/. The allocators (and scudo, in
# libclang-rt-14-dev) are the allocator matrix's (scripts/ci-allocators.sh).
# valgrind and strace count the costs tests/perf/check-costs.sh bounds.
set -eu
pkgs="build-essential autoconf automake libtool pkg-config
      libibverbs-dev ibverbs-providers librdmacm-dev libcriterion-dev
      doxygen valgrind strace clang
      qemu-system-x86 busybox-static cpio kmod xz-utils iproute2
      abigail-tools libucx-dev gnuplot-nox
      clang libclang-rt-14-dev
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
      python3 man-db groff-base openmpi-bin libopenmpi-dev
      dpkg-dev debhelper fakeroot lintian rpm rpmlint
      patchelf libcapstone-dev debootstrap zstd
      libtcmalloc-minimal4 libgoogle-perftools4 libjemalloc2 libmimalloc2.0
      libtbbmalloc2"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && { echo "install-deps: all packages present"; exit 0; }
echo "install-deps: installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # a word list on purpose
$SUDO apt-get install -y -qq --no-install-recommends $missing
