#!/bin/sh
# examples/mpi_rdma under mpirun, 2 ranks. MPI itself is kept off the
# RDMA device (shared memory and TCP only), so the example owns it.
# Without an RDMA device (the host) the example exits 77: SKIP. The
# real-verbs tier runs it on rxe0 (tests/rxe/guest-suite.sh).
#   mpi_rdma.sh [EXAMPLE]   (default: ./examples/mpi_rdma)
set -u
prog=${1:-./examples/mpi_rdma}
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null 2>&1 || { echo "mpi_rdma.sh: no mpirun (openmpi-bin)" >&2; exit 77; }
[ -x "$prog" ] || { echo "mpi_rdma.sh: $prog not built" >&2; exit 1; }
# Open MPI refuses root without this; the CI machine and the guest are root.
root=
[ "$(id -u)" -ne 0 ] || root=--allow-run-as-root
# shellcheck disable=SC2086 # $root is empty or one word
"$MPIRUN" $root --oversubscribe -np 2 \
	--mca pml ob1 --mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none \
	"$prog"
rc=$?
[ $rc -ne 77 ] || echo "mpi_rdma.sh: no RDMA device here: skipped"
exit $rc
