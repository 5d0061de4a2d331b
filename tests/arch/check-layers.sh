#!/bin/sh
# The layers' arrows (doc/architecture.md), held by the sources and the
# built objects:
#   util <- os <- device <- kinds <- core <- ext;  os <- monitor <- core
#   os <- intercept <- monitor (the patch engine knows no monitor, no
#   cache: it reports to the sink its user binds)
#   sim -> the public device seam only;   libmrmgr.so knows no simulator
#   share (libmrmgr-share.so) -> libmrmgr's public API; libmrmgr.so
#   neither holds nor names the importer and the share helper
# Fails when os/maps.c (the maps reader the hooks call) calls anything
# but async-signal-safe functions, when a file of lib/core includes a
# header of lib/ext or calls an ext function, a file of lib/ext includes
# a header of lib/core other than core.h and ext.h or one of lib/monitor,
# lib/monitor includes or calls the core or ext, the lower
# layers (device, os, util) reach up, production code names the simulator,
# libmrmgr.so exports or references an mrmgr_sim_ symbol, or
# libmrmgr-sim.so uses anything of libmrmgr but the public device seam,
# or libmrmgr.so exports or references an mrmgr_share_ / mrmgr_import
# symbol or a file of lib/ includes the share library's headers.
set -eu
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
src=$(cd "$top_srcdir" && pwd)
bld=$(cd "$top_builddir" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# Known violations, each "rule file what": none are left (the core
# reaches features only through its hook table, the monitor knows no
# cache, os/ reads maps for everybody). Nothing may be added here.
cat >"$tmp/allow" <<'ALLOW'
ALLOW
: >"$tmp/found"

# The sources, never the build's own outputs: an in-tree build (a plain
# `./configure && make check`) leaves .lo, .la, .deps/*.Plo and .libs/
# beside them, and those name every symbol and header. In a git checkout
# the files git tracks or would track (not ignored; a new file counts
# before it is added); in a distribution (`make distcheck`, an unpacked
# tarball, no .git) the list dist-hook wrote into it.
if [ -e "$src/.git" ] && command -v git >/dev/null 2>&1; then
	git -C "$src" ls-files --cached --others --exclude-standard
elif [ -f "$src/tests/arch/dist-files" ]; then
	cat "$src/tests/arch/dist-files"
else
	# A source tree with neither (a downloaded archive of the
	# repository): the source folders' C, assembly and map files, less
	# what an in-tree build writes beside them (.libs/, .deps/, objects).
	(cd "$src" && find lib sim share hooks tools include examples tests \
		-path '*/.libs' -prune -o -path '*/.deps' -prune -o -type f \
		\( -name '*.c' -o -name '*.h' -o -name '*.S' -o -name '*.map' \) \
		-print 2>/dev/null)
fi | LC_ALL=C sort -u | while read -r f; do
	[ -f "$src/$f" ] && echo "$f" # tracked but deleted: not a source now
done >"$tmp/sources"
[ -s "$tmp/sources" ] || { echo "check-layers: no sources listed" >&2; exit 1; }

# sources_in DIR REGEX: the sources in DIR (and its subfolders: the
# interception engine's arch/) whose name matches.
sources_in() { grep -E "^$1/([^/]+/)*[^/]*$2\$" "$tmp/sources" || true; }
# grep_sources ERE PATH-PREFIX...: "file:line:text" of the sources there.
grep_sources() {
	re=$1
	shift
	for p in "$@"; do grep -E "^$p(/|\$)" "$tmp/sources" || true; done |
		(cd "$src" && xargs -r grep -HnE "$re") || true
}

headers_of() { sources_in "lib/$1" '\.h' | sed 's|.*/||'; }

# includes LAYER RULE HEADER-LAYERS...: includes of those layers' headers.
includes() {
	layer=$1 rule=$2
	shift 2
	for l in "$@"; do headers_of "$l"; done | sort -u >"$tmp/hdrs"
	for f in $(sources_in "lib/$layer" '\.[ch]'); do
		f=$src/$f
		sed -n 's/^#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f" | sort -u |
			comm -12 - "$tmp/hdrs" |
			sed "s|^|$rule $layer/$(basename "$f") |" >>"$tmp/found"
	done
}

# The library's objects of a layer (libtool puts PIC objects in .libs).
objects() {
	[ -d "$bld/lib/$1" ] || return 0
	find "$bld/lib/$1" -name 'libmrmgr_la-*.o' | LC_ALL=C sort |
		awk -F/ '!seen[$NF]++'
}

defined_by() {
	for l in "$@"; do objects "$l"; done >"$tmp/objs"
	[ -s "$tmp/objs" ] || { echo "check-layers: objects not built" >&2; exit 1; }
	xargs nm -g --defined-only <"$tmp/objs" | awk 'NF == 3 { print $3 }' | sort -u
}

# calls LAYER RULE CALLEE-LAYERS...: symbols LAYER's objects take from them.
calls() {
	layer=$1 rule=$2
	shift 2
	defined_by "$@" >"$tmp/defs"
	for o in $(objects "$layer"); do
		name=$(basename "$o" .o)
		name=${name#libmrmgr_la-}
		nm -u "$o" | awk '{ print $2 }' | sort -u | comm -12 - "$tmp/defs" |
			sed "s|^|$rule $layer/$name.c |" >>"$tmp/found"
	done
}

includes core core-includes-ext ext
# Features reach the core through core.h and ext.h only: no other header
# of the core (cache.h, region.h ...) and none of the monitor's, whose
# business with a region is the core's.
includes ext ext-includes-core-private core monitor
sed -i -E '/^ext-includes-core-private [^ ]+ (core|ext)\.h$/d' "$tmp/found"
includes monitor monitor-includes-core core ext kinds
includes intercept intercept-includes-upper core ext monitor device kinds
# A memory kind (doc/design/memory-kinds.md) knows the device seam below
# it and nothing of the cache above it.
includes kinds kinds-includes-upper core ext monitor intercept
for low in device os util; do
	includes "$low" "$low-includes-upper" core ext monitor intercept kinds
done
calls core core-calls-ext ext
calls monitor monitor-calls-core core ext kinds
calls intercept intercept-calls-upper core ext monitor device kinds
calls kinds kinds-calls-upper core ext monitor intercept
for low in device os util; do
	calls "$low" "$low-calls-upper" core ext monitor intercept kinds
done

# The maps reader (os/maps.c) runs inside the memory hooks and from
# signal handlers: it calls only async-signal-safe functions (no
# allocator, no stdio, no lock).
maps_o=$(objects os | grep '/libmrmgr_la-maps\.o$' || true)
[ -n "$maps_o" ] || { echo "check-layers: os/maps.o not built" >&2; exit 1; }
nm -u "$maps_o" | awk '{ print $2 }' | sed 's/@.*//' |
	grep -vxE 'open|open64|read|close|memchr|memmove|memcmp|memset|__errno_location|__stack_chk_fail|__stack_chk_guard|_GLOBAL_OFFSET_TABLE_' |
	sed 's|^|maps-not-signal-safe os/maps.c |' >>"$tmp/found" || true

# Production code names no simulator: no sim header, no sim call.
grep_sources 'mrmgr_sim_|mrmgr__sim|MRMGR__SIM|sim_internal\.h|sim_share\.h|mrmgr/sim\.h' \
	lib share hooks include/mrmgr/mrmgr.h include/mrmgr/device.h |
	sed "s|^|production-names-sim |" >>"$tmp/found"

# libmrmgr.so: no mrmgr_sim_ symbol, exported, imported or local.
# The built file itself (not libtool's relink leftovers, *.so.x.y.zT).
built_so() {
	find "$bld/lib/.libs" -name "$1.so.*" | grep -E "/$1\.so\.[0-9]+\.[0-9]+\.[0-9]+\$" | head -n1
}

so=$(built_so libmrmgr)
[ -n "$so" ] || { echo "check-layers: libmrmgr.so not built" >&2; exit 1; }
{ nm -D "$so"; nm "$so" 2>/dev/null || true; } | awk '{ print $NF }' |
	grep -E '^mrmgr_sim_|^mrmgr__sim' | sort -u |
	sed 's|^|libmrmgr.so-has-sim libmrmgr.so |' >>"$tmp/found" || true

# libmrmgr.so: the importer and the share helper are libmrmgr-share's,
# none of their symbols (exported, imported or local) is in it, and no
# file of lib/ includes their headers.
{ nm -D "$so"; nm "$so" 2>/dev/null || true; } | awk '{ print $NF }' |
	grep -E '^mrmgr_share_|^mrmgr_import' | sort -u |
	sed 's|^|libmrmgr.so-has-share libmrmgr.so |' >>"$tmp/found" || true
grep_sources '#[ \t]*include[ \t]*[<"](mrmgr/share\.h|share_proto\.h)' lib |
	sed "s|^|lib-includes-share |" >>"$tmp/found"

# libmrmgr-sim.so takes nothing from libmrmgr but the public device seam.
sim=$(built_so libmrmgr-sim)
[ -n "$sim" ] || { echo "check-layers: libmrmgr-sim.so not built" >&2; exit 1; }
nm -D --undefined-only "$sim" | awk '{ print $2 }' | sed 's/@.*//' |
	grep '^mrmgr' | grep -v '^mrmgr_device_' |
	sed 's|^|sim-beside-the-seam libmrmgr-sim.so |' >>"$tmp/found" || true

sort -u "$tmp/found" -o "$tmp/found"
sort -u "$tmp/allow" -o "$tmp/allow"
new=$(comm -23 "$tmp/found" "$tmp/allow")
gone=$(comm -13 "$tmp/found" "$tmp/allow")
if [ -n "$gone" ]; then
	echo "check-layers: allowlisted, no longer found (remove from the list):"
	echo "$gone" | sed 's/^/  /'
fi
if [ -n "$new" ]; then
	echo "check-layers: dependencies against the layers' arrows:" >&2
	echo "$new" | sed 's/^/  /' >&2
	exit 1
fi
echo "check-layers: the arrows hold ($(wc -l <"$tmp/allow") known violations allowlisted)"
