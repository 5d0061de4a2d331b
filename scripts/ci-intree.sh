#!/bin/sh
# The in-tree build, the classic way a packager runs it:
#   ./autogen.sh && ./configure && make && make check
# in the source tree itself, here in a clean copy of it (a clone of the
# committed tree, or the files a distribution lists), never in this work
# tree: its out-of-tree build/ stays valid for the other steps (configure
# refuses to build out of tree once the source tree is configured).
# Then every file the build left in the copy must be ignored by git
# (.gitignore), so none is committed by mistake and the layering check,
# which scans what git would track, never reads a build output.
# Usage: ci-intree.sh [KEEP-DIR]  (the copy is removed unless KEEP-DIR)
# Exit status: 0 passed; anything else a failure (the test log printed).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -gt 0 ]; then
	work=$1
	rm -rf "$work"
	mkdir -p "$work"
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/mrmgr-intree.XXXXXX")
	trap 'rm -rf "$work"' EXIT INT TERM
fi
src=$work/src
if [ -e "$top/.git" ]; then
	git clone -q "$top" "$src"
	echo "in-tree build of $(git -C "$src" log -1 --format='%h %s' | cut -c1-72)"
	if [ -n "$(git -C "$top" status --porcelain --untracked-files=no)" ]; then
		echo "note: uncommitted changes in $top are not in the copy"
	fi
elif [ -f "$top/tests/arch/dist-files" ]; then
	mkdir -p "$src"
	(cd "$top" && tar cf - -T tests/arch/dist-files) | (cd "$src" && tar xf -)
	echo "in-tree build of the distribution in $top"
else
	echo "ci-intree: $top is neither a git checkout nor a distribution" >&2
	exit 1
fi
cd "$src"
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -le 2 ] || jobs=2
[ -x configure ] || ./autogen.sh >/dev/null
./configure -q
make -s -j"$jobs"
# The suites' programs in parallel, the tests one at a time (as the
# out-of-tree `make check` step runs them).
make -s -j"$jobs" check TESTS= >/dev/null
if ! make -s check; then
	cat test-suite.log >&2 || true
	exit 1
fi
if [ -e .git ]; then
	left=$(git status --porcelain)
	if [ -n "$left" ]; then
		echo "ci-intree: the in-tree build left files git does not ignore" \
			"(add them to .gitignore):" >&2
		echo "$left" | sed 's/^/  /' >&2
		exit 1
	fi
fi
echo "in-tree ./configure && make && make check: passed"
