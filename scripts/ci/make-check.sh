#!/bin/sh
# CI job "check": `make check` in build/, its test-suite.log on failure.
# Run from the build directory (.ci/jobs).
set -eu
# Only this run's results count in the closing line.
rm -f tests/rxe/check-rxe.log tests/rxe/check-rxe.rc \
	tests/rxe/check-rxe-odp.log tests/rxe/check-rxe-odp.rc \
	tests/rxe/check-rxe-2node.log tests/rxe/check-rxe-2node.rc
if ! make -s check; then
	cat test-suite.log >&2 || true
	exit 1
fi
