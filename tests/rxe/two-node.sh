#!/bin/bash
# two-node.sh - what `make check-rxe-2node` runs, from the build directory:
# two qemu guests (tests/rxe/run-in-vm.sh, Debian 12's kernel, the host's
# root as in `make check-rxe`) on one emulated Ethernet link, rxe0 on each
# guest's virtio NIC. The link is qemu's socket netdev: node1 listens on
# 127.0.0.1:PORT, node2 connects to it; nothing is bridged to any host
# network and the guests' addresses (192.0.2.1, .2) exist only on the link.
# node2 serves tests/rxe/node-exec.py; node1 runs
# tests/rxe/guest-2node-suite.sh (the stale-rkey RPC, MPI across the nodes).
# The consoles go to standard output (prefixed) and
# tests/rxe/check-rxe-2node.log, the status to tests/rxe/check-rxe-2node.rc.
#
# Exit status: 0 passed; 1 a test failed; 124 timeout; 125 INFRASTRUCTURE
# FAILURE (a guest could not be set up, node2 never connected): not a
# test result.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
builddir=$(pwd -P)
mkdir -p tests/rxe
log=tests/rxe/check-rxe-2node.log
rcfile=tests/rxe/check-rxe-2node.rc
rm -f "$rcfile"
exec > >(tee "$log") 2>&1

finish() {
	echo "$1" >"$rcfile"
	case $1 in
	0) echo "check-rxe-2node: PASS: $2" ;;
	*) echo "************************************************************************"
	   case $1 in
	   124) echo "check-rxe-2node: TIMEOUT: $2" ;;
	   125) echo "check-rxe-2node: INFRASTRUCTURE FAILURE (exit 125): $2. Not a test result." ;;
	   *) echo "check-rxe-2node: FAIL (exit $1): $2; log $builddir/$log" ;;
	   esac
	   echo "************************************************************************" ;;
	esac
	exit "$1"
}

# The guests read the helpers from the build directory (their share).
cp "$here/node-exec.py" tests/rxe/node-exec.py || finish 125 "no node-exec.py"
suite=$(cat "$here/guest-2node-suite.sh") || finish 125 "no guest-2node-suite.sh"
[ -x tests/rxe/rpc_stale ] || finish 1 "tests/rxe/rpc_stale not built"

# A free port on the host's loopback for the link (qemu binds it next).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
	finish 125 "no free port on 127.0.0.1"

export MRMGR_VM_SHARE=${MRMGR_VM_SHARE:-$builddir}
export MRMGR_VM_TIMEOUT=${MRMGR_VM_TIMEOUT:-600}
export MRMGR_TEST_REQUIRE_DEVICE=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MRMGR_VM_ENV="OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"
start=$(date +%s)

# The kernel and initramfs are prepared once, before the two boots race
# for them (run-in-vm.sh holds a lock while preparing; a trivial run does it).
MRMGR_VM_NET=socket-listen:0 MRMGR_VM_NODE=1 bash "$here/run-in-vm.sh" --prepare-only 2>&1 |
	sed 's/^/prepare: /' || finish 125 "preparing the kernel and initramfs failed"

MRMGR_VM_NET=socket-listen:$port MRMGR_VM_NODE=1 \
	bash "$here/run-in-vm.sh" bash -c "$suite" guest-2node-suite.sh 2>&1 |
	sed -u 's/^/node1| /' &
n1=$!
# node2 connects once node1's qemu listens.
tries=0
until ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; do
	tries=$((tries + 1))
	# qemu binds the port before it loads the kernel: a few seconds at most.
	[ $tries -lt 600 ] || { kill $n1 2>/dev/null; finish 125 "node1's qemu never listened on 127.0.0.1:$port"; }
	kill -0 $n1 2>/dev/null || finish 125 "node1 ended before listening"
	sleep 0.1
done
MRMGR_VM_NET=socket-connect:$port MRMGR_VM_NODE=2 \
	bash "$here/run-in-vm.sh" python3 tests/rxe/node-exec.py serve 2222 2>&1 |
	sed -u 's/^/node2| /' &
n2=$!
# (pipefail: a pipeline's status is run-in-vm.sh's, not sed's)
wait $n1
rc1=$?
wait $n2
rc2=$?
secs=$(($(date +%s) - start))
if [ "$rc1" = 125 ] || [ "$rc2" = 125 ]; then
	finish 125 "a guest could not be set up (node1 $rc1, node2 $rc2; ${secs} s)"
elif [ "$rc1" = 124 ] || [ "$rc2" = 124 ]; then
	finish 124 "a guest ran past ${MRMGR_VM_TIMEOUT} s"
elif [ "$rc1" = 0 ] && [ "$rc2" = 0 ]; then
	finish 0 "two nodes: stale-rkey RPC and MPI passed (${secs} s)"
else
	finish 1 "two nodes: node1 exit $rc1, node2 exit $rc2 (${secs} s)"
fi
