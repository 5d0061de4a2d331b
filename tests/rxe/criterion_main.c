/*
 * main() of the real-device test binaries: Criterion's own loop, plus an
 * exit status that tells "tested nothing" apart from "passed".
 *
 * When every test skipped (no RDMA device here), the binary exits 77, the
 * automake convention for SKIP, and says why on standard error even
 * without --verbose. `make check` on a machine without RDMA then reports
 * SKIP, and `make check-rxe` (where a device must exist) treats 77 as a
 * failure rather than a silent pass.
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/stats.h>

#define EXIT_SKIP 77

static size_t n_tests, n_skipped;
static char skip_reason[256];

/* Runs in the runner process after each test. */
ReportHook(POST_TEST)(struct criterion_test_stats *st)
{
	if (st->test_status == CR_STATUS_SKIPPED && !skip_reason[0] &&
	    st->message)
		snprintf(skip_reason, sizeof(skip_reason), "%s", st->message);
}

ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
	n_tests = st->nb_tests;
	n_skipped = st->tests_skipped;
}

int main(int argc, char *argv[])
{
	struct criterion_test_set *tests = criterion_initialize();
	int ret = 0;

	if (criterion_handle_args(argc, argv, true))
		ret = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	if (ret == 0 && n_tests > 0 && n_skipped == n_tests) {
		const char *slash = strrchr(argv[0], '/');

		fprintf(stderr, "%s: SKIP: all %zu tests skipped: %s\n",
			slash ? slash + 1 : argv[0], n_tests,
			skip_reason[0] ? skip_reason : "(no reason given)");
		return EXIT_SKIP;
	}
	return ret;
}
