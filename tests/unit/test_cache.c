/*
 * Cache semantics on the simulated HCA: hits, misses, merging, refcounts,
 * LRU eviction under both limits, ENOMEM evict-and-retry, invalidation in
 * use, and a multi-threaded stress run.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "helpers.h"
#include "config_env.h"

static int has_ipc_lock(void)
{
	struct mrmgr__pin_budget b;

	mrmgr__pin_budget_read(&b);
	return b.cap_ipc_lock;
}

static struct mrmgr_cache_attr limits(uint64_t max_regions, uint64_t max_bytes,
				      uint64_t flags)
{
	struct mrmgr_cache_attr a = { 0 };

	if (max_regions) {
		a.comp_mask |= MRMGR_CACHE_ATTR_MAX_REGIONS;
		a.max_regions = max_regions;
	}
	if (max_bytes) {
		a.comp_mask |= MRMGR_CACHE_ATTR_MAX_BYTES;
		a.max_bytes = max_bytes;
	}
	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags = flags;
	return a;
}

static struct mrmgr_cache_attr big = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
};

Test(cache, hit_returns_same_region_and_counts)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 'x');

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r1), 0);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf + 4 * KiB, 100, IBV_ACCESS_LOCAL_WRITE, &r2), 0);
	cr_assert_eq(r1, r2, "a contained request must hit");
	cr_assert_eq(mrmgr_region_addr(r2), buf);
	cr_assert_eq(mrmgr_region_length(r2), 64 * KiB);
	struct ibv_mr *mr = mrmgr_region_mr(r2);
	cr_assert_eq(mr->lkey, mrmgr_region_lkey(r2));
	cr_assert_eq(mr->rkey, mrmgr_region_rkey(r2));
	cr_assert_eq(mr->addr, (void *)buf);
	cr_assert_eq(mr->length, 64 * KiB);
	cr_assert_eq(mrmgr_region_access(r2), RW);
	mrmgr_put(r2);

	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.hits, 1);
	cr_assert_eq(s.misses, 1);
	cr_assert_eq(s.registrations, 1);
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_eq(s.pinned_bytes, 64 * KiB);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(cache, request_is_page_aligned)
{
	struct fixture f;
	mrmgr_region_t *r;
	char *buf = map_rw(3 * 4 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf + 4095, 2, IBV_ACCESS_LOCAL_WRITE, &r), 0);
	cr_assert_eq(mrmgr_region_addr(r), buf);
	cr_assert_eq(mrmgr_region_length(r), 8 * KiB);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 3 * 4 * KiB);
}

Test(cache, adjacent_requests_merge)
{
	struct fixture f;
	/* The merge path itself: growth in place is test_grow.c's. */
	struct mrmgr_cache_attr na = limits(0, 1ull << 32, MRMGR_CACHE_NO_REREG);
	mrmgr_region_t *a, *b, *c;
	char *buf = map_rw(128 * KiB, 1);

	fx_open(&f, NULL, &na);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &a), 0);
	mrmgr_put(a);
	cr_assert_eq(mrmgr_get(f.cache, buf + 64 * KiB, 64 * KiB, RW, &b), 0);
	cr_assert_eq(mrmgr_region_addr(b), buf);
	cr_assert_eq(mrmgr_region_length(b), 128 * KiB);
	mrmgr_put(b);
	cr_assert_eq(mrmgr_get(f.cache, buf + 60 * KiB, 8 * KiB, RW, &c), 0);
	cr_assert_eq(c, b, "the merged region serves the seam");
	mrmgr_put(c);

	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.merges, 1);
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.deregistrations, 1);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(cache, no_merge_flag_keeps_regions_apart)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(0, 1ull << 32, MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(128 * KiB, 1);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r1), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf + 32 * KiB, 64 * KiB, RW, &r2), 0);
	cr_assert_neq(r1, r2);
	cr_assert_eq(mrmgr_region_addr(r2), buf + 32 * KiB);
	cr_assert_eq(mrmgr_region_length(r2), 64 * KiB);
	mrmgr_put(r1);
	mrmgr_put(r2);
	cr_assert_eq(cstats(f.cache).merges, 0);
	cr_assert_eq(cstats(f.cache).regions, 2);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(cache, merge_while_old_region_in_use_keeps_its_keys)
{
	struct fixture f;
	mrmgr_region_t *old, *grown;
	char *buf = map_rw(128 * KiB, 0);
	char msg[16] = "still valid";
	/* No headroom: the merged region is the union exactly (the mapping
	 * can merge with anonymous neighbours -- a sanitizer's allocator's --
	 * which headroom would reach into). */
	struct mrmgr_cache_attr a = limits(0, 1ull << 32, MRMGR_CACHE_NO_HEADROOM);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &old), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf + 32 * KiB, 96 * KiB, RW, &grown), 0);
	cr_assert_neq(old, grown);
	uint32_t old_rkey = mrmgr_region_rkey(old);
	cr_assert_neq(old_rkey, mrmgr_region_rkey(grown));
	cr_assert_eq(mrmgr_region_length(grown), 128 * KiB);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2, "the old MR lives until its put");
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(old),
				     (uint64_t)(uintptr_t)buf, msg, sizeof(msg)), 0);
	cr_assert_str_eq(buf, "still valid");
	mrmgr_put(old);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "last put deregisters the merged-away MR");
	cr_assert_eq(mrmgr_sim_write(f.pd, old_rkey, (uint64_t)(uintptr_t)buf,
				     msg, sizeof(msg)), ENOENT, "the old MR is gone");
	mrmgr_put(grown);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(cache, access_upgrade_registers_union)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, IBV_ACCESS_LOCAL_WRITE, &r1), 0);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * KiB, IBV_ACCESS_REMOTE_READ, &r2), 0);
	cr_assert_eq(mrmgr_region_access(r2),
		     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(mrmgr_region_length(r2), 64 * KiB);
	mrmgr_put(r2);
	cr_assert_eq(cstats(f.cache).regions, 1);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(cache, lru_eviction_by_count)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(3, 1ull << 32, MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *r[4], *again;
	char *buf = map_rw(4 * 64 * KiB, 0);

	fx_open(&f, NULL, &a);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 64 * KiB, 64 * KiB, RW, &r[i]), 0);
		mrmgr_put(r[i]);
	}
	/* Touch A so B becomes the least recently used. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &again), 0);
	cr_assert_eq(again, r[0]);
	mrmgr_put(again);

	cr_assert_eq(mrmgr_get(f.cache, buf + 3 * 64 * KiB, 64 * KiB, RW, &r[3]), 0);
	mrmgr_put(r[3]);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.evictions, 1);
	cr_assert_eq(s.regions, 3);

	uint64_t misses = s.misses;
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &again), 0);
	mrmgr_put(again);
	cr_assert_eq(cstats(f.cache).misses, misses, "A (recently used) must survive");
	cr_assert_eq(mrmgr_get(f.cache, buf + 64 * KiB, 64 * KiB, RW, &again), 0);
	mrmgr_put(again);
	cr_assert_eq(cstats(f.cache).misses, misses + 1, "B (LRU) must have been evicted");
	fx_close(&f);
	munmap(buf, 4 * 64 * KiB);
}

Test(cache, lru_eviction_by_bytes)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(0, 192 * KiB, MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *r;
	char *buf = map_rw(8 * 64 * KiB, 0);

	fx_open(&f, NULL, &a);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 64 * KiB, 64 * KiB, RW, &r), 0);
		mrmgr_put(r);
		cr_assert_leq(cstats(f.cache).pinned_bytes, 192 * KiB);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.evictions, 5);
	cr_assert_eq(s.regions, 3);
	cr_assert_eq(sstats(f.ctx).live_mrs, 3);
	fx_close(&f);
	munmap(buf, 8 * 64 * KiB);
}

Test(cache, regions_in_use_are_never_evicted)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(2, 1ull << 32, MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *r[3];
	char *buf = map_rw(3 * 64 * KiB, 0);

	fx_open(&f, NULL, &a);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 64 * KiB, 64 * KiB, RW, &r[i]), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.evictions, 0);
	cr_assert_eq(s.uncached, 1, "the third is handed out uncached");
	cr_assert_eq(s.regions_in_use, 3);
	cr_assert_eq(sstats(f.ctx).live_mrs, 3);
	mrmgr_put(r[2]);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2, "an uncached region goes at its put");
	mrmgr_put(r[0]);
	mrmgr_put(r[1]);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2, "cached regions stay");
	fx_close(&f);
	munmap(buf, 3 * 64 * KiB);
}

Test(cache, request_larger_than_byte_limit_is_served_uncached)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(0, 64 * KiB, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(256 * KiB, 0);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 256 * KiB, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).uncached, 1);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	fx_close(&f);
	munmap(buf, 256 * KiB);
}

Test(cache, enomem_evicts_idle_and_retries)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
				     .memlock_bytes = 256 * KiB };
	struct mrmgr_cache_attr a = limits(0, 1ull << 32, MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *r[5];
	char *buf = map_rw(5 * 64 * KiB, 0);

	fx_open(&f, &sa, &a);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 64 * KiB, 64 * KiB, RW, &r[i]), 0);
		mrmgr_put(r[i]);
	}
	cr_assert_eq(mrmgr_get(f.cache, buf + 4 * 64 * KiB, 64 * KiB, RW, &r[4]), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.evict_retries, 1);
	cr_assert_eq(s.evictions, 4, "every idle region is evicted before the retry");
	cr_assert_eq(s.reg_failures, 0);

	/* Now hold everything the budget allows: the next get fails cleanly. */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 64 * KiB, 64 * KiB, RW, &r[i]), 0);
	mrmgr_region_t *extra = NULL;
	cr_assert_eq(mrmgr_get(f.cache, buf + 3 * 64 * KiB, 64 * KiB, RW, &extra), ENOMEM);
	cr_assert_null(extra);
	cr_assert_eq(cstats(f.cache).reg_failures, 1);
	for (int i = 0; i < 3; i++)
		mrmgr_put(r[i]);
	mrmgr_put(r[4]);
	fx_close(&f);
	munmap(buf, 5 * 64 * KiB);
}

Test(cache, registration_error_is_returned_without_leak)
{
	struct fixture f;
	struct mrmgr_sim_fault fault = { .op = MRMGR_SIM_OP_REG, .err = EFAULT,
					 .nth = 1, .count = 1 };
	mrmgr_region_t *r = NULL;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &fault), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), EFAULT);
	cr_assert_null(r);
	cr_assert_eq(cstats(f.cache).regions, 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(cache, unmapped_memory_is_efault)
{
	struct fixture f;
	mrmgr_region_t *r = NULL;
	char *buf = map_rw(64 * KiB, 0);

	munmap(buf, 64 * KiB);
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), EFAULT);
	cr_assert_null(r);
	fx_close(&f);
}

Test(cache, invalidate_idle_deregisters_now)
{
	struct fixture f;
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf + 8 * KiB, 1), 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "a partial overlap invalidates the region");
	cr_assert_eq(cstats(f.cache).invalidations, 1);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 64 * KiB), 0, "nothing left: still 0");
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(cache, invalidate_in_use_detaches_until_last_put)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2, *r3;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r1), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r2), 0);
	cr_assert_eq(r1, r2);
	uint32_t old_rkey = mrmgr_region_rkey(r1);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 64 * KiB), 0);

	/* The holders' keys stay valid; new gets get a new registration. */
	cr_assert_eq(mrmgr_sim_write(f.pd, old_rkey, (uint64_t)(uintptr_t)buf, "ok", 3), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r3), 0);
	cr_assert_neq(r3, r1);
	cr_assert_neq(mrmgr_region_rkey(r3), old_rkey);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2);
	mrmgr_put(r1);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2, "one holder left");
	mrmgr_put(r2);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "last put deregisters");
	cr_assert_eq(mrmgr_sim_write(f.pd, old_rkey, (uint64_t)(uintptr_t)buf, "no", 3),
		     ENOENT, "the old key is gone");
	mrmgr_put(r3);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(cache, stale_registration_after_remap)
{
	struct fixture f;
	mrmgr_region_t *r;
	const size_t len = 64 * KiB;
	char *buf = map_rw(len, 'A');

	/* Monitoring off: this test shows the hazard the monitor removes
	 * (test_monitor*.c show it removed). */
	struct mrmgr_cache_attr unmonitored = big;

	unmonitored.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	unmonitored.monitor = MRMGR_MONITOR_NONE;
	if (!mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs /proc/self/pagemap PFNs (root)");
	fx_open(&f, NULL, &unmonitored);
	cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
	mrmgr_put(r);
	remap_fixed(buf, len, 'B');

	/* Negative control: without invalidation the cache hands out the old
	 * registration and a write through it is stale. */
	mrmgr_region_t *stale;
	cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &stale), 0);
	cr_assert_eq(stale, r);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(stale),
				     (uint64_t)(uintptr_t)buf, "W", 1), ESTALE);
	cr_assert_eq(buf[0], 'B');
	mrmgr_put(stale);

	cr_assert_eq(mrmgr_invalidate(f.cache, buf, len), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r),
				     (uint64_t)(uintptr_t)buf, "W", 1), 0);
	cr_assert_eq(buf[0], 'W');
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 1);
	fx_close(&f);
	munmap(buf, len);
}

Test(cache, disabled_cache_registers_every_time)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(0, 0, MRMGR_CACHE_DISABLE);
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &a);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
		mrmgr_put(r);
		cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	}
	cr_assert_eq(cstats(f.cache).registrations, 3);
	cr_assert_eq(cstats(f.cache).hits, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(cache, destroy_with_held_region_is_ebusy)
{
	struct fixture f;
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(cache, environment_fills_what_attr_left_unset)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(100, 1 * MiB, 0);

	setenv("MRMGR_MAX_REGIONS", "7", 1);
	setenv("MRMGR_MAX_BYTES", "2M", 1);
	fx_open(&f, NULL, &a);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.max_regions, 100, "the program's attribute wins");
	cr_assert_eq(s.max_bytes, 1 * MiB);
	fx_close(&f);
	fx_open(&f, NULL, NULL);
	unsetenv("MRMGR_MAX_REGIONS");
	unsetenv("MRMGR_MAX_BYTES");
	s = cstats(f.cache);
	cr_assert_eq(s.max_regions, 7);
	cr_assert_eq(s.max_bytes, 2 * MiB);
	fx_close(&f);
}

Test(cache, defaults_follow_memlock_limit)
{
	struct fixture f;
	struct rlimit rl;

	cr_assert_eq(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	fx_open(&f, NULL, NULL);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_gt(s.max_regions, 0);
	cr_assert_leq(s.max_regions, 1u << 20);
	/* Without CAP_IPC_LOCK (test_config.c tests the other cases). */
	if (rl.rlim_cur != RLIM_INFINITY && !has_ipc_lock())
		cr_assert_eq(s.max_bytes, rl.rlim_cur);
	else
		cr_assert_gt(s.max_bytes, 0);
	fx_close(&f);
}

/* ---------------------------------------------------------------- threads */

#define NBUF 64
#define BUFLEN (16 * KiB)

struct stress {
	struct fixture f;
	char *mem;
	unsigned long gets;
};

static void *stress_thread(void *arg)
{
	struct stress *s = arg;
	unsigned int seed = (unsigned int)(uintptr_t)pthread_self();

	for (int i = 0; i < 20000; i++) {
		int b = rand_r(&seed) % NBUF;
		size_t off = (size_t)(rand_r(&seed) % (BUFLEN / 2));
		size_t len = 1 + (size_t)(rand_r(&seed) % (BUFLEN - off));
		char *p = s->mem + (size_t)b * BUFLEN + off;
		mrmgr_region_t *r;

		if (rand_r(&seed) % 16 == 0) {
			cr_assert_eq(mrmgr_invalidate(s->f.cache, p, len), 0);
			continue;
		}
		cr_assert_eq(mrmgr_get(s->f.cache, p, len, RW, &r), 0);
		__atomic_fetch_add(&s->gets, 1, __ATOMIC_RELAXED);
		cr_assert_leq((char *)mrmgr_region_addr(r), p);
		cr_assert_geq((char *)mrmgr_region_addr(r) + mrmgr_region_length(r), p + len);
		int ret = mrmgr_sim_write(s->f.pd, mrmgr_region_rkey(r),
					  (uint64_t)(uintptr_t)p, "z", 1);
		cr_assert_eq(ret, 0, "write through a held region: %d", ret);
		mrmgr_put(r);
	}
	return NULL;
}

Test(cache, threads_get_put_invalidate, .timeout = 120)
{
	struct stress s = { 0 };
	struct mrmgr_cache_attr a = limits(16, 1ull << 32, 0);
	pthread_t t[4];

	fx_open(&s.f, NULL, &a);
	s.mem = map_rw(NBUF * BUFLEN, 0);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, stress_thread, &s);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	struct mrmgr_stats st = cstats(s.f.cache);
	cr_assert_eq(st.regions_in_use, 0);
	cr_assert_leq(st.regions, 16);
	/* Hit counters are per thread slot and may drop a count when two
	 * threads share a slot; misses are exact. */
	cr_assert_leq(st.hits + st.misses, s.gets);
	cr_assert_gt(st.hits, 0);
	cr_assert_eq(st.registrations + st.rereg_successes, st.misses,
		     "each miss registers once, or grows a region in place");
	cr_assert_eq(st.deregistrations, st.registrations - st.regions);
	cr_assert_eq(sstats(s.f.ctx).stale_accesses, 0);
	fx_close(&s.f);
	munmap(s.mem, NBUF * BUFLEN);
}

/*
 * A request next to an idle cached region merges with it; when the merged
 * span cannot be pinned even after every idle region is evicted, the
 * request alone is registered (found on rxe: tests/rxe/test_memlock.c).
 */
Test(cache, enomem_on_a_merged_span_registers_the_request_alone)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
				     .memlock_bytes = 256 * KiB };
	struct mrmgr_cache_attr a = limits(0, 1ull << 32, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(320 * KiB, 0);

	fx_open(&f, &sa, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 128 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf + 128 * KiB, 192 * KiB, RW, &r), 0,
		     "320 KiB merged is past the budget, 192 KiB alone is not");
	cr_assert_eq(mrmgr_region_addr(r), buf + 128 * KiB);
	cr_assert_eq(mrmgr_region_length(r), 192 * KiB);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.evict_retries, 1);
	cr_assert_eq(s.reg_failures, 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 320 * KiB);
}

/*
 * A miss whose range holds a cached region with less access absorbs it,
 * even though neither the span nor the access grows; it used to stay
 * cached beside the new region, pinning the same pages twice (found on
 * rxe: tests/rxe/test_rdma.c).
 */
Test(cache, more_access_on_the_same_range_absorbs_the_weaker_region)
{
	struct fixture f;
	mrmgr_region_t *ro, *rw, *again;
	char *buf = map_rw(64 * KiB, 0);
	const unsigned int ro_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, ro_access, &ro), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &rw), 0);
	cr_assert_neq(rw, ro);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.merges, 1);
	mrmgr_put(ro);
	mrmgr_put(rw);
	s = cstats(f.cache);
	cr_assert_eq(s.regions, 1, "one registration of the range remains");
	cr_assert_eq(s.pinned_bytes, 64 * KiB);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, ro_access, &again), 0);
	cr_assert_eq(again, rw);
	mrmgr_put(again);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}
