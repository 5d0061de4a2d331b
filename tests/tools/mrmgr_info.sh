#!/bin/sh
# mrmgr_info(1): every section is printed, a value set in the environment
# is reported as coming from the environment (and a default as default),
# the simulated HCA's capabilities per personality, and the exit status
# (0; 2 for a bad option). Runs the built tool (a libtool wrapper).
set -u
top_builddir=${top_builddir:-.}
tool="$top_builddir/tools/mrmgr_info"
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT INT TERM
fail=0

check() { # description, command...
	desc=$1
	shift
	if ! "$@"; then
		echo "FAIL: $desc" >&2
		fail=1
	fi
}
has() { grep -Eq "$1" "$out"; }
# A configuration line: name, value, source.
entry() { grep -Eq "^  $1 +$2 +$3( |\$)" "$out"; }

unset MRMGR_MAX_BYTES MRMGR_MONITOR MRMGR_MERGE MRMGR_LOG_LEVEL

"$tool" --sim >"$out" 2>"$err"
check "--sim exits 0 (got $?)" test $? -eq 0
for s in Version Configuration "Memory-event sources" "Memlock budget" Devices \
	"Memory domains"; do
	check "section \"$s\"" has "^$s\$"
done
check "version line" has "^  libmrmgr [0-9]+\.[0-9]+"
check "the CUDA domain said present, absent or off" \
	has "^  cuda +(present|absent: libcuda.so.1 not found|off: )"
check "--sim lists the simulated device allocator" has "^  sim +present"
check "memory calls defined outside libc reported" has "^  defined outside libc "
check "MRMGR_MAX_BYTES from the default" entry MRMGR_MAX_BYTES "[0-9]+" default
check "MRMGR_MONITOR from the default" entry MRMGR_MONITOR auto default
check "RLIMIT_MEMLOCK reported" has "^  RLIMIT_MEMLOCK +soft"
check "CAP_IPC_LOCK reported" has "^  CAP_IPC_LOCK +"
check "the simulated mlx5 rereg's" has "^    ibv_rereg_mr +yes"
check "the simulated mlx5 has implicit ODP" has "^    ODP +explicit, implicit"
check "the simulated mlx5 imports" has "^    ibv_import_device +yes"

MRMGR_MAX_BYTES=3M MRMGR_MONITOR=external MRMGR_MERGE=0 "$tool" --sim >"$out" 2>"$err"
check "exit 0 with variables set" test $? -eq 0
check "MRMGR_MAX_BYTES from the environment" entry MRMGR_MAX_BYTES 3145728 environment
check "MRMGR_MONITOR from the environment" entry MRMGR_MONITOR external environment
check "MRMGR_MERGE from the environment" entry MRMGR_MERGE 0 environment
check "external monitoring shown" has "^  external +trusted"

MRMGR_MAX_BYTES=" -1" "$tool" --sim >"$out" 2>"$err"
check "exit 0 with a bad value" test $? -eq 0
check "the bad value is named on stderr" grep -q 'MRMGR_MAX_BYTES=" -1"' "$err"
check "the bad value is ignored" entry MRMGR_MAX_BYTES "[0-9]+" default

"$tool" --sim=rxe >"$out" 2>"$err"
check "--sim=rxe exits 0" test $? -eq 0
check "the simulated rxe cannot rereg" has "^    ibv_rereg_mr +no"
check "the simulated rxe has no ODP" has "^    ODP +no"
check "the simulated rxe cannot import" has "^    ibv_import_device +no"

# With libmrmgr_hooks.so preloaded (the real binary, not libtool's
# wrapper script): the hooks are reported active, and a bad
# MRMGR_HOOKS_MALLOPT is named.
bin="$top_builddir/tools/.libs/mrmgr_info"
hooks="$top_builddir/lib/.libs/libmrmgr_hooks.so"
if [ -x "$bin" ] && [ -e "$hooks" ]; then
	LD_LIBRARY_PATH="$top_builddir/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	LD_PRELOAD="$hooks" MRMGR_HOOKS_MALLOPT=maybe "$bin" --sim >"$out" 2>"$err"
	check "exit 0 with the hooks" test $? -eq 0
	# auto prefers the patched libc; the hooks serve where it cannot run.
	check "a two-sided source reported active" \
		has "^  (libmrmgr_hooks.so|libc patched) +active"
	check "a bad MRMGR_HOOKS_MALLOPT is named" \
		grep -q 'MRMGR_HOOKS_MALLOPT="maybe"' "$err"
else
	echo "mrmgr_info.sh: no $bin or $hooks: the hooks case is not run"
fi

# Beside UCX: loading libucs makes its libucm patch libc first; libmrmgr
# chains on top, and mrmgr_info says so. Alone, nothing is chained.
"$tool" --sim >"$out" 2>"$err"
if has "^  libc patched +active"; then
	check "alone: nothing chained" has "^  chained over +nothing"
	check "alone: never taken over" has "^  taken over +0 times"
fi
ucs=$(ls /usr/lib/*/libucs.so.0 /usr/lib/libucs.so.0 2>/dev/null | head -n 1)
if [ -x "$bin" ] && [ -n "$ucs" ]; then
	LD_LIBRARY_PATH="$top_builddir/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	LD_PRELOAD="$ucs" "$bin" --sim >"$out" 2>"$err"
	check "exit 0 beside libucs" test $? -eq 0
	if has "^  libc patched +active"; then
		check "beside libucs: chained over its hooks" \
			has "^  chained over +another library's hooks"
	fi
else
	echo "mrmgr_info.sh: no libucs.so.0: the chained case is not run"
fi

# Nothing can watch memory: said first, with what to do (issue 20).
"$tool" --sim >"$out" 2>"$err"
check "a working source: no Warning section" sh -c "! grep -q '^Warning\$' '$out'"
MRMGR_MONITOR=hooks "$tool" --sim >"$out" 2>"$err"
check "no source: Warning right after Version" \
	sh -c "sed -n 4p '$out' | grep -q '^Warning\$'"
check "no source: nothing will be cached" has "^  nothing can watch memory here: nothing will be cached"
check "no source: what to do" has "^  what to do: MRMGR_MONITOR=uffd"
if [ -x "$bin" ] && command -v valgrind >/dev/null 2>&1; then
	# Under valgrind the patch source steps aside: the reason is said too.
	LD_LIBRARY_PATH="$top_builddir/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	timeout 300 valgrind -q "$bin" --sim >"$out" 2>"$err"
	check "under valgrind: Warning" has "^Warning\$"
	check "under valgrind: why libc was not patched" \
		has "^  libc's entry points could not be patched: "
fi

"$tool" >"$out" 2>"$err"
check "without --sim: exit 0 (got $?)" test $? -eq 0
check "without --sim: devices or a note" has "^Devices\$"

"$tool" --bogus >"$out" 2>"$err"
check "a bad option exits 2 (got $?)" test $? -eq 2
"$tool" --version >"$out" 2>"$err"
check "--version" has "^libmrmgr [0-9]"

if [ $fail -ne 0 ]; then
	echo "--- last output:" >&2
	cat "$out" >&2
	echo "--- its standard error:" >&2
	cat "$err" >&2
	exit 1
fi
echo "mrmgr_info: sections, sources and exit status as expected"
