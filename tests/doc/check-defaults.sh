#!/bin/sh
# Every default the documentation states for an MRMGR_* variable is the
# library's: mrmgr_info(1) --sim prints the effective configuration of a
# cache made with default attributes and no MRMGR_* set, and each of
#   README.md (the environment table), doc/environment.md (its table),
#   doc/man/mrmgr-env.7 (its VARIABLES), include/mrmgr/mrmgr.h ("(default
#   ::MRMGR_...)" in the attribute comments)
# must state the same default. Sizes and counts that depend on the machine
# are checked by their rule: the cap mrmgr_info reports for max_regions,
# the rule it names for max_bytes (RLIMIT_MEMLOCK, half of physical
# memory). The default memory-event source under `auto` (what mrmgr_info
# reports as active) must be the one the docs name first. Variables that
# mrmgr_info does not report (MRMGR_CHECK, MRMGR_HOOKS_MALLOPT) must at
# least agree across the docs. A variable mrmgr_info reports and a doc
# lacks fails too. So a change of a default fails `make check` until the
# docs follow.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
tool=${MRMGR_INFO:-$top_builddir/tools/mrmgr_info}
readme=${MRMGR_DOC_README:-$top_srcdir/README.md}
envmd=$top_srcdir/doc/environment.md
man7=$top_srcdir/doc/man/mrmgr-env.7
header=$top_srcdir/include/mrmgr/mrmgr.h
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# No MRMGR_* variable may leak in from the caller's environment.
for v in $(env | sed -n 's/^\(MRMGR_[A-Z_]*\)=.*/\1/p'); do
	case $v in MRMGR_INFO | MRMGR_DOC_README | MRMGR_MAN_PAGES) ;; *) unset "$v" ;; esac
done
if ! "$tool" --sim >"$out" 2>/dev/null; then
	bad "$tool --sim failed"
	exit 1
fi

# The default column of VAR's row in a markdown table whose header names
# a "default" column.
md_default() { # file var
	awk -v var="$2" -F'|' '
	/^\| *variable *\|/ { col = 0
		for (i = 2; i < NF; i++) { h = $i; gsub(/ /, "", h); if (h == "default") col = i } }
	col && $2 ~ "^ *`" var "` *$" { d = $col; gsub(/^ +| +$/, "", d); print d; exit }' "$1"
}
# The text of VAR's entry in the man page (.TP / .B VAR / text), joined
# into one line; then what "(default X)" or "Default: X." says.
man_entry() {
	awk -v var="$1" '
	$0 == ".B " var { on = 1; next }
	on && /^\.(TP|PP|SH)/ { exit }
	on { printf "%s ", $0 }' "$man7" | sed 's/\\-/-/g'
}
man_default() {
	man_entry "$1" | sed -n 's/.*(default \([^)]*\)).*/\1/p; t; s/.*Default: \([^.]*\)\..*/\1/p'
}
# 1, 0 for switches; the word otherwise (no backticks, lower case).
norm() {
	v=$(printf '%s' "$1" | tr -d '`' | tr 'A-Z' 'a-z' | sed 's/^ *//; s/ *$//')
	case $v in 1 | on | yes | true) echo 1 ;; 0 | off | no | false) echo 0 ;; *) echo "$v" ;; esac
}
# The section of environment.md that a "see [the byte limit](#...)" cell names.
env_section() { # anchor
	awk -v a="{#$1}" 'index($0, a) { on = 1; next } on && /^## / { exit } on' "$envmd"
}
docs_default() { # var -> lines "doc<TAB>text"
	printf 'README.md\t%s\n' "$(md_default "$readme" "$1")"
	d=$(md_default "$envmd" "$1")
	case $d in *"](#"*)
		a=$(printf '%s' "$d" | sed -n 's/.*](#\([a-z_]*\)).*/\1/p')
		d=$(env_section "$a" | tr '\n' ' ') ;;
	esac
	printf 'doc/environment.md\t%s\n' "$d"
	printf 'doc/man/mrmgr-env.7\t%s\n' "$(man_default "$1")"
}

# The configuration lines: "  NAME  VALUE  default (note)".
vars=$(sed -n 's/^  \(MRMGR_[A-Z_]*\)  *[^ ][^ ]*  *default.*/\1/p' "$out")
[ -n "$vars" ] || { bad "no MRMGR_* line with source \"default\" in mrmgr_info's output"; exit 1; }
checked=0
for v in $vars; do
	line=$(grep "^  $v " "$out")
	value=$(printf '%s\n' "$line" | awk '{ print $2 }')
	note=$(printf '%s\n' "$line" | sed -n 's/.* default (\(.*\))$/\1/p')
	tab=$(printf '\t')
	docs_default "$v" | while IFS=$tab read -r doc text; do
		if [ -z "$text" ]; then
			echo "FAIL: $doc states no default for $v (mrmgr_info: $value${note:+ ($note)})" >&2
			echo x
			continue
		fi
		flat=$(printf '%s' "$text" | tr -d ',')
		case $v in
		MRMGR_MAX_REGIONS)
			# The effective value: the cap when the note says it
			# capped max_mr (it does with --sim), else max_mr.
			cap=$value
			case $flat in *max_mr*"$cap"*) ;; *)
				echo "FAIL: $doc: default of $v is \"$text\"; mrmgr_info: device max_mr capped at $cap" >&2
				echo x ;;
			esac ;;
		MRMGR_MAX_BYTES)
			case $note in
			*RLIMIT_MEMLOCK* | *"half of physical memory"*) ;;
			*) echo "FAIL: mrmgr_info names a rule for $v the docs do not know: \"$note\"" >&2
			   echo x ;;
			esac
			case $flat in *RLIMIT_MEMLOCK*"half of "*) ;; *)
				echo "FAIL: $doc: default of $v (\"$text\") must name both rules, RLIMIT_MEMLOCK then half of physical memory (mrmgr_info here: $note)" >&2
				echo x ;;
			esac ;;
		*)
			first=$(printf '%s' "$text" | sed 's/[ (,;:].*//')
			if [ "$(norm "$first")" != "$(norm "$value")" ]; then
				echo "FAIL: $doc: default of $v is \"$first\"; mrmgr_info: $value" >&2
				echo x
			fi ;;
		esac
	done | grep x >/dev/null && fail=1
	checked=$((checked + 1))
done

# The header's "(default ::MRMGR_X_Y)" comments: the ODP and monitor modes.
for pair in "MRMGR_ODP:MRMGR_ODP_" "MRMGR_MONITOR:MRMGR_MONITOR_"; do
	v=${pair%%:*}
	prefix=${pair#*:}
	h=$(sed -n "s/.*(default ::$prefix\([A-Z]*\)).*/\1/p" "$header" | head -n1)
	value=$(sed -n "s/^  $v  *\([^ ]*\) .*/\1/p" "$out")
	if [ -z "$h" ]; then
		bad "include/mrmgr/mrmgr.h states no \"(default ::$prefix...)\""
	elif [ "$(norm "$h")" != "$(norm "$value")" ]; then
		bad "include/mrmgr/mrmgr.h: default of $v is $prefix$h; mrmgr_info: $value"
	fi
done

# The source `auto` uses by default: the first one mrmgr_info reports as
# active must be the one each doc names first for `auto`.
if grep -Eq '^  mode +auto$' "$out" && grep -Eq '^  libc patched +active' "$out"; then
	readme_m=$(awk -F'|' '$2 ~ /`MRMGR_MONITOR`/ { print $4 }' "$readme")
	env_m=$(awk -F'|' '$2 ~ /`MRMGR_MONITOR`/ { print $5 }' "$envmd")
	man_m=$(man_entry MRMGR_MONITOR)
	for d in "README.md:$readme_m" "doc/environment.md:$env_m" "doc/man/mrmgr-env.7:$man_m"; do
		doc=${d%%:*}
		# What follows "auto:" or "auto (", to the next comma.
		auto=$(printf '%s' "${d#*:}" | awk '{ if (match($0, /auto`?(:| \()/)) {
			s = substr($0, RSTART + RLENGTH); sub(/,.*/, "", s); print s } }')
		case $auto in
		*patch*) ;;
		*) bad "$doc: what MRMGR_MONITOR=auto uses first (\"$auto\") is not the patched libc, which mrmgr_info reports active" ;;
		esac
	done
else
	echo "check-defaults: the patched libc is not active here; the default source is not compared"
fi

# Not in mrmgr_info: the docs must agree with each other.
for v in MRMGR_CHECK MRMGR_HOOKS_MALLOPT; do
	ref=
	tab=$(printf '\t')
	for t in $(docs_default "$v" | sed 's/[ (,;:].*//; s/.*\t//'); do
		t=$(norm "$t")
		[ -n "$ref" ] || ref=$t
		[ "$t" = "$ref" ] || bad "the docs disagree on the default of $v: $(docs_default "$v" | tr '\n\t' '; ')"
	done
	[ -n "$ref" ] || bad "no doc states the default of $v"
done

[ "$fail" = 0 ] || exit 1
echo "check-defaults: $checked defaults of mrmgr_info agree with README.md, doc/environment.md, mrmgr-env(7) and the header"
