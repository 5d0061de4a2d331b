#!/bin/sh
# Every function a built libmrmgr library exports (nm -D) has a man page
# once installed: `man mrmgr_x` finds it, and man renders it with every
# groff warning on and none printed. A page may be a `.so` link to one
# that documents the function; the link must resolve.
#
# The pages come from `make install` into a staging root, so the install
# rules are tested too. Skips (77) when configure built no pages
# (doxygen or python3 missing) or man(1) is not installed.
set -eu
top_builddir=${top_builddir:-.}
if [ "${MRMGR_MAN_PAGES:-yes}" != yes ]; then
	echo "check-man: configure found no doxygen or python3: no pages built" >&2
	exit 77
fi
command -v man >/dev/null 2>&1 || { echo "check-man: man(1) not installed (man-db)" >&2; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "check-man: nm not installed (binutils)" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

${MAKE:-make} -s -C "$top_builddir" install-data DESTDIR="$work/root" >/dev/null
man3=$(find "$work/root" -type d -path '*/man/man3' | head -n1)
[ -n "$man3" ] || { echo "check-man: nothing installed in a man3 directory" >&2; exit 1; }
mandir=${man3%/man3}

# The public libraries: libmrmgr and, once it exists, the simulator's own.
libs=$(find "$top_builddir/lib" "$top_builddir/sim" -path '*/.libs/*' -name 'libmrmgr*.so' \
	! -name 'libmrmgr_hooks*' 2>/dev/null | sort)
[ -n "$libs" ] || { echo "check-man: no built libmrmgr*.so under lib/ or sim/" >&2; exit 1; }
printf "check-man: functions exported by: %s\n" "$(echo $libs)"
for lib in $libs; do
	nm -D --defined-only "$lib" | awk '$2 ~ /^[TW]$/ { sub(/@.*/, "", $3); print $3 }'
done | grep '^mrmgr_' | sort -u >"$work/symbols"
n=$(wc -l <"$work/symbols")
[ "$n" -gt 0 ] || { echo "check-man: no mrmgr_* functions exported" >&2; exit 1; }

fail=0
while read -r sym; do
	page=$man3/$sym.3
	if [ ! -f "$page" ]; then
		echo "check-man: $sym: no page $sym.3 installed" >&2
		fail=1
		continue
	fi
	# Follow a .so link (relative to the man root, as man does).
	target=$page
	so=$(sed -n '1s/^\.so  *//p' "$page")
	if [ -n "$so" ]; then
		target=$mandir/$so
		[ -f "$target" ] || { echo "check-man: $sym: .so $so does not exist" >&2; fail=1; continue; }
		grep -q "$sym" "$target" || { echo "check-man: $sym: $so does not name it" >&2; fail=1; }
	fi
	# `man mrmgr_x` finds it in the installed tree.
	found=$(man -M "$mandir" -w 3 "$sym" 2>/dev/null || true)
	[ -n "$found" ] || { echo "check-man: $sym: man -M $mandir 3 $sym finds nothing" >&2; fail=1; }
	# Render with every groff warning (-ww); any line on stderr fails.
	if ! LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings=w -l "$target" >"$work/out" 2>"$work/err" ||
		[ -s "$work/err" ]; then
		echo "check-man: $sym: $target renders with warnings:" >&2
		cat "$work/err" >&2
		fail=1
	fi
	grep -q "^NAME" "$work/out" || { echo "check-man: $sym: no NAME section rendered" >&2; fail=1; }
done <"$work/symbols"
for p in "$mandir"/man3/mrmgr.3 "$mandir"/man7/mrmgr-env.7 "$mandir"/man1/*.1; do
	[ -f "$p" ] || continue
	LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings=w -l "$p" >/dev/null 2>"$work/err" || true
	[ ! -s "$work/err" ] || { echo "check-man: $p renders with warnings:" >&2; cat "$work/err" >&2; fail=1; }
done
[ $fail -eq 0 ] || exit 1
echo "check-man: $n exported functions, each with an installed page that renders without warnings"
