#!/bin/sh
# Run CI's job list (.ci/jobs) in its order: a "==== job" header for each,
# its time, a stop at the first failure with that job's exit status (125:
# an infrastructure failure, e.g. a qemu guest that could not be set up),
# then a table of jobs and seconds and the closing line of
# scripts/summarize-tests.sh ("tests: N passed, N failed, N skipped").
# A job whose skip variable is 1 is left out and says so.
#
# Usage: scripts/ci-jobs.sh [--jobs FILE] [--list] [--only NAME[,NAME...]]
#   --list   print the jobs (name, directory, skip variables, command)
#   --only   run only the named jobs, in the list's order (they assume what
#            the jobs before them made, e.g. build/ for most)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$top/.ci/jobs
list=0 only=
while [ $# -gt 0 ]; do
	case $1 in
	--list) list=1 ;;
	--only) [ $# -ge 2 ] || { echo "ci-jobs: --only needs a name" >&2; exit 2; }
		only=$2; shift ;;
	--only=*) only=${1#--only=} ;;
	--jobs) [ $# -ge 2 ] || { echo "ci-jobs: --jobs needs a file" >&2; exit 2; }
		jobs=$2; shift ;;
	-h | --help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "ci-jobs: unknown argument $1 (--list, --only NAME)" >&2; exit 2 ;;
	esac
	shift
done
[ -r "$jobs" ] || { echo "ci-jobs: no job list $jobs" >&2; exit 2; }

# The job lines: comments and blank lines out, fields checked once here so
# that a malformed list fails before anything runs.
table=$(mktemp "${TMPDIR:-/tmp}/mrmgr-ci-jobs.XXXXXX")
trap 'rm -f "$table"' EXIT
sed -e 's/^[[:space:]]*//' -e '/^#/d' -e '/^$/d' "$jobs" >"$table"
names=
while read -r name dir skip cmd; do
	case $name in
	*[!a-z0-9-]* | "") echo "ci-jobs: bad job name '$name' in $jobs" >&2; exit 2 ;;
	esac
	[ -n "$cmd" ] || { echo "ci-jobs: job $name has no command" >&2; exit 2; }
	case $skip in
	- | MRMGR_*) case $skip in *[!A-Z0-9_,-]*)
		echo "ci-jobs: job $name: bad skip variables '$skip'" >&2; exit 2 ;; esac ;;
	*) echo "ci-jobs: job $name: skip is - or MRMGR_* variables, not '$skip'" >&2; exit 2 ;;
	esac
	[ -d "$top/$dir" ] || [ "$dir" = build ] ||
		{ echo "ci-jobs: job $name: no directory $dir" >&2; exit 2; }
	case " $names " in *" $name "*) echo "ci-jobs: job $name twice in $jobs" >&2; exit 2 ;; esac
	names="$names $name"
done <"$table"
for n in $(printf '%s' "$only" | tr ',' ' '); do
	case " $names " in *" $n "*) ;; *)
		echo "ci-jobs: no job '$n' (scripts/ci-jobs.sh --list)" >&2; exit 2 ;;
	esac
done

if [ "$list" = 1 ]; then
	printf '%-20s %-6s %-40s %s\n' JOB DIR SKIP COMMAND
	while read -r name dir skip cmd; do
		printf '%-20s %-6s %-40s %s\n' "$name" "$dir" "$skip" "$cmd"
	done <"$table"
	exit 0
fi

summary=
add() { summary="$summary$(printf '%-20s %-8s %6s' "$1" "$2" "$3")
"; }
finish() {
	printf '\n==== summary\n%-20s %-8s %6s\n%s' JOB RESULT SECONDS "$summary"
	"$top/scripts/summarize-tests.sh" "$top/build/tests"
}

# The jobs read no standard input: the list is on descriptor 3.
while read -r name dir skip cmd <&3; do
	if [ -n "$only" ]; then
		case ",$only," in *",$name,"*) ;; *) continue ;; esac
	fi
	why=
	for v in $(printf '%s' "$skip" | tr ',' ' '); do
		[ "$v" = - ] && continue
		eval "val=\${$v:-0}"
		# shellcheck disable=SC2154 # set by the eval
		[ "$val" = 1 ] && { why="$v=1"; break; }
	done
	if [ -n "$why" ]; then
		printf '\n==== %s skipped (%s)\n' "$name" "$why"
		add "$name" skipped -
		continue
	fi
	printf '\n==== %s: %s\n' "$name" "$cmd"
	start=$(date +%s)
	rc=0
	(cd "$top/$dir" && exec sh -c "$cmd") 3<&- || rc=$?
	secs=$(($(date +%s) - start))
	if [ "$rc" != 0 ]; then
		add "$name" "FAIL $rc" "$secs"
		printf '\n==== %s failed (exit %s after %ss)\n' "$name" "$rc" "$secs" >&2
		finish
		exit "$rc"
	fi
	add "$name" ok "$secs"
done 3<"$table"
printf '\n==== all jobs passed\n'
finish
