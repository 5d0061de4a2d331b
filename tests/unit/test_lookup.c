/*
 * The hit path's machinery: the lookup index against the interval tree
 * (random operations, several levels, growth, regions the index cannot
 * hold), thread slots and their reuse, reference words (a put on another
 * thread's stripe), and hit counting.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "helpers.h"

#include "cache.h"

#define PG (4 * KiB)

static struct mrmgr_cache_attr limited(uint64_t max_regions, uint64_t flags)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_MAX_BYTES |
			     MRMGR_CACHE_ATTR_FLAGS,
		.max_regions = max_regions,
		.max_bytes = 1ull << 50,
		.flags = flags,
	};

	return a;
}

/* No pinning and no memlock budget: regions of any size, quickly. */
static const struct mrmgr_sim_attr nopin = {
	.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK |
		     MRMGR_SIM_ATTR_LIMITS,
	.flags = MRMGR_SIM_FLAG_NO_PIN,
	.memlock_bytes = UINT64_MAX,
	.max_mr = 1 << 20,
	.max_mr_size = 1ull << 44,
};

/* The cache's lookup index, which exists once something was cached: a
 * cache that caches nothing (no monitor source covered its gets) fails
 * here with a message instead of crashing on NULL. */
static struct mrmgr__lk_table *lk_of(mrmgr_cache_t *c)
{
	cr_assert_not_null(c->lk, "no lookup index: nothing was cached "
			   "(see the monitor's warning)");
	return c->lk;
}

static int has_access(const struct mrmgr__itree_node *n, const void *arg)
{
	unsigned int need = *(const unsigned int *)arg;
	const struct mrmgr_region *r =
		mrmgr__container_of(n, struct mrmgr_region, node);

	return (r->access & need) == need;
}

/*
 * Under the lock, the index must answer exactly as the tree: a region
 * when the tree has one containing the range with the access, and then
 * one that does; NULL when the tree has none.
 */
static void check_index(mrmgr_cache_t *c, char *base, size_t span,
			uint64_t *seed)
{
	static const unsigned int acc[] = { 0, IBV_ACCESS_LOCAL_WRITE, RW };

	pthread_mutex_lock(&c->lock);
	cr_assert_not_null(c->lk, "the index is in use");
	for (int q = 0; q < 200; q++) {
		uint64_t r = (*seed = *seed * 6364136223846793005ULL + 1);
		uint64_t start = (uint64_t)(uintptr_t)base +
				 (r >> 20) % (span / PG) * PG;
		uint64_t last = (start + (r >> 8) % (8 * PG)) | (PG - 1);
		unsigned int need = acc[(r >> 4) % 3];
		int gave_up = 0;
		struct mrmgr__itree_node *n = mrmgr__itree_find_containing(
			mrmgr__cache_tree(c), start, last, has_access, &need,
			UINT_MAX,
			&gave_up);
		struct mrmgr_region *x = mrmgr__lookup_find(
			c->lk, start, start >> c->page_shift,
			last >> c->page_shift, mrmgr__lk_access_tag(need));

		cr_assert_eq(x != NULL, n != NULL,
			     "index and tree disagree on [%#lx, %#lx]",
			     (unsigned long)start, (unsigned long)last);
		if (x) {
			cr_assert_leq(x->node.start, start);
			cr_assert_geq(x->node.last, last);
			cr_assert_eq(x->access & need, need);
			cr_assert_eq(mrmgr__region_state(x), MRMGR__REGION_LIVE);
		}
	}
	pthread_mutex_unlock(&c->lock);
}

/* Random gets (several sizes, so several levels), puts, invalidations,
 * evictions; the index keeps in step with the tree throughout. */
static void random_ops(uint64_t flags)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(24, flags);
	size_t span = 8 * MiB;
	char *base = map_rw(span, 0);
	uint64_t seed = 42;

	fx_open(&f, NULL, &a);
	for (int round = 0; round < 40; round++) {
		for (int op = 0; op < 50; op++) {
			uint64_t r = (seed = seed * 6364136223846793005ULL + 1);
			size_t len = (size_t)PG << ((r >> 40) % 9); /* 4K..1M */
			size_t off = (r >> 12) % ((span - len) / PG) * PG;
			mrmgr_region_t *reg;

			if ((r >> 60) == 0) {
				cr_assert_eq(mrmgr_invalidate(f.cache, base + off,
							      len), 0);
				continue;
			}
			cr_assert_eq(mrmgr_get(f.cache, base + off, len,
					       (r >> 30) & 1 ? RW
							     : IBV_ACCESS_LOCAL_WRITE,
					       &reg), 0);
			cr_assert_leq((char *)mrmgr_region_addr(reg), base + off);
			cr_assert_geq((char *)mrmgr_region_addr(reg) +
					      mrmgr_region_length(reg),
				      base + off + len);
			mrmgr_put(reg);
		}
		check_index(f.cache, base, span, &seed);
	}
	cr_assert_gt(cstats(f.cache).evictions, 0);
	cr_assert_eq(mrmgr_invalidate(f.cache, base, span), 0);
	pthread_mutex_lock(&f.cache->lock);
	cr_assert_eq(f.cache->lookup.used, 0, "every slot is freed");
	cr_assert_eq(lk_of(f.cache)->levels, 0);
	pthread_mutex_unlock(&f.cache->lock);
	fx_close(&f);
	munmap(base, span);
}

Test(lookup, index_follows_tree_with_merging)
{
	random_ops(0);
}

Test(lookup, index_follows_tree_without_merging)
{
	random_ops(MRMGR_CACHE_NO_MERGE);
}

/* Regions of many sizes at once: each hits through the inline path. */
Test(lookup, every_level_hits)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(1000, MRMGR_CACHE_NO_MERGE);
	size_t span = 64 * MiB;
	char *base = map_rw(span, 0);
	mrmgr_region_t *r, *h;
	size_t off = 0;

	fx_open(&f, &nopin, &a);
	for (int i = 0; i < 12; i++) {
		size_t len = (PG << i) + (i & 1 ? PG : 0); /* odd: 2 granules */

		cr_assert_eq(mrmgr_get(f.cache, base + off, len, RW, &r), 0);
		mrmgr_put(r);
		off += 2 * len + PG;
	}
	uint64_t misses = cstats(f.cache).misses;

	off = 0;
	for (int i = 0; i < 12; i++) {
		size_t len = (PG << i) + (i & 1 ? PG : 0);

		/* The first and the last page of each. */
		cr_assert_eq(mrmgr_get(f.cache, base + off, PG, RW, &h), 0);
		cr_assert_eq((char *)mrmgr_region_addr(h), base + off);
		mrmgr_put(h);
		cr_assert_eq(mrmgr_get(f.cache, base + off + len - PG, PG,
				       IBV_ACCESS_REMOTE_READ, &h), 0);
		cr_assert_eq((char *)mrmgr_region_addr(h), base + off);
		mrmgr_put(h);
		off += 2 * len + PG;
	}
	struct mrmgr_stats s = cstats(f.cache);

	cr_assert_eq(s.misses, misses, "all hits");
	cr_assert_eq(s.hits, 24);
	/* Access the region lacks: a miss, not a hit. */
	cr_assert_eq(mrmgr_get(f.cache, base, PG,
			       RW | IBV_ACCESS_REMOTE_ATOMIC, &h), 0);
	mrmgr_put(h);
	cr_assert_eq(cstats(f.cache).misses, misses + 1);
	fx_close(&f);
	munmap(base, span);
}

/* Thousands of regions: the table grows (old tables retired) and still
 * answers every one. */
Test(lookup, table_grows)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(1 << 20, MRMGR_CACHE_NO_MERGE);
	int n = 5000;
	char *base = map_rw((size_t)n * 2 * PG, 0);
	mrmgr_region_t *r;

	fx_open(&f, &nopin, &a);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(mrmgr_get(f.cache, base + (size_t)i * 2 * PG, PG, RW,
				       &r), 0);
		mrmgr_put(r);
	}
	cr_assert_geq(lk_of(f.cache)->mask + 1, (uint64_t)n * 8 / 3,
		      "at most 3/8 full: %llu slots for %d",
		      (unsigned long long)lk_of(f.cache)->mask + 1, n);
	cr_assert_not_null(lk_of(f.cache)->retired);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(mrmgr_get(f.cache, base + (size_t)i * 2 * PG, PG, RW,
				       &r), 0);
		mrmgr_put(r);
	}
	cr_assert_eq(cstats(f.cache).hits, (uint64_t)n);
	fx_close(&f);
	munmap(base, (size_t)n * 2 * PG);
}

/* A region too long for a slot is left to the tree, which hits find. */
Test(lookup, region_the_index_cannot_hold)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(16, 0);
	size_t len = ((size_t)1 << (MRMGR__LK_LEN_BITS + 12)) + PG; /* 1 TiB */
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	mrmgr_region_t *r, *h;

	if (p == MAP_FAILED)
		cr_skip_test("cannot reserve 1 TiB of address space");
	fx_open(&f, &nopin, &a);
	cr_assert_eq(mrmgr_get(f.cache, p, len, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(f.cache->lookup.unindexed, 1);
	cr_assert(lk_of(f.cache)->partial);
	cr_assert_eq(mrmgr_get(f.cache, p + len / 2, PG, RW, &h), 0);
	cr_assert_eq(h, r, "found through the tree");
	mrmgr_put(h);
	cr_assert_eq(cstats(f.cache).hits, 1);
	cr_assert_eq(mrmgr_invalidate(f.cache, p, len), 0);
	cr_assert_eq(f.cache->lookup.unindexed, 0);
	cr_assert_not(lk_of(f.cache)->partial);
	fx_close(&f);
	munmap(p, len);
}

static void *slot_of_thread(void *arg)
{
	*(unsigned int *)arg = mrmgr__thread_slot();
	return NULL;
}

/* A thread's slot goes back when it exits: a later thread reuses it. */
Test(lookup, thread_slots_are_reused)
{
	unsigned int mine = mrmgr__thread_slot(), a, b;
	pthread_t t;

	cr_assert_lt(mine, mrmgr__stripes());
	pthread_create(&t, NULL, slot_of_thread, &a);
	pthread_join(t, NULL);
	pthread_create(&t, NULL, slot_of_thread, &b);
	pthread_join(t, NULL);
	cr_assert_neq(a, mine, "a live thread keeps its slot");
	cr_assert_eq(a, b, "an exited thread's slot is free again");
}

struct handoff {
	mrmgr_cache_t *cache;
	mrmgr_region_t *r;
};

static void *put_elsewhere(void *arg)
{
	struct handoff *h = arg;

	mrmgr_put(h->r);
	return NULL;
}

/* A put from another thread lands on its stripe: the sum still says
 * idle, so the region can be evicted (and is not leaked). */
Test(lookup, put_from_another_thread)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(1, MRMGR_CACHE_NO_MERGE);
	char *buf = map_rw(2 * 64 * KiB, 0);
	struct handoff h;
	mrmgr_region_t *r2;
	pthread_t t;

	fx_open(&f, NULL, &a);
	h.cache = f.cache;
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &h.r), 0);
	cr_assert_eq(mrmgr__region_refs(h.r, f.cache->nstripes), 1);
	pthread_create(&t, NULL, put_elsewhere, &h);
	pthread_join(t, NULL);
	cr_assert_eq(mrmgr__region_refs(h.r, f.cache->nstripes), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf + 64 * KiB, 64 * KiB, RW, &r2), 0);
	mrmgr_put(r2);
	cr_assert_eq(cstats(f.cache).evictions, 1);
	fx_close(&f);
	munmap(buf, 2 * 64 * KiB);
}

struct hitter {
	mrmgr_cache_t *cache;
	char *buf;
	int n;
};

static void *hit_many(void *arg)
{
	struct hitter *h = arg;
	mrmgr_region_t *r;

	for (int i = 0; i < h->n; i++) {
		if (mrmgr_get(h->cache, h->buf + (i % 16) * PG, PG, RW, &r))
			return (void *)1;
		mrmgr_put(r);
	}
	return NULL;
}

/* Hits from threads with stripes of their own are all counted. */
Test(lookup, hits_counted_per_stripe)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(16, 0);
	char *buf = map_rw(64 * KiB, 0);
	struct hitter h = { .buf = buf, .n = 20000 };
	int nthreads = 3; /* with the main thread: at most 4 stripes */
	pthread_t t[3];
	mrmgr_region_t *r;
	void *ret;

	fx_open(&f, NULL, &a);
	h.cache = f.cache;
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	for (int i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, hit_many, &h);
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], &ret);
		cr_assert_null(ret);
	}
	struct mrmgr_stats s = cstats(f.cache);

	cr_assert_eq(s.misses, 1);
	cr_assert_eq(s.hits, (uint64_t)nthreads * 20000);
	cr_assert_eq(s.regions_in_use, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* Bad arguments still get EINVAL when the region they name is cached. */
Test(lookup, inline_path_rejects_bad_arguments)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(16, 0);
	char *buf = map_rw(64 * KiB, 0);
	mrmgr_region_t *r;

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 0, RW, &r), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, 1u << 30, &r), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB,
			       IBV_ACCESS_REMOTE_WRITE, &r), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB,
			       IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ,
			       &r), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, SIZE_MAX, RW, &r), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, NULL), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, NULL, 64 * KiB, RW, &r), EINVAL);
	cr_assert_eq(cstats(f.cache).hits, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* Emptied in place (what a fork child does to forget its parent's
 * regions): nothing found, nothing left counted, and it fills again. */
Test(lookup, clear_empties_in_place)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limited(64, MRMGR_CACHE_NO_MERGE);
	char *buf = map_rw(16 * 2 * PG, 0);
	mrmgr_region_t *r;

	fx_open(&f, &nopin, &a);
	for (int i = 0; i < 16; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 2 * PG, PG, RW, &r), 0);
		mrmgr_put(r);
	}
	pthread_mutex_lock(&f.cache->lock);
	const struct mrmgr__lk_table *t = lk_of(f.cache);

	/* The tree whole first: clearing forgets what waits for it too. */
	mrmgr__cache_tree(f.cache);
	mrmgr__lookup_clear(f.cache);
	cr_assert_eq(f.cache->lk, t, "the same table");
	cr_assert_eq(f.cache->lookup.used, 0);
	cr_assert_eq(t->levels, 0);
	for (int i = 0; i < 16; i++)
		cr_assert_null(mrmgr__lookup_find(
			t, (uintptr_t)buf + i * 2 * PG,
			((uintptr_t)buf >> 12) + i * 2,
			((uintptr_t)buf >> 12) + i * 2, 0));
	/* Back in step with the tree for the rest of the test. */
	for (struct mrmgr__itree_node *n = mrmgr__itree_first(&f.cache->tree);
	     n; n = mrmgr__itree_next(n))
		mrmgr__lookup_insert(f.cache, mrmgr__container_of(
					      n, struct mrmgr_region, node));
	cr_assert_eq(f.cache->lookup.used, 16);
	pthread_mutex_unlock(&f.cache->lock);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).hits, 1);
	fx_close(&f);
	munmap(buf, 16 * 2 * PG);
}
