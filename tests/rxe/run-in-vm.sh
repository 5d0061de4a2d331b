#!/bin/bash
# run-in-vm.sh - run a command inside a throw-away qemu guest that has a real
# Soft-RoCE device (rdma_rxe, "rxe0"), so host-built test binaries can talk to
# the real libibverbs / kernel uverbs stack.  The host kernel has no RDMA
# stack, hence the VM.
#
# Usage:
#   tests/rxe/run-in-vm.sh 'COMMAND STRING'     run through bash -c
#   tests/rxe/run-in-vm.sh PROG ARG...          run PROG with exact argv
#   tests/rxe/run-in-vm.sh                      interactive shell (debugging)
#   tests/rxe/run-in-vm.sh --prepare-only       fetch and build, boot nothing
#
# What happens:
#   * Debian's current 6.1 kernel package (linux-image-<abi>-amd64-unsigned)
#     is downloaded with `apt-get download` and unpacked with `dpkg -x` into a
#     cache directory - never installed.  Its vmlinuz is unpacked to an ELF
#     vmlinux because qemu boots that through the PVH entry much faster.
#   * A busybox initramfs (cached, keyed on a hash of this script, the kernel
#     and busybox) loads the needed modules and builds the guest root:
#     host "/" read-only over 9p + overlayfs with a tmpfs upper layer, and the
#     build tree (git top-level of $PWD, else $PWD) read-write over a second
#     9p share at the same absolute path.  Everything written outside the
#     build tree is lost at power-off.
#   * The guest creates netdev rdmanet0 (dummy) and rxe0 on it, then chroots
#     into the overlay root, cds to the caller's $PWD and runs COMMAND as root
#     with RLIMIT_MEMLOCK unlimited, a clean environment (PATH, HOME=/root,
#     LANG) plus every MRMGR_* and CRITERION_* variable of the caller.
#
# Exit codes:
#   0..124  COMMAND's own exit code
#   1       also used when COMMAND exited 125..255 (killed by a signal, not
#           found, ...); the real code is printed
#   124     timeout (MRMGR_VM_TIMEOUT seconds, default 900) - or COMMAND
#           itself exited 124
#   125     infrastructure failure: kernel fetch, initramfs build, qemu boot,
#           module load, 9p mount, rxe0 not created
#
# Environment (all optional):
#   MRMGR_VM_CACHE        cache dir (kernel, initramfs)   [/var/tmp/mrmgr-vm]
#   MRMGR_VM_TIMEOUT      seconds before the VM is killed [900]
#   MRMGR_VM_MEM          guest RAM (qemu -m syntax)      [2G]
#   MRMGR_VM_SMP          guest CPUs                      [2]
#   MRMGR_VM_TWO_DEVICES  1: veth pair with rxe0 and rxe1 instead of the dummy
#   MRMGR_VM_SHARE        read-write directory            [git top-level or $PWD]
#   MRMGR_VM_ENV          extra variable names to pass into the guest
#   MRMGR_VM_MEMLOCK      ulimit -l value in the guest    [unlimited]
#   MRMGR_VM_KERNEL_ABI   pin a kernel ABI, e.g. 6.1.0-56 [apt's current]
#   MRMGR_VM_ACCEL        force "tcg" or "kvm"            [auto]
#   MRMGR_VM_VERBOSE      1: show the kernel log and the guest's setup steps
#   MRMGR_VM_KERNEL_DIR   boot this prepared kernel instead of fetching 6.1:
#                         a directory with kver, vmlinux (optional) and
#                         root/ (the unpacked packages, depmod done), as
#                         tests/rxe/odp-tier.sh makes for a newer kernel
#   MRMGR_VM_MODULES      the top-level modules to load [see REQUIRED_MODULES]
#   MRMGR_VM_ROOT         the guest's root: this directory instead of the
#                         host's / (e.g. a debootstrap root of a newer
#                         Debian); the share and the cwd, when under it,
#                         appear in the guest at their paths inside it
#   MRMGR_VM_NET          socket-listen:PORT | socket-connect:PORT: a virtio
#                         NIC (eth0, 192.0.2.N) linked to another guest by
#                         a qemu socket netdev on 127.0.0.1:PORT; rxe0 on it
#   MRMGR_VM_NODE         N (1..4) with MRMGR_VM_NET: hostname nodeN
#   MRMGR_VM_NET_MTU      MTU of the netdev(s) under rxe [the default, 1500]
#   MRMGR_VM_TCG_THREAD   single: one host thread for all vCPUs (TCG only);
#                         two vCPU threads crashed 2 of 11 boots of 7.3.4
#
# Needs: qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 apt,
# plus libibverbs1/ibverbs-providers on the host root for verbs programs.
# Root is needed only for `apt-get update` (when the package lists are stale)
# and for what the guest command writes into the share to keep root ownership.
set -euo pipefail

PROG=run-in-vm
SCRIPT_PATH=$(readlink -f "${BASH_SOURCE[0]}")
CACHE=${MRMGR_VM_CACHE:-/var/tmp/mrmgr-vm}
TIMEOUT=${MRMGR_VM_TIMEOUT:-900}
MEM=${MRMGR_VM_MEM:-2G}
SMP=${MRMGR_VM_SMP:-2}
VERBOSE=${MRMGR_VM_VERBOSE:-0}
# Top-level modules the guest needs; their dependencies are added by modprobe.
REQUIRED_MODULES=${MRMGR_VM_MODULES:-"virtio_pci 9pnet_virtio 9p overlay dummy veth
                  crc32_generic rdma_rxe ib_uverbs rdma_ucm ib_umad"}
# A node on a link between guests has a virtio NIC.
[ -z "${MRMGR_VM_NET:-}" ] || REQUIRED_MODULES="$REQUIRED_MODULES virtio_net"
# Accelerated variants: nice to have, but they refuse to load on CPU models
# that lack the instructions (qemu64 under TCG), so failures are tolerated.
OPTIONAL_MODULES="crc32-pclmul"

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
infra_fail() { log "INFRASTRUCTURE FAILURE: $*"; exit 125; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# Quote for a POSIX shell (the guest's busybox ash reads the config file).
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

for tool in qemu-system-x86_64 busybox cpio xz depmod modprobe dpkg apt-get \
            apt-cache timeout flock; do
    command -v "$tool" >/dev/null || infra_fail "missing host tool: $tool"
done
[ -x /usr/bin/rdma ] || [ -x /sbin/rdma ] || [ -x /usr/sbin/rdma ] ||
    infra_fail "missing host tool: rdma (package iproute2)"

mkdir -p "$CACHE" || infra_fail "cannot create cache dir $CACHE"
CACHE=$(cd "$CACHE" && pwd -P)

# One preparer at a time: parallel `make check` runs share the cache.
exec {lockfd}>"$CACHE/.lock"
flock "$lockfd"

# ---------------------------------------------------------------- kernel ---
# Ask apt which ABI linux-image-amd64 currently points at.
current_abi() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: linux-image-\([0-9.]*-[0-9]*\)-amd64$/\1/p' |
        head -n1
}

# Unpack a downloaded kernel package in $1 into $1/root, ready for booting.
prepare_kernel_dir() {
    local dir=$1 kver vmlinuz off
    rm -rf "$dir/root"
    dpkg -x "$dir"/linux-image-*.deb "$dir/root" || return 1
    kver=$(find "$dir/root/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n1)
    depmod -b "$dir/root" "$kver" || return 1
    vmlinuz="$dir/root/boot/vmlinuz-$kver"
    # vmlinuz is a bzImage whose payload is an xz stream; the ELF inside boots
    # through qemu's PVH entry point, skipping the real-mode setup and the
    # in-guest decompression (slow under TCG).
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n1 | cut -d: -f1) || true
    rm -f "$dir/vmlinux"
    # (xz reads from a process substitution: in a pipe, tail's SIGPIPE after
    # xz stops at the end of the stream would fail the pipeline.)
    if [ -n "$off" ] &&
       xz -dc --single-stream <(tail -c +"$((off + 1))" "$vmlinuz") >"$dir/vmlinux.tmp" 2>/dev/null &&
       [ "$(head -c4 "$dir/vmlinux.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
        mv "$dir/vmlinux.tmp" "$dir/vmlinux"
    else
        rm -f "$dir/vmlinux.tmp"
        log "could not extract an ELF vmlinux; will boot the bzImage (slower)"
    fi
    echo "$kver" >"$dir/kver"
    rm -f "$dir"/linux-image-*.deb  # the unpacked tree is all we need
    touch "$dir/.ready"
}

fetch_kernel() {
    local abi=$1 dir=$2 pkg="linux-image-$1-amd64-unsigned"
    rm -rf "$dir" && mkdir -p "$dir"
    # apt-get download writes into the current directory.
    if ! (cd "$dir" && apt-get download -q "$pkg" >/dev/null 2>&1); then
        log "apt-get download $pkg failed; running apt-get update"
        apt-get update -q >/dev/null 2>&1 || log "apt-get update failed"
        (cd "$dir" && apt-get download -q "$pkg" >/dev/null) || return 1
    fi
    prepare_kernel_dir "$dir"
}

t0=$(now)
if [ -n "${MRMGR_VM_KERNEL_DIR:-}" ]; then
    kdir=$(cd "$MRMGR_VM_KERNEL_DIR" 2>/dev/null && pwd -P) ||
        infra_fail "MRMGR_VM_KERNEL_DIR $MRMGR_VM_KERNEL_DIR does not exist"
    [ -s "$kdir/kver" ] && [ -d "$kdir/root" ] ||
        infra_fail "MRMGR_VM_KERNEL_DIR $kdir is not a prepared kernel (kver, root/)"
    abi=given kernel_state=given
fi
# apt-cache costs ~0.7 s a run; its answer only changes when the package
# lists do, so remember it until /var/lib/apt/lists is touched.
abi_file="$CACHE/current-abi"
if [ "${abi:-}" = given ]; then
    :
elif [ -n "${MRMGR_VM_KERNEL_ABI:-}" ]; then
    abi=$MRMGR_VM_KERNEL_ABI
elif [ -s "$abi_file" ] && [ "$abi_file" -nt /var/lib/apt/lists ]; then
    abi=$(cat "$abi_file")
else
    abi=$(current_abi)
    [ -z "$abi" ] || echo "$abi" >"$abi_file"
fi
if [ -z "${abi:-}" ]; then
    log "apt-cache does not know linux-image-amd64; running apt-get update"
    apt-get update -q >/dev/null 2>&1 || log "apt-get update failed"
    abi=$(current_abi)
    [ -z "$abi" ] || echo "$abi" >"$abi_file"
fi
if [ -z "$abi" ]; then
    # Offline and no package lists: any kernel we fetched before will do.
    kdir=$(find "$CACHE" -mindepth 2 -maxdepth 2 -path "$CACHE/linux-*/.ready" | sort -V | tail -n1)
    [ -n "$kdir" ] || infra_fail "cannot determine the kernel ABI (apt-cache depends linux-image-amd64)"
    kdir=$(dirname "$kdir")
    log "kernel ABI unknown, using cached $(basename "$kdir")"
    kernel_state=cached
elif [ "$abi" != given ]; then
    kdir="$CACHE/linux-$abi"
    if [ -e "$kdir/.ready" ]; then
        kernel_state=cached
    else
        log "fetching kernel linux-image-$abi-amd64-unsigned"
        fetch_kernel "$abi" "$kdir" ||
            { rm -rf "$kdir"; infra_fail "could not fetch/unpack kernel $abi"; }
        kernel_state=fetched
    fi
fi
KVER=$(cat "$kdir/kver")
KROOT="$kdir/root"
if [ -e "$kdir/vmlinux" ]; then KERNEL="$kdir/vmlinux"; else KERNEL="$KROOT/boot/vmlinuz-$KVER"; fi
log "kernel $KVER $kernel_state ($(since "$t0") s)"

# ------------------------------------------------------------- initramfs ---
# PID 1 of the guest.  Runs under busybox ash.  Per-run settings come from
# /ctl/config on the "mrmgrctl" share so the image itself stays cacheable.
guest_init() {
    cat <<'EOF'
#!/bin/sh
# PID 1 of the run-in-vm.sh guest (generated; edit run-in-vm.sh instead).
PATH=/bin:/sbin
export PATH
# The initramfs has no /dev/console node (building it would need mknod, i.e.
# root), so mount devtmpfs first and attach stdio to the console afterwards.
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
# Plain \n on the console, so logs on the host carry no \r.
stty -F /dev/console -onlcr 2>/dev/null
mount -t proc proc /proc
mount -t sysfs sysfs /sys

CTL=/ctl
VERBOSE=0
say() { echo "mrmgr-vm: $*"; }
# Infrastructure failure: leave a mark for the host (exit code 125), power off.
die() {
    say "INFRASTRUCTURE FAILURE: $*"
    echo "MRMGR_VM_INFRA_FAIL"
    echo "$*" >"$CTL/infra" 2>/dev/null
    sync
    poweroff -f
    sleep 10
}

# Modules in dependency order (computed on the host with modprobe).
while read -r kind ko args; do
    # shellcheck disable=SC2086 # args are module parameters, split on purpose
    if ! insmod "/mods/$ko" $args 2>/tmp/insmod.err; then
        [ "$kind" = opt ] || die "insmod $ko: $(cat /tmp/insmod.err)"
    fi
done </mods/load.list

NINEP="trans=virtio,version=9p2000.L,msize=262144"
mkdir -p /ctl /ro /ovl /newroot
mount -t 9p -o "$NINEP" mrmgrctl /ctl || die "mount 9p mrmgrctl"
# shellcheck disable=SC1091 # written by the host for this run
. /ctl/config
# Verbose: trace every setup step on the console.
[ "$VERBOSE" != 1 ] || set -x

# Host / read-only, made writable by a throw-away tmpfs upper layer.
mount -t 9p -o "$NINEP,cache=loose,ro" hostroot /ro || die "mount 9p hostroot"
mount -t tmpfs -o mode=0755 tmpfs /ovl || die "tmpfs for overlay"
mkdir -p /ovl/upper /ovl/work
mount -t overlay -o lowerdir=/ro,upperdir=/ovl/upper,workdir=/ovl/work overlay /newroot ||
    die "mount overlay root"
R=/newroot
mount -t proc proc $R/proc || die "proc in new root"
mount -t sysfs sysfs $R/sys || die "sysfs in new root"
mount -t devtmpfs devtmpfs $R/dev || die "devtmpfs in new root"
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $R/tmp || die "tmpfs /tmp"
# A fresh /run: the host's pid files and sockets mean nothing here.
mount -t tmpfs -o mode=0755 tmpfs $R/run || die "tmpfs /run"
mkdir -p $R/run/mrmgr-vm
mount --move /ctl $R/run/mrmgr-vm || die "move control share"
CTL=$R/run/mrmgr-vm
# The build tree, read-write, at its host path (after /tmp, which may hold it).
mkdir -p "$R$RW_DIR"
mount -t 9p -o "$NINEP,cache=mmap" buildtree "$R$RW_DIR" || die "mount 9p buildtree at $RW_DIR"
# The kernel's modules where modprobe looks, for manual loading while debugging.
if [ -d "$R$KMOD_DIR" ]; then
    mkdir -p "$R/lib/modules/$KVER" && mount --bind "$R$KMOD_DIR" "$R/lib/modules/$KVER"
fi
if [ -n "$NODE" ]; then hostname "node$NODE"; else hostname mrmgr-vm; fi

# Network and Soft-RoCE, with the host's own ip and rdma tools.
# (Through env: busybox's chroot would run its own "ip" applet, not the host's.)
run() { chroot $R /usr/bin/env "$@"; }
nodad() { echo 0 >"/proc/sys/net/ipv6/conf/$1/accept_dad"; }
run ip link set lo up
if [ -n "$NODE" ]; then
    # One node of a link between guests: the virtio NIC (eth0) is the wire,
    # the host's end a socket on 127.0.0.1. 192.0.2.0/24 (TEST-NET-1)
    # exists only on this emulated link.
    ls /sys/class/net/eth0 >/dev/null 2>&1 || die "no eth0 (virtio-net)"
    nodad eth0
    [ -z "$NET_MTU" ] || run ip link set eth0 mtu "$NET_MTU" || die "eth0 mtu $NET_MTU"
    run ip addr add "192.0.2.$NODE/24" dev eth0 || die "eth0 address"
    run ip link set eth0 up || die "eth0 up"
    for n in 1 2 3 4; do echo "192.0.2.$n node$n"; done >>$R/etc/hosts
    run rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0"
    DEVS=rxe0
elif [ "$TWO_DEVICES" = 1 ]; then
    run ip link add rdmaveth0 type veth peer name rdmaveth1 || die "veth pair"
    nodad rdmaveth0; nodad rdmaveth1
    if [ -n "$NET_MTU" ]; then
        run ip link set rdmaveth0 mtu "$NET_MTU" && run ip link set rdmaveth1 mtu "$NET_MTU" ||
            die "veth mtu $NET_MTU"
    fi
    run ip addr add 192.0.2.1/24 dev rdmaveth0
    run ip addr add 192.0.2.2/24 dev rdmaveth1
    run ip link set rdmaveth0 up || die "rdmaveth0 up"
    run ip link set rdmaveth1 up || die "rdmaveth1 up"
    run rdma link add rxe0 type rxe netdev rdmaveth0 || die "rdma link add rxe0"
    run rdma link add rxe1 type rxe netdev rdmaveth1 || die "rdma link add rxe1"
    DEVS="rxe0 rxe1"
else
    # dummy: a netdev with a MAC and an IPv6 link-local address (GID 0) and
    # no wire; rxe loops its packets back internally.  The address lives only
    # inside this guest.
    run ip link add rdmanet0 type dummy || die "dummy netdev"
    nodad rdmanet0
    [ -z "$NET_MTU" ] || run ip link set rdmanet0 mtu "$NET_MTU" || die "rdmanet0 mtu $NET_MTU"
    run ip addr add 192.0.2.1/24 dev rdmanet0
    run ip link set rdmanet0 up || die "rdmanet0 up"
    run rdma link add rxe0 type rxe netdev rdmanet0 || die "rdma link add rxe0"
    DEVS=rxe0
fi
for d in $DEVS; do
    [ -e "/sys/class/infiniband/$d" ] || die "$d missing from /sys/class/infiniband"
done
ls /dev/infiniband/uverbs0 >/dev/null 2>&1 || die "/dev/infiniband/uverbs0 missing"
run rdma link show
echo "mrmgr-vm: /sys/class/infiniband:" /sys/class/infiniband/* | sed 's|/sys/class/infiniband/||g'

# shellcheck disable=SC3045 # busybox ash has ulimit -l
ulimit -l unlimited
if [ "$INTERACTIVE" = 1 ]; then
    # A real controlling tty, so job control and ^C work in the shell.
    stty -F /dev/ttyS0 onlcr 2>/dev/null
    setsid -c chroot $R /bin/bash /run/mrmgr-vm/run.sh </dev/ttyS0 >/dev/ttyS0 2>&1
    rc=$?
else
    chroot $R /bin/bash /run/mrmgr-vm/run.sh </dev/null
    rc=$?
fi
echo "$rc" >"$CTL/exit"
echo "MRMGR_VM_EXIT=$rc"
sync
poweroff -f
sleep 10
EOF
}

# Module list in load order: "req|opt file.ko [params]", deduplicated.
module_load_list() {
    local kind mods m
    for kind in req opt; do
        if [ "$kind" = req ]; then mods=$REQUIRED_MODULES; else mods=$OPTIONAL_MODULES; fi
        for m in $mods; do
            if [ "$kind" = opt ]; then
                modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" 2>/dev/null || true
            else
                modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" || return 1
            fi
        done | awk -v kind="$kind" '$1 == "insmod" { $1 = kind; print }'
    done | awk '!seen[$2]++'
}

build_initramfs() {
    local out=$1 stage list kind path args a
    stage=$(mktemp -d "$CACHE/initramfs.XXXXXX")
    mkdir -p "$stage"/{bin,sbin,dev,proc,sys,tmp,mods}
    cp /bin/busybox "$stage/bin/busybox"
    for a in $(busybox --list); do
        [ -e "$stage/bin/$a" ] || ln -s busybox "$stage/bin/$a"
    done
    list=$(module_load_list) || { rm -rf "$stage"; return 1; }
    while read -r kind path args; do
        a=$(basename "$path")
        case $a in
        # Compressed modules (Debian from 6.x): unpacked here, since
        # busybox insmod passes the file to init_module() as it is.
        *.ko.xz) a=${a%.xz}; xz -dc "$path" >"$stage/mods/$a" || { rm -rf "$stage"; return 1; } ;;
        *.ko.zst) a=${a%.zst}; zstd -qdc "$path" >"$stage/mods/$a" || { rm -rf "$stage"; return 1; } ;;
        *) cp "$path" "$stage/mods/" ;;
        esac
        echo "$kind $a $args" >>"$stage/mods/load.list"
    done <<<"$list"
    guest_init >"$stage/init"
    chmod 755 "$stage/init"
    # Uncompressed: decompressing in the guest would cost more (TCG) than
    # qemu copying a few extra MB.
    (cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out.tmp" &&
        mv "$out.tmp" "$out"
    local rc=$?
    rm -rf "$stage"
    return $rc
}

t1=$(now)
ikey=$( { sha256sum "$SCRIPT_PATH" /bin/busybox | cut -d' ' -f1; echo "$KVER $kdir"; } |
        sha256sum | cut -c1-16)
ikey=$(echo "$ikey $REQUIRED_MODULES" | sha256sum | cut -c1-16)
INITRD="$CACHE/initramfs-$ikey.cpio"
if [ -e "$INITRD" ]; then
    initrd_state=cached
else
    build_initramfs "$INITRD" || infra_fail "initramfs build failed"
    initrd_state=built
    # Drop images made by older versions of this script or kernel (not
    # brand-new ones: a concurrent run of another version may be booting it).
    find "$CACHE" -maxdepth 1 -name 'initramfs-*.cpio' ! -name "initramfs-$ikey.cpio" \
         -mmin +60 -delete
fi
log "initramfs $initrd_state ($(since "$t1") s)"
flock -u "$lockfd"
# --prepare-only: the kernel and the initramfs are ready; boot nothing (for
# callers that start several guests at once, tests/rxe/two-node.sh).
[ "${1:-}" != --prepare-only ] || exit 0

# -------------------------------------------------------------- this run ---
# A node on a link between guests: a virtio NIC whose other end is a qemu
# socket netdev on 127.0.0.1 (listen on one node, connect on the other).
node="" nic=(-nic none)
case ${MRMGR_VM_NET:-} in
"") ;;
socket-listen:[0-9]* | socket-connect:[0-9]*)
    node=${MRMGR_VM_NODE:-}
    case $node in [1-4]) ;; *) infra_fail "MRMGR_VM_NET needs MRMGR_VM_NODE=1..4" ;; esac
    mode=${MRMGR_VM_NET%%:*}
    nic=(-netdev "socket,id=link0,${mode#socket-}=127.0.0.1:${MRMGR_VM_NET#*:}"
         -device "virtio-net-pci,netdev=link0,mac=52:54:00:6d:72:0$node")
    ;;
*) infra_fail "MRMGR_VM_NET: socket-listen:PORT or socket-connect:PORT, not $MRMGR_VM_NET" ;;
esac
CWD=$(pwd -P)
if [ -n "${MRMGR_VM_SHARE:-}" ]; then
    RW_DIR=$(cd "$MRMGR_VM_SHARE" && pwd -P)
else
    RW_DIR=$(git -C "$CWD" rev-parse --show-toplevel 2>/dev/null || echo "$CWD")
    RW_DIR=$(cd "$RW_DIR" && pwd -P)
fi
[ "$RW_DIR" != / ] || infra_fail "refusing to share / read-write; cd somewhere or set MRMGR_VM_SHARE"
case $CWD/ in
"$RW_DIR"/*) ;;
*) log "note: $CWD is outside the read-write share $RW_DIR: the guest's writes there are lost" ;;
esac
# The guest's root, and where the share and the cwd are in it.
GUEST_ROOT=/
G_RW_DIR=$RW_DIR G_CWD=$CWD
if [ -n "${MRMGR_VM_ROOT:-}" ]; then
    GUEST_ROOT=$(cd "$MRMGR_VM_ROOT" 2>/dev/null && pwd -P) ||
        infra_fail "MRMGR_VM_ROOT $MRMGR_VM_ROOT does not exist"
    [ -x "$GUEST_ROOT/bin/bash" ] || infra_fail "MRMGR_VM_ROOT $GUEST_ROOT has no /bin/bash"
    case $RW_DIR/ in "$GUEST_ROOT"/?*) G_RW_DIR=${RW_DIR#"$GUEST_ROOT"} ;; esac
    case $CWD/ in "$GUEST_ROOT"/?*) G_CWD=${CWD#"$GUEST_ROOT"} ;; esac
fi

CTL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/mrmgr-vm-ctl.XXXXXX")
trap 'rm -rf "$CTL_DIR"' EXIT

interactive=0
if [ $# -eq 0 ]; then
    interactive=1
    [ -t 0 ] || infra_fail "no COMMAND given and stdin is not a terminal"
fi

{
    echo "RW_DIR=$(sq "$G_RW_DIR")"
    echo "KVER=$(sq "$KVER")"
    echo "KMOD_DIR=$(sq "$KROOT/lib/modules/$KVER")"
    echo "TWO_DEVICES=$(sq "${MRMGR_VM_TWO_DEVICES:-0}")"
    echo "NET_MTU=$(sq "${MRMGR_VM_NET_MTU:-}")"
    echo "NODE=$(sq "$node")"
    echo "INTERACTIVE=$interactive"
    echo "VERBOSE=$(sq "$VERBOSE")"
} >"$CTL_DIR/config"

# run.sh is executed by the host's bash inside the chroot.
{
    echo '# generated by run-in-vm.sh'
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    echo 'export HOME=/root LANG=C.UTF-8'
    if [ "$interactive" = 1 ]; then
        echo "export TERM=$(sq "${TERM:-vt100}")"
    else
        echo 'export TERM=dumb'
    fi
    # Pass through the project's and Criterion's knobs, plus any named extras.
    for v in $(compgen -e); do
        case $v in
            MRMGR_*|CRITERION_*) ;;
            *) case " ${MRMGR_VM_ENV:-} " in *" $v "*) ;; *) continue ;; esac ;;
        esac
        echo "export $v=$(sq "${!v}")"
    done
    # Failures here are the harness's, not the command's: report them as such.
    # shellcheck disable=SC2016 # expands in the guest
    echo 'infra() { echo "$1" >/run/mrmgr-vm/infra; exit 125; }'
    echo "ulimit -l $(sq "${MRMGR_VM_MEMLOCK:-unlimited}") || infra 'ulimit -l failed'"
    echo "cd -- $(sq "$G_CWD") || infra $(sq "cannot cd to $G_CWD")"
    if [ "$interactive" = 1 ]; then
        echo 'echo "mrmgr-vm: interactive shell; exit to power off"'
        echo 'exec /bin/bash -i'
    elif [ $# -eq 1 ]; then
        echo "exec /bin/bash -c $(sq "$1")"
    else
        printf 'exec'
        for a in "$@"; do printf ' %s' "$(sq "$a")"; done
        echo
    fi
} >"$CTL_DIR/run.sh"

# ------------------------------------------------------------------ boot ---
# KVM only when it is a real hardware KVM: the paravirtual kvm_pvm found on
# some hosts cannot run a stock kernel.
accel=${MRMGR_VM_ACCEL:-}
if [ -z "$accel" ]; then
    if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
        accel=kvm
    else
        accel=tcg
    fi
fi
if [ "$accel" = kvm ]; then cpu=(-cpu host); else cpu=(); fi
accel_opt=$accel
[ "$accel" != tcg ] || [ -z "${MRMGR_VM_TCG_THREAD:-}" ] || accel_opt+=",thread=$MRMGR_VM_TCG_THREAD"

append="console=ttyS0 panic=-1 reboot=t"
if [ "$VERBOSE" = 1 ]; then append+=" loglevel=7"; else append+=" quiet loglevel=3"; fi
# Under TCG skip work that only matters on real hardware.
append+=" mitigations=off i8042.noaux i8042.nokbd i8042.nopnp tsc=unstable"

# qboot instead of SeaBIOS: a little faster, and SeaBIOS writes terminal
# reset/clear sequences to the serial console (i.e. into our logs).
bios=()
[ ! -e /usr/share/qemu/qboot.rom ] || bios=(-bios /usr/share/qemu/qboot.rom)

qemu=(qemu-system-x86_64
      -machine q35 "${bios[@]}" -accel "$accel_opt" "${cpu[@]}" -m "$MEM" -smp "$SMP"
      -vga none "${nic[@]}" -nographic -no-reboot
      -kernel "$KERNEL" -initrd "$INITRD" -append "$append"
      # (qemu option values escape "," as ",,")
      -virtfs "local,path=${GUEST_ROOT//,/,,},mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
      -virtfs "local,path=${RW_DIR//,/,,},mount_tag=buildtree,security_model=none,multidevs=remap"
      -virtfs "local,path=${CTL_DIR//,/,,},mount_tag=mrmgrctl,security_model=none")

log "booting ($accel_opt, $MEM, $SMP cpus; rw share $RW_DIR; cwd $CWD)"
t2=$(now)
set +e
if [ "$interactive" = 1 ]; then
    timeout --foreground -k 10 "$TIMEOUT" "${qemu[@]}"
else
    timeout --foreground -k 10 "$TIMEOUT" "${qemu[@]}" </dev/null
fi
qrc=$?
set -e
log "boot+run $(since "$t2") s (total $(since "$t0") s)"

if [ -s "$CTL_DIR/infra" ]; then
    infra_fail "in guest: $(cat "$CTL_DIR/infra")"
elif [ -s "$CTL_DIR/exit" ]; then
    rc=$(cat "$CTL_DIR/exit")
    if [ "$rc" -gt 124 ]; then
        log "command exited $rc; reporting 1 (125 is reserved for infrastructure)"
        rc=1
    fi
    exit "$rc"
elif [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
    log "TIMEOUT after $TIMEOUT s"
    exit 124
else
    infra_fail "guest ended without reporting an exit code (qemu exit $qrc)"
fi
