#!/bin/sh
# Functions stay short (doc/architecture.md, "How we write C here"): no
# function of lib/core, lib/ext, lib/util or lib/os has a body over
# MAX lines (100), counted from the line after its opening brace to the
# line before its closing one, both at column 0 (the house style: a
# function's braces, and only a function's, sit at column 0).
#
# The other folders of lib/ (monitor, device) are measured and listed but
# not held yet (issue 27); EXCEPTIONS names, "file function", a long
# function of a held folder that is known and tolerated. Nothing may be
# added there; a function that got short must leave it.
#
# Usage: check-function-length.sh [-a] (-a: list every folder's long
# functions, held or not, and exit 0).
set -eu
top_srcdir=${top_srcdir:-.}
src=$(cd "$top_srcdir" && pwd)
MAX=${MAX:-100}
HELD="lib/core lib/ext lib/util lib/os"
all=0
[ "${1:-}" = -a ] && all=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

cat >"$tmp/allow" <<'EXCEPTIONS'
EXCEPTIONS

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
files=$(find lib -name '*.c' | LC_ALL=C sort)
# shellcheck disable=SC2086
long $files >"$tmp/all"
if [ "$all" = 1 ]; then
	echo "functions over $MAX body lines in lib/ (file function lines):"
	sed 's/^/  /' "$tmp/all"
	exit 0
fi

: >"$tmp/held"
for d in $HELD; do
	grep "^$d/" "$tmp/all" >>"$tmp/held" || true
done
awk '{ print $1, $2 }' "$tmp/held" | LC_ALL=C sort -u >"$tmp/found"
LC_ALL=C sort -u "$tmp/allow" -o "$tmp/allow"
new=$(LC_ALL=C comm -23 "$tmp/found" "$tmp/allow")
gone=$(LC_ALL=C comm -13 "$tmp/found" "$tmp/allow")
if [ -n "$gone" ]; then
	echo "check-function-length: listed, no longer over $MAX lines (remove from the list):" >&2
	echo "$gone" | sed 's/^/  /' >&2
	exit 1
fi
if [ -n "$new" ]; then
	echo "check-function-length: functions over $MAX body lines in $HELD:" >&2
	grep -F -f "$tmp/found" "$tmp/held" | sed 's/^/  /' >&2
	exit 1
fi
others=$(grep -vE "^($(echo "$HELD" | sed 's/ /|/g'))/" "$tmp/all" | wc -l)
echo "check-function-length: no function over $MAX lines in $HELD" \
	"($(wc -l <"$tmp/allow") listed; $others elsewhere in lib/, not held yet)"
