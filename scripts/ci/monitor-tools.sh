#!/bin/sh
# CI job "monitor-tools": a default-mode program under valgrind and
# AddressSanitizer. It must finish (it used to hang under valgrind) and
# LeakSanitizer must not abort on the monitor's thread. Built here with
# the system compiler against the library just built. From build/.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
tools_cc() {
	${CC:-cc} -I"$top/include" -Iinclude "$@" \
		"$top/tests/unit/test_monitor_tools.c" -Llib/.libs -lmrmgr-sim -lmrmgr \
		-lpthread -Wl,-rpath,"$PWD/lib/.libs"
}
tools_cc -o tests/monitor_tools
tools_cc -fsanitize=address -o tests/monitor_tools_asan
timeout 300 valgrind -q --error-exitcode=1 ./tests/monitor_tools >/dev/null
ASAN_OPTIONS=detect_leaks=1 timeout 300 ./tests/monitor_tools_asan >/dev/null
