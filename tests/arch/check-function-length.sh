#!/bin/sh
# Functions stay short (the house rule, doc/architecture.md's tests/arch
# line): no function of the libraries' sources -- every folder of lib/,
# arch/ subfolders included, sim/ (libmrmgr-sim), share/ (libmrmgr-share)
# and hooks/ (libmrmgr_hooks) -- has a body over MAX lines (100), counted
# from the line after its opening brace to the line before its closing
# one, both at column 0 (the house style: a function's braces, and only a
# function's, sit at column 0). There is no list of exceptions: a long
# function is split before it lands (issue 27).
#
# The programs and tests (tools/, bench/, examples/, tests/) are measured
# with -a but not held.
#
# Usage: check-function-length.sh [-a] (-a: list every long function of
# the tree's C sources, held or not, and exit 0).
set -eu
top_srcdir=${top_srcdir:-.}
src=$(cd "$top_srcdir" && pwd)
MAX=${MAX:-100}
HELD="lib sim share hooks"
all=0
[ "${1:-}" = -a ] && all=1

# long FILE...: "file function lines" of each body over MAX lines. A
# function's name is the first identifier before "(" in its declarator,
# the lines since the last blank line, comment, directive or ";".
long() {
	for f in "$@"; do
		awk -v max="$MAX" -v file="$f" '
		function name_of(h,   n) {
			if (!match(h, /[A-Za-z_][A-Za-z_0-9]*[ \t]*\(/)) return "?"
			n = substr(h, RSTART, RLENGTH)
			sub(/[ \t]*\($/, "", n)
			return n
		}
		/^\{/ { name = name_of(hdr); open = 1; body = 0; next }
		/^\}/ {
			if (open && body > max) print file, name, body
			open = 0; hdr = ""
			next
		}
		open { body++; next }
		/^[ \t]*$/ || /^#/ || /;[ \t]*$/ || /^[ \t]*(\/\*|\*)/ {
			hdr = ""; next
		}
		{ hdr = hdr " " $0 }
		' "$src/$f"
	done
}

cd "$src"
for d in $HELD; do
	[ -d "$d" ] || {
		echo "check-function-length: $src/$d missing (a held folder)" >&2
		exit 1
	}
done
if [ "$all" = 1 ]; then
	echo "functions over $MAX body lines (file function lines):"
	# shellcheck disable=SC2046,SC2086
	long $(find $HELD tools bench examples tests -name '*.c' 2>/dev/null |
		LC_ALL=C sort) | sed 's/^/  /'
	exit 0
fi
# shellcheck disable=SC2086
files=$(find $HELD -name '*.c' | LC_ALL=C sort)
n=$(echo "$files" | wc -l)
# shellcheck disable=SC2086
over=$(long $files)
if [ -n "$over" ]; then
	echo "check-function-length: functions over $MAX body lines in $HELD" \
		"(split them; there are no exceptions):" >&2
	echo "$over" | sed 's/^/  /' >&2
	exit 1
fi
echo "check-function-length: no function over $MAX lines in $HELD ($n files)"
