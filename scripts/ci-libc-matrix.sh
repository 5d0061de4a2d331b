#!/bin/sh
# scripts/ci-libc-matrix.sh [SUITE-ARCH...]: the default configuration
# under the real libc.so.6 of other Debian releases (issue 20, item 2).
#
# Default: trixie-amd64 sid-amd64 trixie-arm64 sid-arm64. Bookworm is the
# native run (make check); bullseye's libc is older than the build host's
# and cannot load these binaries: it is built and tested in its own
# chroot (scripts/ci-bullseye*.sh).
#
# For each libc (fetched by scripts/fetch-libc.sh, cached), with every
# MRMGR_* variable removed from the environment:
#  amd64: copies of the built test programs get that libc's loader as
#   their interpreter and its directory first in their DT_RPATH
#   (patchelf), so Criterion's re-executions stay under it; then
#   (a) test_monitor_cases --filter 'torture/*' (the default-mode
#       torture; none may be skipped, none stale),
#   (b) test_monitor_patch, (c) test_monitor_patch_chain,
#   (d) mrmgr_info: the patched libc must be the active source, which
#       it only is after the install's self-test passed,
#   (e) tests/libc-matrix/hits.c built against the installed library
#       (make install into a staging root, pkg-config mrmgr mrmgr-sim):
#       >= 999 hits of 1,000 gets, the patched libc as source, no stale
#       write after free/realloc cycles.
#  arm64 (qemu-user): the patch engine test tests/cross/patch_aarch64
#   (install with its self-test, every target's events, unpatch/repatch),
#   cross-built by `make check-aarch64`, under that libc's loader; and
#   the whole library cross-built (against Debian 12's arm64 libibverbs,
#   fetched like the libcs; in tests/libc-matrix/arm64-build), installed
#   into a staging root, and hits.c built against it and run: hits and
#   the source as on amd64, and no stale write and no unverified page
#   (pagemap read at a guest address shows the guest's page: qemu-user
#   puts guest addresses 1:1 on the host's here); the torture column
#   stays n/a: it is not run.
#
# Ends with one table (libc x arch -> patched, self-test, hits, torture
# stale) and exits non-zero when any check failed. Environment:
# MRMGR_BUILDDIR (default ./build of the tree), MRMGR_LIBC_CACHE (see
# fetch-libc.sh); both are read before the MRMGR_* purge.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${MRMGR_BUILDDIR:-$top/build}" && pwd)
cache=${MRMGR_LIBC_CACHE:-}
targets=${*:-"trixie-amd64 sid-amd64 trixie-arm64 sid-arm64"}
# The runs below are what a user gets with nothing set.
for v in $(env | sed -n 's/^\(MRMGR_[A-Za-z0-9_]*\)=.*/\1/p'); do
	unset "$v"
done
fetch() {
	if [ -n "$cache" ]; then
		MRMGR_LIBC_CACHE=$cache "$top/scripts/fetch-libc.sh" "$@"
	else
		"$top/scripts/fetch-libc.sh" "$@"
	fi
}

for tool in patchelf pkg-config; do
	command -v $tool >/dev/null || {
		echo "ci-libc-matrix: $tool missing (scripts/install-deps.sh)" >&2
		exit 1
	}
done

work=$builddir/tests/libc-matrix
mkdir -p "$work"
table=$work/table
: >"$table"
failed=0
t0=$(date +%s)

say() { printf '  %s\n' "$*"; }
bad() { printf '  FAIL %s\n' "$*"; failed=1; }
# run_hits LABEL COMMAND...: hits.c's run ($w/hits.log), its line read into
# hits and libcver; ok=0 when it failed.
run_hits() {
	label=$1
	shift
	set +e
	"$@" >"$w/hits.log" 2>&1
	rc=$?
	set -e
	line=$(grep '^libc=' "$w/hits.log" || true)
	hits=$(echo "$line" | sed -n 's/.* hits=\([0-9]*\)\/.*/\1/p')
	libcver=$(echo "$line" | sed -n 's/^libc=\([^ ]*\) .*/\1/p')
	if [ $rc -eq 0 ]; then
		say "hits ($label): $line"
	else
		bad "hits ($label) exit $rc: ${line:-no result}"
		sed 's/^/      /' "$w/hits.log" | head -n 8
		ok=0
	fi
}

# The ELF behind a program libtool may have wrapped.
real_elf() {
	d=$(dirname "$1") n=$(basename "$1")
	for f in "$d/.libs/$n" "$d/.libs/lt-$n" "$1"; do
		if [ -f "$f" ] && head -c 4 "$f" | grep -q ELF; then
			echo "$f"
			return 0
		fi
	done
	echo "ci-libc-matrix: no program $1 (not built?)" >&2
	return 1
}

# A copy of $1 in $2 that starts under loader $3 with $4 as DT_RPATH (not
# RUNPATH: DT_RPATH also serves the libraries' own dependencies, so a
# libm or libpthread comes from the same release as libc).
relink() {
	cp "$1" "$2"
	patchelf --set-interpreter "$3" --force-rpath --set-rpath "$4" "$2"
}

# Which libc.so.6 the loader picks for $@ (ld.so's trace mode).
libc_of() {
	LD_TRACE_LOADED_OBJECTS=1 "$@" 2>&1 | sed -n 's/^[[:space:]]*libc\.so\.6 => \([^ ]*\).*/\1/p'
}

# How many tests a Criterion program lists, in the suite of its
# --filter 'SUITE/*' argument if there is one.
listed() {
	prog=$1 suite=
	[ "${2:-}" = --verbose ] && shift
	[ "${2:-}" = --filter ] && suite=${3%%/*}
	"$prog" --list | awk -v s="$suite" '
		/^[^ \342]/ { cur = $1; sub(/:$/, "", cur) }
		/^(\342\224\234|\342\224\224)/ { if (s == "" || cur == s) n++ }
		END { print n + 0 }'
}

# A Criterion suite: all of it must run (no "Tested: 0", nothing skipped)
# and pass. $1 log name, $2 the program, then its arguments.
criterion() {
	log=$1
	shift
	set +e
	"$@" >"$log" 2>&1
	rc=$?
	set -e
	synth=$(grep 'Synthesis:' "$log" | tail -n 1 | sed 's/.*Synthesis: //')
	if [ $rc -ne 0 ]; then
		bad "$(basename "$1") $*: exit $rc ($synth); the log: $log"
		grep -E '\[(FAIL|----)\]|Assertion|Warning|warn' "$log" | head -n 20 | sed 's/^/      /'
		return 1
	fi
	# A skipped test is not counted as tested (nor shown without
	# --verbose): every test the filter names must have run.
	want=$(listed "$@")
	tested=$(echo "$synth" | sed -n 's/^Tested: \([0-9]*\) .*/\1/p')
	if [ "${tested:-0}" -eq 0 ] || [ "$tested" != "$want" ]; then
		bad "$(basename "$1") $*: ran ${tested:-no} of its $want tests (the others skipped: the case needs the patched libc)"
		return 1
	fi
	name=$(basename "$1")
	shift
	say "$name $*: $synth"
	return 0
}

# ------------------------------------------------------------ shared set-up
need_amd64=0 need_arm64=0
for t in $targets; do
	case $t in
	*-amd64) need_amd64=1 ;;
	*-arm64) need_arm64=1 ;;
	*) echo "ci-libc-matrix: bad target $t (SUITE-amd64 or SUITE-arm64)" >&2; exit 2 ;;
	esac
done

if [ $need_amd64 = 1 ]; then
	make -s -C "$builddir" all >/dev/null
	make -s -C "$builddir" tests/unit/test_monitor_cases \
		tests/unit/test_monitor_patch tests/unit/test_monitor_patch_chain >/dev/null
	# The user program, against the installed library.
	stage=$work/stage
	rm -rf "$stage"
	make -s -C "$builddir" install DESTDIR="$stage/root" >/dev/null
	pcdir=$(dirname "$(find "$stage/root" -name mrmgr-sim.pc | head -n 1)")
	flags=$(PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR=$stage/root \
		pkg-config --cflags --libs mrmgr mrmgr-sim)
	instlib=$(PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR=$stage/root \
		pkg-config --libs-only-L mrmgr | sed 's/^ *-L//; s/ .*//')
	echo "libc matrix: hits.c built with pkg-config --cflags --libs mrmgr mrmgr-sim"
	# shellcheck disable=SC2086 # the flags are a word list on purpose
	${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$stage/hits" \
		"$top/tests/libc-matrix/hits.c" $flags
fi
if [ $need_arm64 = 1 ]; then
	# Builds tests/cross/patch_aarch64 (and runs it once under the
	# cross toolchain's own arm64 libc, Debian 12's).
	make -s -C "$builddir" check-aarch64 >"$work/check-aarch64.log" 2>&1 || {
		cat "$work/check-aarch64.log"
		bad "make check-aarch64"
	}
	[ -x "$builddir/tests/cross/patch_aarch64" ] || {
		echo "ci-libc-matrix: tests/cross/patch_aarch64 not built (gcc-aarch64-linux-gnu, qemu-user)" >&2
		exit 1
	}
	# The library for arm64, for hits.c. Its dependencies come from
	# Debian 12 (the cross toolchain's glibc is 12's: what links against
	# it runs under the newer libcs).
	ax=$(fetch bookworm arm64 libibverbs1 libibverbs-dev libnl-3-200 \
		libnl-route-3-200 libnl-3-dev libnl-route-3-dev)
	ab=$work/arm64-build astage=$work/arm64-stage
	mkdir -p "$ab"
	rm -rf "$astage"
	mkdir -p "$astage"
	cp -a "$ax/." "$astage/"
	alib=$astage/usr/lib/aarch64-linux-gnu:$astage/lib/aarch64-linux-gnu
	echo "libc matrix: the library cross-built for arm64 ($ab)"
	# Exported for make too: a configure.ac change makes it run
	# configure again, which must find the same libibverbs. A tree left
	# configured otherwise is built again from scratch, once.
	cross_build() {
		(cd "$ab" && export PKG_CONFIG_LIBDIR="$ax/usr/lib/aarch64-linux-gnu/pkgconfig" \
			PKG_CONFIG_SYSROOT_DIR="$ax" && { [ -f Makefile ] ||
			"$top/configure" -q --host=aarch64-linux-gnu \
				LDFLAGS="-Wl,-rpath-link,$ax/usr/lib/aarch64-linux-gnu:$ax/lib/aarch64-linux-gnu"; } &&
			make -s -j2 && make -s install DESTDIR="$astage")
	}
	if cross_build >"$work/arm64-build.log" 2>&1 ||
		{ rm -rf "$ab" && mkdir -p "$ab" && cross_build >"$work/arm64-build.log" 2>&1; }; then
		aflags=$(PKG_CONFIG_LIBDIR=$astage/usr/local/lib/pkgconfig:$astage/usr/lib/aarch64-linux-gnu/pkgconfig \
			PKG_CONFIG_SYSROOT_DIR=$astage pkg-config --cflags --libs mrmgr mrmgr-sim)
		# shellcheck disable=SC2086 # the flags are a word list on purpose
		aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -o "$astage/hits" \
			"$top/tests/libc-matrix/hits.c" $aflags -Wl,-rpath-link,"$alib"
	else
		tail -n 20 "$work/arm64-build.log"
		bad "the library does not cross-build for arm64 (log: $work/arm64-build.log)"
	fi
fi

# ------------------------------------------------------------ one libc
run_amd64() { # suite
	suite=$1 w=$work/$1-amd64
	L=$(fetch "$suite" amd64)
	ld=$L/ld-linux-x86-64.so.2
	ver=$(cat "$L/../../../../version" 2>/dev/null || cat "$L/../../../version" 2>/dev/null || echo "?")
	rm -rf "$w"
	mkdir -p "$w"
	echo "libc matrix: $suite amd64, libc6 $ver ($L)"
	rp=$L:$builddir/lib/.libs:$builddir/sim/.libs:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu
	for p in tests/unit/test_monitor_cases tests/unit/test_monitor_patch \
		tests/unit/test_monitor_patch_chain tools/mrmgr_info; do
		relink "$(real_elf "$builddir/$p")" "$w/$(basename "$p")" "$ld" "$rp"
	done
	relink "$stage/hits" "$w/hits" "$ld" "$L:$instlib:/usr/lib/x86_64-linux-gnu"
	patched=no selftest=- hits=- tstale=- ok=1 libcver=
	for p in test_monitor_cases hits; do
		got=$(libc_of "$w/$p")
		[ "$got" = "$L/libc.so.6" ] || { bad "$p would load libc from '$got', not $L"; ok=0; }
	done
	[ $ok = 1 ] || { echo "$suite|amd64|$ver|?|?|?|?|FAIL" >>"$table"; return 0; }

	# (d) first: it says in a few lines whether patching took.
	"$w/mrmgr_info" --sim >"$w/mrmgr_info.log" 2>&1 || bad "mrmgr_info --sim exited $?"
	if grep -Eq '^  libc patched +active' "$w/mrmgr_info.log"; then
		patched=yes selftest=passed
		say "mrmgr_info: $(grep -E '^  libc patched' "$w/mrmgr_info.log" | cut -c1-60)..."
	else
		line=$(grep -E '^  libc patched' "$w/mrmgr_info.log" || echo "no 'libc patched' line")
		case $line in
		*"Protocol error"*) selftest=failed ;;
		*) selftest="not reached" ;;
		esac
		bad "mrmgr_info: the patched libc is not the source: $line"
		grep -i 'warn\|patch' "$w/mrmgr_info.log" | head -n 3 | sed 's/^/      /'
		ok=0
	fi
	# (e)
	run_hits "installed library" "$w/hits"
	# (a) the torture: its stale counts are in its log lines.
	criterion "$w/torture.log" "$w/test_monitor_cases" --verbose --filter 'torture/*' || ok=0
	tstale=$(sed -n 's/.*threads: [0-9]* gets, \([0-9]*\) stale.*/\1/p; s/.*cells, [0-9]* threads: \([0-9]*\) stale.*/\1/p' \
		"$w/torture.log" | awk '{ s += $1; n++ } END { if (n) print s; else print "-" }')
	# (b), (c)
	criterion "$w/patch.log" "$w/test_monitor_patch" || ok=0
	criterion "$w/patch_chain.log" "$w/test_monitor_patch_chain" || ok=0
	echo "$suite|amd64|${libcver:-${ver%%-*}} ($ver)|$patched|$selftest|${hits:-?}|$tstale|$([ $ok = 1 ] && echo pass || echo FAIL)" >>"$table"
}

run_arm64() { # suite
	suite=$1 w=$work/$1-arm64
	L=$(fetch "$suite" arm64)
	ld=$L/ld-linux-aarch64.so.1
	ver=$(cat "$L/../../../../version" 2>/dev/null || cat "$L/../../../version" 2>/dev/null || echo "?")
	rm -rf "$w"
	mkdir -p "$w"
	echo "libc matrix: $suite arm64 (qemu-user), libc6 $ver ($L)"
	relink "$builddir/tests/cross/patch_aarch64" "$w/patch_aarch64" "$ld" "$L"
	ok=1 patched=no selftest=- libcver=
	# From the build directory: it names its test object by a relative
	# path (tests/cross/libentry_shapes_aarch64.so).
	got=$(cd "$builddir" && qemu-aarch64 -E LD_TRACE_LOADED_OBJECTS=1 "$w/patch_aarch64" 2>&1 |
		sed -n 's/^[[:space:]]*libc\.so\.6 => \([^ ]*\).*/\1/p')
	[ "$got" = "$L/libc.so.6" ] || { bad "patch_aarch64 would load libc from '$got', not $L"; ok=0; }
	set +e
	(cd "$builddir" && qemu-aarch64 "$w/patch_aarch64") >"$w/patch_aarch64.log" 2>&1
	rc=$?
	set -e
	install=$(sed -n 's/^install: \([^,]*\),.*/\1/p' "$w/patch_aarch64.log")
	case $install in
	Success) patched=yes selftest=passed ;;
	"Protocol error") selftest=failed ;;
	*) selftest="not reached" ;;
	esac
	if [ $rc -eq 0 ] && [ $patched = yes ]; then
		say "patch_aarch64: $(tail -n 1 "$w/patch_aarch64.log")"
	else
		bad "patch_aarch64 exit $rc, install: ${install:-?}"
		grep -E 'FAIL|install' "$w/patch_aarch64.log" | head -n 10 | sed 's/^/      /'
		ok=0
	fi
	hits=-
	if [ -f "$astage/hits" ]; then
		relink "$astage/hits" "$w/hits" "$ld" "$L:$astage/usr/local/lib:$alib"
		run_hits "installed library, arm64" qemu-aarch64 "$w/hits" --identity-optional
	fi
	echo "$suite|arm64|${libcver:-${ver%%-*}} ($ver)|$patched|$selftest|${hits:-?}|n/a|$([ $ok = 1 ] && echo pass || echo FAIL)" >>"$table"
}

for t in $targets; do
	case $t in
	*-amd64) run_amd64 "${t%-amd64}" ;;
	*-arm64) run_arm64 "${t%-arm64}" ;;
	esac
done

# ------------------------------------------------------------ the table
echo
echo "libc matrix ($(($(date +%s) - t0)) s; no MRMGR_* set; amd64 natively under the"
echo "release's own loader, arm64 under qemu-user: the patch engine test and hits):"
echo
echo "| Debian | glibc (libc6 package) | arch | libc patched | self-test | hits of 1,000 gets | torture stale | result |"
echo "|---|---|---|---|---|---:|---:|---|"
while IFS='|' read -r suite arch ver patched selftest hits tstale res; do
	echo "| $suite | $ver | $arch | $patched | $selftest | $hits | $tstale | $res |"
done <"$table"
echo
if [ $failed != 0 ]; then
	echo "libc matrix: FAILED (see the FAIL lines above; logs in $work)" >&2
	exit 1
fi
echo "libc matrix: all passed"
