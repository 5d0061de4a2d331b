/*
 * mrmgr_get()'s slow path (lib/core/get.c): a miss that the lock-free
 * lookup was sure of does not look again under the lock while the
 * sequence count says nothing changed -- and does look again when it
 * did change between the two, so a region another thread published
 * meanwhile is hit, not registered a second time.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "getter.h"
#include "helpers.h"

#include "cache.h"
#include "core.h"

static int reg_calls;
static const struct mrmgr_device_ops *real_ops;
static struct mrmgr_device_ops counting_ops;

static int counting_reg(struct ibv_pd *pd, void *addr, size_t length,
			int access, struct ibv_mr **mr)
{
	__atomic_fetch_add(&reg_calls, 1, __ATOMIC_RELAXED);
	return real_ops->reg_mr(pd, addr, length, access, mr);
}

static void count_regs(mrmgr_cache_t *c)
{
	real_ops = c->ops;
	counting_ops = *c->ops;
	counting_ops.reg_mr = counting_reg;
	c->ops = &counting_ops;
	reg_calls = 0;
}

static struct mrmgr_cache_attr attr(void)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_FLAGS | MRMGR_CACHE_ATTR_MONITOR,
		.flags = MRMGR_CACHE_NO_MERGE,
		.monitor = MRMGR_MONITOR_EXTERNAL,
	};

	return a;
}

/*
 * A get misses lock-free and waits for the lock, which the test holds
 * while it registers and publishes the same range itself: once the get
 * has the lock, the count has moved, so it looks again and hits the
 * published region. Skipping the second lookup regardless of the count
 * would register the range twice and return another region.
 */
Test(get, miss_looks_again_when_the_tree_changed_before_the_lock,
     .timeout = 60)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr();
	char *buf = map_rw(64 * KiB, 0);
	struct getter x;
	struct mrmgr_region *mine;

	fx_open(&f, NULL, &a);
	count_regs(f.cache);
	pthread_mutex_lock(&f.cache->lock);
	getter_start(&x, f.cache, buf, 64 * KiB);
	/* The getter has missed lock-free and waits for the lock: glibc
	 * marks a mutex contended (2) when a thread goes to sleep on it,
	 * and only the getter can. (A sleep here once hoped it had; when it
	 * came late it hit, and the test passed without testing the second
	 * lookup.) No time bound: the test's .timeout is the bound. */
	while (__atomic_load_n(&f.cache->lock.__data.__lock, __ATOMIC_ACQUIRE) != 2)
		sched_yield();
	cr_assert_eq(mrmgr__core_get_locked(f.cache, (uintptr_t)buf,
					    (uintptr_t)buf + 64 * KiB - 1, RW,
					    0, 0, &mine), 0);
	pthread_mutex_unlock(&f.cache->lock);
	getter_join(&x);
	cr_assert_eq(reg_calls, 1, "one registration, not %d", reg_calls);
	cr_assert_eq(x.r, mine, "the getter hit the published region");
	cr_assert_eq(cstats(f.cache).registrations, 1);
	mrmgr_put(x.r);
	mrmgr_put(mine);
	f.cache->ops = real_ops;
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* Misses, hits and their counts are what they were with the second
 * lookup: a churn over more buffers than the cache holds, checked
 * against a model of which buffers are cached. */
Test(get, sure_misses_count_and_register_once)
{
	enum { N = 64, LIMIT = 16, OPS = 4000 };
	struct fixture f;
	struct mrmgr_cache_attr a = attr();
	char *buf = map_rw((size_t)N * 64 * KiB, 0);
	uint64_t seed = 7, hits = 0, misses = 0;

	a.comp_mask |= MRMGR_CACHE_ATTR_MAX_REGIONS;
	a.max_regions = LIMIT;
	fx_open(&f, NULL, &a);
	count_regs(f.cache);
	for (int i = 0; i < OPS; i++) {
		mrmgr_region_t *r;
		size_t b;
		struct mrmgr_stats before = cstats(f.cache), after;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		b = (size_t)(seed >> 33) % N;
		cr_assert_eq(mrmgr_get(f.cache, buf + b * 64 * KiB, 64 * KiB,
				       RW, &r), 0);
		after = cstats(f.cache);
		cr_assert_eq(mrmgr_region_addr(r), buf + b * 64 * KiB);
		/* One or the other, never both nor none. */
		cr_assert_eq((after.hits - before.hits) +
				     (after.misses - before.misses), 1);
		hits += after.hits - before.hits;
		misses += after.misses - before.misses;
		mrmgr_put(r);
	}
	cr_assert_eq((uint64_t)reg_calls, misses, "a registration per miss");
	cr_assert_gt(hits, 0);
	f.cache->ops = real_ops;
	fx_close(&f);
	munmap(buf, (size_t)N * 64 * KiB);
}

static void quiet(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	(void)arg;
}

/*
 * get()'s inline argument checks accept exactly what the checkers with
 * the log lines accept: every access combination of the known bits, an
 * unknown one, and the range cases (NULL, zero length, wrapping), each
 * against mrmgr__cache_check_range() and mrmgr__core_check_access().
 */
Test(get, inline_argument_checks_match_the_checkers)
{
	const unsigned int bits[] = {
		IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE,
		IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_MW_BIND, IBV_ACCESS_RELAXED_ORDERING, 1u << 25,
	};
	const unsigned int nbits = sizeof(bits) / sizeof(bits[0]);
	struct fixture f;
	struct mrmgr_cache_attr a = attr();
	char *buf = map_rw(64 * KiB, 0);
	struct {
		void *addr;
		size_t len;
	} ranges[] = {
		{ buf, 64 * KiB },
		{ buf + 100, 1 },
		{ NULL, 4096 },
		{ buf, 0 },
		{ buf, SIZE_MAX },
		{ (void *)(UINTPTR_MAX - 4095), 8192 },
	};
	int accepted = 0, refused = 0;

	fx_open(&f, NULL, &a);
	mrmgr_set_log_handler(quiet, NULL, MRMGR_LOG_ERROR);
	for (unsigned int i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		for (unsigned int m = 0; m < 1u << nbits; m++) {
			unsigned int access = 0;
			uint64_t s, l;
			mrmgr_region_t *r = NULL;
			int want, got;

			for (unsigned int b = 0; b < nbits; b++)
				if (m & (1u << b))
					access |= bits[b];
			want = mrmgr__cache_check_range("test", ranges[i].addr,
							ranges[i].len, 4095, &s, &l);
			if (!want)
				want = mrmgr__core_check_access("test", access);
			got = mrmgr_get(f.cache, ranges[i].addr, ranges[i].len,
					access, &r);
			if (want) {
				cr_assert_eq(got, want, "range %u access %#x: %d, not %d",
					     i, access, got, want);
				refused++;
			} else {
				/* Past the checks: the device may still refuse
				 * an access it does not support, never EINVAL
				 * for the arguments themselves on this one. */
				cr_assert_neq(got, EINVAL, "range %u access %#x", i,
					      access);
				if (!got) {
					mrmgr_put(r);
					accepted++;
				}
			}
		}
	}
	cr_assert_gt(accepted, 0);
	cr_assert_gt(refused, 0);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}
