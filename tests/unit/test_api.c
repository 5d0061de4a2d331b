/*
 * The public API's contract on bad input, the attribute and statistics
 * versioning rules, logging, and configuration parsing.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"
#include "config_env.h"

static struct {
	int lines;
	enum mrmgr_log_level level;
	char last[512];
} logged;

static void capture(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)arg;
	logged.lines++;
	logged.level = level;
	snprintf(logged.last, sizeof(logged.last), "%s", msg);
}

static void start_capture(void)
{
	memset(&logged, 0, sizeof(logged));
	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_DEBUG);
}

static void stop_capture(void)
{
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

TestSuite(api, .init = start_capture, .fini = stop_capture);

Test(api, bad_get_arguments_are_einval_with_a_log_line)
{
	struct fixture f;
	mrmgr_region_t *r = NULL;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, NULL);
	struct {
		void *addr;
		size_t len;
		unsigned int access;
		const char *why;
	} cases[] = {
		{ buf, 0, RW, "zero length" },
		{ NULL, 4096, RW, "NULL address" },
		{ (void *)(UINTPTR_MAX - 100), 4096, RW, "overflow" },
		{ buf, 4096, IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE without LOCAL_WRITE" },
		{ buf, 4096, IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC without LOCAL_WRITE" },
		{ buf, 4096, IBV_ACCESS_ZERO_BASED, "unsupported access bit" },
		{ buf, 4096, 1u << 30, "unknown access bit" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		logged.lines = 0;
		cr_assert_eq(mrmgr_get(f.cache, cases[i].addr, cases[i].len,
				       cases[i].access, &r), EINVAL, "%s", cases[i].why);
		cr_assert_null(r, "%s", cases[i].why);
		cr_assert_eq(logged.lines, 1, "%s: one log line", cases[i].why);
		cr_assert_eq(logged.level, MRMGR_LOG_ERROR);
	}
	cr_assert_eq(mrmgr_get(NULL, buf, 4096, RW, &r), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4096, RW, NULL), EINVAL);
	cr_assert_eq(cstats(f.cache).registrations, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(api, bad_cache_arguments)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *c = NULL;
	struct mrmgr_cache_attr a = { .comp_mask = 1ull << 40 };

	cr_assert_eq(mrmgr_sim_open(NULL, &ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(mrmgr_cache_create(NULL, NULL, &c), EINVAL);
	cr_assert_eq(mrmgr_cache_create(pd, NULL, NULL), EINVAL);
	cr_assert_eq(mrmgr_cache_create(pd, &a, &c), EINVAL, "unknown comp_mask bit");
	cr_assert(strstr(logged.last, "comp_mask"));
	a.comp_mask = MRMGR_CACHE_ATTR_FLAGS;
	a.flags = 1ull << 33;
	cr_assert_eq(mrmgr_cache_create(pd, &a, &c), EINVAL, "unknown flag");
	cr_assert_null(c);
	cr_assert_eq(mrmgr_cache_destroy(NULL), EINVAL);
	cr_assert_eq(mrmgr_invalidate(NULL, &a, 1), EINVAL);
	cr_assert_eq(mrmgr_cache_query_stats(NULL, NULL, 0), EINVAL);

	/* Fields whose bit is clear are ignored, whatever they hold. */
	a.comp_mask = 0;
	a.max_regions = 1;
	cr_assert_eq(mrmgr_cache_create(pd, &a, &c), 0);
	struct mrmgr_stats s;
	cr_assert_eq(mrmgr_cache_query_stats(c, &s, sizeof(s)), 0);
	cr_assert_neq(s.max_regions, 1);
	cr_assert_eq(mrmgr_invalidate(c, NULL, 10), EINVAL);
	cr_assert_eq(mrmgr_invalidate(c, &a, 0), EINVAL);
	cr_assert_eq(mrmgr_cache_query_stats(c, &s, 0), EINVAL);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
}

Test(api, null_region_is_harmless)
{
	mrmgr_put(NULL);
	cr_assert_null(mrmgr_region_mr(NULL));
	cr_assert_eq(mrmgr_region_lkey(NULL), 0);
	cr_assert_eq(mrmgr_region_length(NULL), 0);
}

Test(api, stats_copy_only_the_callers_size)
{
	struct fixture f;
	struct mrmgr_stats s;

	fx_open(&f, NULL, NULL);
	memset(&s, 0xab, sizeof(s));
	/* A caller built when the struct had two fields. */
	cr_assert_eq(mrmgr_cache_query_stats(f.cache, &s, 2 * sizeof(uint64_t)), 0);
	cr_assert_eq(s.hits, 0);
	cr_assert_eq(s.misses, 0);
	cr_assert_eq(s.registrations, 0xababababababababull, "nothing past size");
	/* A caller built with a larger struct gets ours, the rest untouched. */
	unsigned char big[sizeof(s) + 16];
	memset(big, 0xcd, sizeof(big));
	cr_assert_eq(mrmgr_cache_query_stats(f.cache, (struct mrmgr_stats *)big,
					     sizeof(big)), 0);
	cr_assert_eq(big[sizeof(s)], 0xcd);
	fx_close(&f);
}

Test(api, version_string)
{
	const char *v = mrmgr_version_string();

	cr_assert_not_null(v);
	cr_assert_eq(atoi(v), MRMGR_VERSION_MAJOR);
}

Test(api, log_level_filters)
{
	struct fixture f;
	mrmgr_region_t *r;

	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, NULL);
	logged.lines = 0;
	/* An error is above the threshold... */
	cr_assert_eq(mrmgr_get(f.cache, NULL, 1, 0, &r), EINVAL);
	cr_assert_eq(logged.lines, 1);
	/* ...a debug line about a registration is not. */
	char *buf = map_rw(4096, 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4096, 0, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(logged.lines, 1);
	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_DEBUG);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 4096), 0);
	cr_assert_gt(logged.lines, 1, "dereg is logged at debug level");
	fx_close(&f);
	munmap(buf, 4096);
}

Test(api, parse_size)
{
	uint64_t v;

	cr_assert_eq(mrmgr__parse_size("4096", &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(mrmgr__parse_size("64K", &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(mrmgr__parse_size("8M", &v), 0);
	cr_assert_eq(v, 8 << 20);
	cr_assert_eq(mrmgr__parse_size("2GiB", &v), 0);
	cr_assert_eq(v, 2ull << 30);
	cr_assert_eq(mrmgr__parse_size("0x1000", &v), EINVAL); /* decimal only */
	cr_assert_eq(mrmgr__parse_size("", &v), EINVAL);
	cr_assert_eq(mrmgr__parse_size("-1", &v), EINVAL);
	cr_assert_eq(mrmgr__parse_size("12X", &v), EINVAL);
	cr_assert_eq(mrmgr__parse_size("99999999999999T", &v), EINVAL);
}

Test(api, bad_environment_values_are_ignored_with_a_warning)
{
	struct fixture f;

	setenv("MRMGR_MAX_REGIONS", "lots", 1);
	setenv("MRMGR_MERGE", "maybe", 1);
	logged.lines = 0;
	fx_open(&f, NULL, NULL);
	unsetenv("MRMGR_MAX_REGIONS");
	unsetenv("MRMGR_MERGE");
	cr_assert_geq(logged.lines, 2);
	cr_assert_gt(cstats(f.cache).max_regions, 0);
	fx_close(&f);
}

/* The one region query: what each inline accessor reads, a caller's
 * smaller struct filled only up to its size, bad input refused. */
Test(api, region_query_is_what_the_accessors_read)
{
	struct fixture f;
	struct mrmgr_region_info ri;
	mrmgr_region_t *r;
	char *p = aligned_alloc(4096, 3 * 4096);

	cr_assert_not_null(p);
	fx_open(&f, NULL, NULL);
	cr_assert_eq(mrmgr_get(f.cache, p + 100, 5000, IBV_ACCESS_LOCAL_WRITE,
			       &r), 0);
	cr_assert_eq(mrmgr_region_query(r, &ri, sizeof(ri)), 0);
	cr_assert_leq((uintptr_t)ri.addr, (uintptr_t)p + 100);
	cr_assert_geq((uintptr_t)ri.addr + ri.length, (uintptr_t)p + 5100);
	cr_assert_eq(ri.addr, mrmgr_region_addr(r));
	cr_assert_eq(ri.length, mrmgr_region_length(r));
	cr_assert_eq(ri.access, mrmgr_region_access(r));
	cr_assert(ri.access & IBV_ACCESS_LOCAL_WRITE);
	cr_assert_neq(ri.generation, 0);
	cr_assert_eq(ri.generation, mrmgr_region_generation(r));
	cr_assert_eq(ri.mr, mrmgr_region_mr(r));
	cr_assert_eq(ri.lkey, mrmgr_region_mr(r)->lkey);
	cr_assert_eq(ri.rkey, mrmgr_region_mr(r)->rkey);

	/* A caller that knew only addr and length. */
	memset(&ri, 0xab, sizeof(ri));
	cr_assert_eq(mrmgr_region_query(r, &ri, 2 * sizeof(void *)), 0);
	cr_assert_eq(ri.addr, mrmgr_region_addr(r));
	cr_assert_eq(ri.access, 0xababababu, "nothing past size");

	cr_assert_eq(mrmgr_region_query(NULL, &ri, sizeof(ri)), EINVAL);
	cr_assert_eq(mrmgr_region_query(r, NULL, sizeof(ri)), EINVAL);
	cr_assert_eq(mrmgr_region_query(r, &ri, 0), EINVAL);
	cr_assert_eq(mrmgr_region_generation(NULL), 0);
	cr_assert_null(mrmgr_region_addr(NULL));
	mrmgr_put(r);
	fx_close(&f);
	free(p);
}
