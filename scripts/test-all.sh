#!/bin/sh
# Quick start, second command: the whole test suite, what CI runs.
# The jobs, their order and their skip variables are .ci/jobs; the runner
# is scripts/ci-jobs.sh (--list shows the jobs, --only NAME runs one).
# MRMGR_SKIP_SANITIZERS=1 leaves out the sanitizer, fuzzing and valgrind
# jobs (FUZZ_SECONDS: per fuzz target); MRMGR_SKIP_RXE=1 every real-verbs
# tier, MRMGR_SKIP_RXE_ODP=1 the ODP tier, MRMGR_SKIP_RXE_2NODE=1 the
# two-node tier. doc/design/testing.md describes each job.
# Exit status: 0 all passed; 125 a qemu guest could not be set up (an
# infrastructure failure, not a test result); anything else a failure.
exec "$(dirname "$0")/ci-jobs.sh" "$@"
