#!/bin/sh
# The core's files form no cycle at link level (issue 27): from the built
# objects of lib/core, an edge a -> b when a's undefined symbols include
# one b defines; the graph's strongly connected components of more than
# one file (or a file calling itself through another) are cycles, and fail.
# Deterministic: the symbols, not the calls, and sorted at every step.
#
# KNOWN lists tolerated cycles (a cycle that is not one of them, or not
# inside one, fails): none. The files' order, lowest first, is in
# doc/architecture.md ("The core's files").
#
# Usage: check-core-cycles.sh [-e] (-e: print the edges too).
set -eu
top_builddir=${top_builddir:-.}
bld=$(cd "$top_builddir" && pwd)
LAYER=${LAYER:-core}
KNOWN=""
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

for o in "$bld/lib/$LAYER/.libs"/libmrmgr_la-*.o "$bld/lib/$LAYER"/libmrmgr_la-*.o; do
	[ -f "$o" ] && echo "$o"
done | awk -F/ '!seen[$NF]++' | LC_ALL=C sort >"$tmp/objs"
[ -s "$tmp/objs" ] || { echo "check-core-cycles: lib/$LAYER not built" >&2; exit 1; }

name() { n=$(basename "$1" .o); echo "${n#libmrmgr_la-}"; }
: >"$tmp/defs"
: >"$tmp/undef"
while read -r o; do
	n=$(name "$o")
	nm -g --defined-only "$o" | awk -v n="$n" 'NF == 3 { print $3, n }' >>"$tmp/defs"
	nm -u "$o" | awk -v n="$n" '{ print $2, n }' >>"$tmp/undef"
done <"$tmp/objs"
LC_ALL=C sort -u "$tmp/defs" -o "$tmp/defs"
LC_ALL=C sort -u "$tmp/undef" -o "$tmp/undef"
# "user definer symbol" for each symbol a file takes from another.
LC_ALL=C join "$tmp/undef" "$tmp/defs" | awk '$2 != $3 { print $2, $3, $1 }' |
	LC_ALL=C sort -u >"$tmp/syms"
awk '{ print $1, $2 }' "$tmp/syms" | LC_ALL=C sort -u >"$tmp/edges"
[ "${1:-}" = -e ] && sed 's/^/edge /' "$tmp/syms"

# Tarjan's strongly connected components over the sorted edges.
awk '
function visit(v,   i, w) {
	idx[v] = low[v] = ++counter
	stack[++sp] = v; on[v] = 1
	for (i = 1; i <= nout[v]; i++) {
		w = out[v, i]
		if (!(w in idx)) {
			visit(w)
			if (low[w] < low[v]) low[v] = low[w]
		} else if (on[w] && idx[w] < low[v])
			low[v] = idx[w]
	}
	if (low[v] == idx[v]) {
		comp = ""; k = 0
		do { w = stack[sp--]; on[w] = 0; comp = w " " comp; k++ } while (w != v)
		if (k > 1) print comp
	}
}
{ out[$1, ++nout[$1]] = $2; nodes[$1]; nodes[$2] }
END {
	n = 0
	for (v in nodes) list[++n] = v
	# sort the node names (insertion sort: a few dozen files)
	for (i = 2; i <= n; i++) {
		v = list[i]
		for (j = i - 1; j > 0 && list[j] > v; j--) list[j + 1] = list[j]
		list[j + 1] = v
	}
	for (i = 1; i <= n; i++) if (!(list[i] in idx)) visit(list[i])
}' "$tmp/edges" >"$tmp/cycles"

# inside COMPONENT KNOWN-COMPONENT: every file of the first is in the second.
inside() {
	for f in $1; do
		case " $2 " in *" $f "*) ;; *) return 1 ;; esac
	done
}
bad=0
while read -r comp; do
	if [ -n "$KNOWN" ] && inside "$comp" "$KNOWN"; then
		echo "check-core-cycles: known cycle: { $comp}"
		continue
	fi
	bad=1
	echo "check-core-cycles: lib/$LAYER's files call each other in a new cycle:" >&2
	echo "  { $comp}" >&2
	for a in $comp; do
		for b in $comp; do
			awk -v a="$a" -v b="$b" '$1 == a && $2 == b { printf "    %s -> %s (%s)\n", a, b, $3 }' "$tmp/syms" >&2
		done
	done
done <"$tmp/cycles"
[ "$bad" = 0 ] || exit 1
echo "check-core-cycles: lib/$LAYER's $(wc -l <"$tmp/objs") objects, $(wc -l <"$tmp/edges") edges, $(wc -l <"$tmp/cycles") known cycle(s), no new one"
