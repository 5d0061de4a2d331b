#!/bin/bash
# guest-2node-suite.sh - runs INSIDE node1 of the two-node tier
# (tests/rxe/two-node.sh hands it in as the text of a bash -c), in the
# build directory. node2 serves tests/rxe/node-exec.py on port 2222 over
# the emulated link; node1 drives:
#   1. the RPC across the nodes with the server's registration invalidated
#      by a free() while the client holds the rkey (tests/rxe/rpc_stale);
#   2. examples/mpi_rdma with Open MPI, one rank per node, node2's daemon
#      launched through node-exec.py as the rsh agent;
# then tells node2 to power off. Exits 0 when both passed, 1 otherwise.
set -u
EXEC="python3 tests/rxe/node-exec.py"
results=()
failed=0
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
record() {
	results+=("$(printf '%-28s %-5s %6.1f s  %s' "$1" "$2" "$3" "${4:-}")")
	[ "$2" = PASS ] || failed=1
}
# Wait (bounded by the guest's timeout, not by a clock here) until a TCP
# port answers.
wait_port() { # host port
	until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do sleep 0.2; done
}

echo "==== the link"
ip -brief addr show eth0
rdma link show
echo "rxe0: port 1 $(cat /sys/class/infiniband/rxe0/ports/1/state)," \
	"gid 0 $(cat /sys/class/infiniband/rxe0/ports/1/gids/0)"
echo "waiting for node2's node-exec on 192.0.2.2:2222"
wait_port node2 2222
$EXEC run node2 2222 'hostname; ip -brief addr show eth0; rdma link show' ||
	{ echo "guest-2node-suite: node2 does not answer"; exit 1; }

echo
echo "==== RPC: stale rkey after the server's free() (tests/rxe/rpc_stale)"
t0=$(now)
./tests/rxe/rpc_stale server 18515 >/tmp/rpc-server.out 2>&1 &
spid=$!
# The server listens once its device and cache are ready.
until grep -q listening /tmp/rpc-server.out 2>/dev/null || ! kill -0 $spid 2>/dev/null; do
	sleep 0.2
done
$EXEC run node2 2222 ./tests/rxe/rpc_stale client node1 18515 | sed 's/^/node2: /'
crc=${PIPESTATUS[0]}
wait $spid
src=$?
sed 's/^/node1: /' /tmp/rpc-server.out
if [ $crc -eq 0 ] && [ $src -eq 0 ]; then
	record "rpc_stale (2 nodes)" PASS "$(elapsed "$t0")" "stale rkey: remote access error, memory untouched"
else
	record "rpc_stale (2 nodes)" FAIL "$(elapsed "$t0")" "server exit $src, client exit $crc"
fi

# The negative control: the same RPC with the server's memory-event
# monitor off (MRMGR_MONITOR=none), so its cache keeps the registration
# of the freed buffer (and merging off: the next RPC's buffer may land
# next to it, and a merged registration would replace it). The stale write then completes with success (into
# the old, still-pinned pages: the reused memory does not see it), and
# both sides must say FAIL; if they passed, the check above could not fail.
echo
echo "==== RPC, negative control: the server's monitor off"
t0=$(now)
MRMGR_MONITOR=none MRMGR_MERGE=0 ./tests/rxe/rpc_stale server 18516 >/tmp/rpc-server.out 2>&1 &
spid=$!
until grep -q listening /tmp/rpc-server.out 2>/dev/null || ! kill -0 $spid 2>/dev/null; do
	sleep 0.2
done
cout=$($EXEC run node2 2222 ./tests/rxe/rpc_stale client node1 18516)
crc=$?
wait $spid
src=$?
printf '%s\n' "$cout" | sed 's/^/node2: /'
sed 's/^/node1: /' /tmp/rpc-server.out
if [ $crc -eq 1 ] && [ $src -eq 1 ] && grep -q 'after the server.s free(): success' <<<"$cout" &&
   grep -q "did not invalidate" /tmp/rpc-server.out; then
	record "rpc_stale negative control" PASS "$(elapsed "$t0")" "without the monitor the stale WRITE succeeds: caught"
else
	record "rpc_stale negative control" FAIL "$(elapsed "$t0")" "server exit $src, client exit $crc"
fi

echo
echo "==== MPI: examples/mpi_rdma, one rank per node"
t0=$(now)
if [ ! -x examples/mpi_rdma ]; then
	record "mpi_rdma (2 nodes)" FAIL 0 "examples/mpi_rdma not built (MPI not found by configure)"
else
	printf 'node1 slots=1\nnode2 slots=1\n' >/tmp/hostfile
	# Open MPI calls the agent as "AGENT HOST COMMAND...", like ssh; the
	# daemon on node2 checks that the agent exists too, so it lives in
	# the build directory, which both nodes share.
	agent=$PWD/tests/rxe/rsh-agent
	printf '#!/bin/sh\nexec python3 %s/tests/rxe/node-exec.py rsh "$@"\n' "$PWD" >"$agent"
	chmod +x "$agent"
	out=$(mpirun --allow-run-as-root -np 2 --hostfile /tmp/hostfile \
		--mca plm_rsh_agent "$agent" \
		--mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 \
		--mca pml ob1 --mca btl self,vader,tcp \
		--mca btl_vader_single_copy_mechanism none \
		-x PATH -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
		sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"; exec ./examples/mpi_rdma' 2>&1)
	rc=$?
	printf '%s\n' "$out"
	if [ $rc -ne 0 ]; then
		record "mpi_rdma (2 nodes)" FAIL "$(elapsed "$t0")" "mpirun exited $rc"
	elif ! grep -q '^rank 0 on node1' <<<"$out" || ! grep -q '^rank 1 on node2' <<<"$out"; then
		record "mpi_rdma (2 nodes)" FAIL "$(elapsed "$t0")" "the ranks were not one per node"
	elif ! grep -q '^mpi_rdma: 12 rounds, .* every byte as expected' <<<"$out"; then
		record "mpi_rdma (2 nodes)" FAIL "$(elapsed "$t0")" "no byte-verified summary"
	else
		record "mpi_rdma (2 nodes)" PASS "$(elapsed "$t0")" "rank 0 on node1, rank 1 on node2, every byte checked"
	fi
fi

$EXEC exit node2 2222 >/dev/null || echo "guest-2node-suite: node2 did not take the exit"
echo
echo "==== summary (two nodes)"
printf '%s\n' "${results[@]}"
if [ $failed -ne 0 ]; then
	echo "guest-2node-suite: FAILED"
	exit 1
fi
echo "guest-2node-suite: all passed"
