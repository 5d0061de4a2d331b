#!/bin/sh
# Print one closing line for every test case run: the Criterion
# "Synthesis" lines of each suite's log, plus the script tests' results
# (automake .trs files), under the given directories.
# Usage: summarize-tests.sh DIR...
set -eu
passed=0 failed=0 skipped=0
for dir in "$@"; do
	[ -d "$dir" ] || continue
	for log in $(find "$dir" -name '*.log' ! -name test-suite.log); do
		if grep -aq 'Synthesis: Tested:' "$log"; then
			# One line per suite run (check-rxe's log holds several):
			# [====] Synthesis: Tested: 21 | Passing: 20 | Failing: 1 | Crashing: 0
			for counts in $(grep -a 'Synthesis: Tested:' "$log" |
					sed 's/[^0-9|]//g'); do
				IFS='|' read -r _ p f c <<-EOT
				$counts
				EOT
				passed=$((passed + p)); failed=$((failed + f + c))
			done
			skipped=$((skipped + $(grep -ac '^\[SKIP\]' "$log" || true)))
			# A suite whose every test skipped says so in one line.
			n=$(sed -n 's/.*SKIP: all \([0-9]*\) tests skipped.*/\1/p' "$log" | head -n1)
			skipped=$((skipped + ${n:-0}))
		else
			trs=${log%.log}.trs
			[ -f "$trs" ] || continue
			case $(sed -n 's/^:test-result: //p' "$trs" | head -n1) in
			PASS) passed=$((passed + 1)) ;;
			SKIP) skipped=$((skipped + 1)) ;;
			*) failed=$((failed + 1)) ;;
			esac
		fi
	done
done
echo "tests: $passed passed, $failed failed, $skipped skipped"
