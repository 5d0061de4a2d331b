/*
 * A double mrmgr_put(): detected when the cache adds a region's references
 * up (always), at the put itself in the checked mode (MRMGR_CHECK=1 or
 * MRMGR_CACHE_CHECK); reported with a log line naming the region, counted
 * in double_puts, ignored, and never leaving the cache unable to evict or
 * to be destroyed. No false alarm from threads that get on one stripe and
 * put on another.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"

#define PG ((size_t)4096)

static struct {
	int errors, warnings;
	char last[512], last_warning[512];
} logged;

static void capture(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)arg;
	if (level == MRMGR_LOG_ERROR) {
		__atomic_fetch_add(&logged.errors, 1, __ATOMIC_RELAXED);
		snprintf(logged.last, sizeof(logged.last), "%s", msg);
	} else if (level == MRMGR_LOG_WARN) {
		__atomic_fetch_add(&logged.warnings, 1, __ATOMIC_RELAXED);
		snprintf(logged.last_warning, sizeof(logged.last_warning),
			 "%s", msg);
	}
}

static void setup(void)
{
	unsetenv("MRMGR_CHECK");
	memset(&logged, 0, sizeof(logged));
	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_WARN);
}

static void teardown(void)
{
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

TestSuite(double_put, .init = setup, .fini = teardown);

static struct mrmgr_cache_attr attr(uint64_t flags, uint64_t max_regions)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_FLAGS |
			     (max_regions ? MRMGR_CACHE_ATTR_MAX_REGIONS : 0),
		.flags = flags,
		.max_regions = max_regions,
	};
	return a;
}

/* The error line names the region: its address. */
static void assert_named(const mrmgr_region_t *r)
{
	char name[32];

	snprintf(name, sizeof(name), "%p", (const void *)r);
	cr_assert(strstr(logged.last, name), "no %s in: %s", name, logged.last);
	cr_assert(strstr(logged.last, "ignored"), "%s", logged.last);
}

Test(double_put, on_an_idle_cached_region_destroy_still_succeeds)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(0, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(4 * PG, 1);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	mrmgr_put(r);
	mrmgr_put(r);
	/* Found when the references are added up (statistics here). */
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.double_puts, 1);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_eq(logged.errors, 1);
	assert_named(r);
	/* The region is still cached and counts right afterwards. */
	mrmgr_region_t *r2;
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r2), 0);
	cr_assert_eq(r2, r);
	cr_assert_eq(cstats(f.cache).regions_in_use, 1);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY);
	mrmgr_put(r2);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), 0);
	f.cache = NULL;
	fx_close(&f); /* no MR, no pinned byte left */
	munmap(buf, 4 * PG);
}

Test(double_put, found_by_destroy_alone)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(0, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(4 * PG, 1);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 2 * PG, RW, &r), 0);
	mrmgr_put(r);
	mrmgr_put(r);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), 0, "EBUSY for ever before");
	f.cache = NULL;
	cr_assert_eq(logged.errors, 1);
	cr_assert(strstr(logged.last, "2 times"), "%s", logged.last);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(double_put, does_not_keep_a_region_from_eviction)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(MRMGR_CACHE_NO_MERGE, 1);
	mrmgr_region_t *r, *q;
	char *buf = map_rw(8 * PG, 1);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	mrmgr_put(r);
	mrmgr_put(r);
	/* The one slot must be freed for another range. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 4 * PG, PG, RW, &q), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.evictions, 1);
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.double_puts, 1);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "the first MR is deregistered");
	mrmgr_put(q);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

Test(double_put, after_release_is_undone_and_the_recycled_region_counts_right)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(0, 0);
	mrmgr_region_t *r, *q;
	char *buf = map_rw(8 * PG, 1);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, PG), 0);
	mrmgr_put(r); /* the last user: deregistered, back on the free list */
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	mrmgr_put(r); /* one too many */
	cr_assert_eq(logged.errors, 1);
	assert_named(r);
	cr_assert_eq(cstats(f.cache).double_puts, 1);
	/* The region object is reused for the next range; its count
	 * starts from zero, so a get and a put leave it idle. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 4 * PG, PG, RW, &q), 0);
	mrmgr_put(q);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_eq(s.double_puts, 1);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

/* ------------------------------------------------------------ checked */

static void checked_put_is_refused_at_the_put(struct fixture *f)
{
	mrmgr_region_t *r, *r2;
	char *buf = map_rw(4 * PG, 1);

	cr_assert_eq(mrmgr_get(f->cache, buf, PG, RW, &r), 0);
	cr_assert_eq(mrmgr_get(f->cache, buf, PG, RW, &r2), 0);
	cr_assert_eq(r, r2);
	mrmgr_put(r);
	mrmgr_put(r);
	cr_assert_eq(logged.errors, 0, "two gets, two puts: %s", logged.last);
	mrmgr_put(r);
	/* At the put, before anything adds the references up. */
	cr_assert_eq(logged.errors, 1);
	assert_named(r);
	cr_assert(strstr(logged.last, "held by nobody"), "%s", logged.last);
	struct mrmgr_stats s = cstats(f->cache);
	cr_assert_eq(s.double_puts, 1);
	cr_assert_eq(s.regions_in_use, 0);
	/* Still cached, and counted right. */
	cr_assert_eq(mrmgr_get(f->cache, buf, PG, RW, &r2), 0);
	cr_assert_eq(r2, r);
	cr_assert_eq(cstats(f->cache).hits, 2);
	cr_assert_eq(cstats(f->cache).regions_in_use, 1);
	mrmgr_put(r2);
	/* A put after the region was released. */
	cr_assert_eq(mrmgr_get(f->cache, buf, PG, RW, &r), 0);
	cr_assert_eq(mrmgr_invalidate(f->cache, buf, PG), 0);
	mrmgr_put(r);
	mrmgr_put(r);
	cr_assert_eq(logged.errors, 2);
	cr_assert(strstr(logged.last, "released already"), "%s", logged.last);
	cr_assert_eq(cstats(f->cache).double_puts, 2);
	munmap(buf, 4 * PG);
}

Test(double_put, checked_by_the_environment)
{
	struct fixture f;

	setenv("MRMGR_CHECK", "1", 1);
	fx_open(&f, NULL, NULL);
	checked_put_is_refused_at_the_put(&f);
	fx_close(&f);
}

Test(double_put, checked_by_the_attribute_flag)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(MRMGR_CACHE_CHECK, 0);

	fx_open(&f, NULL, &a);
	checked_put_is_refused_at_the_put(&f);
	fx_close(&f);
}

Test(double_put, a_bad_mrmgr_check_value_is_ignored_with_a_warning)
{
	struct fixture f;
	mrmgr_region_t *r;
	char *buf = map_rw(PG, 1);

	setenv("MRMGR_CHECK", "yes please", 1);
	fx_open(&f, NULL, NULL);
	cr_assert(strstr(logged.last_warning, "MRMGR_CHECK"), "%s",
		  logged.last_warning);
	/* Not checked: the extra put is found later, not at the put. */
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	mrmgr_put(r);
	mrmgr_put(r);
	cr_assert_eq(logged.errors, 0);
	cr_assert_eq(cstats(f.cache).double_puts, 1);
	fx_close(&f);
	munmap(buf, PG);
}

/* ------------------------------------------------------------ threads */

struct churn {
	mrmgr_cache_t *cache;
	char *buf;
	int stop;
	mrmgr_region_t *handoff[2];
};

/* Get here, put on the other thread (another stripe), and the reverse. */
static void *churn_thread(void *arg)
{
	struct churn *ch = arg;

	for (int i = 0; i < 20000; i++) {
		mrmgr_region_t *r;
		size_t off = (size_t)(i % 4) * PG;

		if (mrmgr_get(ch->cache, ch->buf + off, PG, RW, &r) == 0) {
			mrmgr_region_t *old =
				__atomic_exchange_n(&ch->handoff[i & 1], r,
						    __ATOMIC_ACQ_REL);
			if (old)
				mrmgr_put(old);
		}
	}
	return NULL;
}

static void *meddler(void *arg)
{
	struct churn *ch = arg;
	struct mrmgr_stats s;

	while (!__atomic_load_n(&ch->stop, __ATOMIC_ACQUIRE)) {
		mrmgr_invalidate(ch->cache, ch->buf + 2 * PG, PG);
		mrmgr_cache_query_stats(ch->cache, &s, sizeof(s));
	}
	return NULL;
}

static void no_false_alarm(uint64_t flags)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(flags | MRMGR_CACHE_NO_MERGE, 2);
	struct churn ch = { 0 };
	pthread_t t[2], m;

	ch.buf = map_rw(4 * PG, 1);
	fx_open(&f, NULL, &a);
	ch.cache = f.cache;
	cr_assert_eq(pthread_create(&m, NULL, meddler, &ch), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, churn_thread, &ch), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	__atomic_store_n(&ch.stop, 1, __ATOMIC_RELEASE);
	pthread_join(m, NULL);
	for (int i = 0; i < 2; i++)
		if (ch.handoff[i])
			mrmgr_put(ch.handoff[i]);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.double_puts, 0, "false alarm: %s", logged.last);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_eq(logged.errors, 0, "%s", logged.last);
	fx_close(&f);
	munmap(ch.buf, 4 * PG);
}

Test(double_put, no_false_alarm_when_threads_put_what_others_got)
{
	no_false_alarm(0);
}

Test(double_put, no_false_alarm_in_the_checked_mode)
{
	no_false_alarm(MRMGR_CACHE_CHECK);
}

Test(double_put, prefetch_of_a_released_region_is_einval)
{
	struct fixture f;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP, .odp_mode = MRMGR_ODP_EXPLICIT,
	};
	mrmgr_region_t *r;
	char *buf = map_rw(4 * PG, 1);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, PG), 0);
	mrmgr_put(r); /* released: no MR any more */
	cr_assert_eq(mrmgr_region_prefetch(r, NULL, 0, 0), EINVAL);
	cr_assert(strstr(logged.last, "not held"), "%s", logged.last);
	fx_close(&f);
	munmap(buf, 4 * PG);
}
