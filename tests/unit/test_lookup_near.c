/*
 * mrmgr__lookup_near(), the index's answer to "does a cached region
 * overlap this range?" that lets a miss skip its tree walk: on a random
 * trace of regions of many sizes and alignments, every answer it gives
 * agrees with the tree, it gives one for most narrow ranges, and it
 * leaves the answer to the tree when the index does not hold every
 * region, is broken, or would read too many chains.
 *
 * The index and the tree are driven directly on a bare cache structure
 * (no device), as release.c drives them.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cache.h"

#define SHIFT 12
#define PG (UINT64_C(1) << SHIFT)
#define BASE (UINT64_C(1) << 40) /* page-aligned, indexable */
#define WINDOW_PAGES 65536       /* regions start in 256 MiB */
#define NREG 320

struct bare {
	struct mrmgr_cache *c;
	struct mrmgr_region *reg[NREG];
	int live[NREG];
	unsigned int nlive;
};

static void bare_open(struct bare *b)
{
	size_t rsz = (sizeof(struct mrmgr_region) + 127) & ~(size_t)127;

	memset(b, 0, sizeof(*b));
	b->c = aligned_alloc(MRMGR__CACHELINE,
			     (sizeof(*b->c) + MRMGR__CACHELINE - 1) &
				     ~(size_t)(MRMGR__CACHELINE - 1));
	cr_assert_not_null(b->c);
	memset(b->c, 0, sizeof(*b->c));
	b->c->page_shift = SHIFT;
	mrmgr__itree_init(&b->c->tree);
	for (int i = 0; i < NREG; i++) {
		b->reg[i] = aligned_alloc(128, rsz); /* the index's tag bits */
		cr_assert_not_null(b->reg[i]);
		memset(b->reg[i], 0, rsz);
	}
}

static void bare_close(struct bare *b)
{
	mrmgr__lookup_fini(b->c);
	for (int i = 0; i < NREG; i++)
		free(b->reg[i]);
	free(b->c);
}

/* [start, last] in the tree and the index, as publishing a region does. */
static void add(struct bare *b, int i, uint64_t start, uint64_t last)
{
	struct mrmgr_region *r = b->reg[i];

	r->node.start = start;
	r->node.last = last;
	mrmgr__index_insert(b->c, r);
	b->live[i] = 1;
	b->nlive++;
}

static void del(struct bare *b, int i)
{
	mrmgr__index_remove(b->c, b->reg[i]);
	b->live[i] = 0;
	b->nlive--;
}

static uint64_t rnd(uint64_t *seed)
{
	*seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
	return *seed >> 17;
}

struct tally {
	uint64_t none, some, ask;
};

/* The index's answer must be the tree's whenever it gives one. */
static void check(struct bare *b, uint64_t qs, uint64_t ql, struct tally *t)
{
	enum mrmgr__lk_near a = mrmgr__lookup_near(b->c, qs, ql);
	int tree = mrmgr__itree_first_overlap(mrmgr__cache_tree(b->c), qs,
					    ql) != NULL;

	if (a == MRMGR__LK_ASK_TREE) {
		t->ask++;
		return;
	}
	if (a == MRMGR__LK_NONE)
		t->none++;
	else
		t->some++;
	if ((a == MRMGR__LK_SOME) != tree)
		cr_assert_fail("index says %s, tree says %s, for [%#" PRIx64
			       ", %#" PRIx64 "]",
			       a == MRMGR__LK_SOME ? "some" : "none",
			       tree ? "some" : "none", qs, ql);
}

/* A random query near the window: byte-exact ends, or a miss's
 * [request start - 1, request end + 1]. */
static void query(struct bare *b, uint64_t *seed, struct tally *t)
{
	uint64_t r = rnd(seed);
	uint64_t s = BASE - 64 * PG + r % ((WINDOW_PAGES + 1024) * PG);
	uint64_t len = rnd(seed) % (UINT64_C(1) << (rnd(seed) % 20));

	if (r & (UINT64_C(1) << 40)) {
		s &= ~(PG - 1);
		len |= PG - 1;
		check(b, s - 1, s + len + 1, t);
	} else {
		check(b, s, s + len, t);
	}
}

Test(lookup_near, agrees_with_the_tree_on_a_random_trace)
{
	struct bare b;
	struct tally t = { 0 };
	uint64_t seed = 12345;

	bare_open(&b);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE, BASE + PG),
		     MRMGR__LK_ASK_TREE, "no index yet");
	/* Each run uses two levels (the index reads a few chains only, so
	 * many levels at once leave every answer to the tree), drawn from a
	 * page to 2 MiB: regions with one granule at their level, two,
	 * exactly 2^L long, at any page alignment, overlapping too. */
	for (int run = 0; run < 12; run++) {
		unsigned int k[2] = { (unsigned int)(rnd(&seed) % 10),
				      (unsigned int)(rnd(&seed) % 10) };

		for (int step = 0; step < 6000; step++) {
			uint64_t r = rnd(&seed);
			int i = (int)(r % NREG);
			unsigned int kk = k[(r >> 12) & 1];

			if (b.live[i]) {
				del(&b, i);
			} else if (b.nlive < NREG * 3 / 4) {
				uint64_t start =
					BASE + rnd(&seed) % WINDOW_PAGES * PG;
				/* (2^(kk-1), 2^kk] pages: level kk + SHIFT */
				uint64_t pages =
					kk ? (UINT64_C(1) << (kk - 1)) + 1 +
						     rnd(&seed) % (UINT64_C(1)
								   << (kk - 1))
					   : 1;

				if ((r >> 20) % 4 == 0)
					pages = UINT64_C(1) << kk;
				add(&b, i, start, start + pages * PG - 1);
			}
			for (int q = 0; q < 4; q++)
				query(&b, &seed, &t);
		}
		cr_assert_eq(mrmgr__itree_check(mrmgr__cache_tree(b.c)), 0);
		cr_assert_not_null(b.c->lookup.near, "the filter is kept");
		for (int i = 0; i < NREG; i++)
			if (b.live[i])
				del(&b, i);
		cr_assert_eq(b.c->lookup.used, 0);
		/* Every count went back to zero, or the filter only hides
		 * its errors by sending the miss to the chains. */
		for (uint64_t j = 0; j <= b.c->lookup.near_mask; j++)
			if (b.c->lookup.near[j])
				cr_assert_fail("filter count %" PRIu64
					       " left at %u",
					       j, b.c->lookup.near[j]);
		cr_assert_eq(mrmgr__lookup_near(b.c, BASE, BASE + PG),
			     MRMGR__LK_NONE, "empty index: nothing there");
	}
	cr_log_info("near: %" PRIu64 " none, %" PRIu64 " some, %" PRIu64
		    " left to the tree",
		    t.none, t.some, t.ask);
	/* Both answers come up often, and the index answers most queries
	 * (the wide ones over small levels go to the tree). */
	cr_assert_gt(t.none, 10000);
	cr_assert_gt(t.some, 10000);
	cr_assert_gt(t.ask, 1000);
	cr_assert_gt(t.none + t.some, t.ask);
	bare_close(&b);
}

/*
 * One level, ranges around a region 2^L long that straddles a granule
 * boundary: the region is found from either granule and when it contains
 * the whole range; ranges that only miss it by a byte see nothing.
 */
Test(lookup_near, region_found_from_either_granule)
{
	struct bare b;
	uint64_t L = 16, g = UINT64_C(1) << L;
	uint64_t a = BASE + 5 * g + 3 * PG, z = a + g - 1; /* level 16 */

	bare_open(&b);
	add(&b, 0, a, z);
	cr_assert_eq(b.c->lookup.newest->levels, UINT64_C(1) << L);
	cr_assert_eq(mrmgr__lookup_near(b.c, a, a), MRMGR__LK_SOME);
	cr_assert_eq(mrmgr__lookup_near(b.c, z, z), MRMGR__LK_SOME);
	/* Inside, in the first granule, in the second, across both. */
	cr_assert_eq(mrmgr__lookup_near(b.c, a + PG, a + 2 * PG),
		     MRMGR__LK_SOME);
	cr_assert_eq(mrmgr__lookup_near(b.c, z - 2 * PG, z - PG),
		     MRMGR__LK_SOME);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + 6 * g - 1, BASE + 6 * g),
		     MRMGR__LK_SOME);
	/* Touching it from either side (a miss's widened range). */
	cr_assert_eq(mrmgr__lookup_near(b.c, a - PG, a), MRMGR__LK_SOME);
	cr_assert_eq(mrmgr__lookup_near(b.c, z, z + PG), MRMGR__LK_SOME);
	/* A byte short of it on either side. */
	cr_assert_eq(mrmgr__lookup_near(b.c, a - PG, a - 1), MRMGR__LK_NONE);
	cr_assert_eq(mrmgr__lookup_near(b.c, z + 1, z + PG), MRMGR__LK_NONE);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE, BASE + 5 * g),
		     MRMGR__LK_NONE);
	bare_close(&b);
}

/* The tree answers when the index cannot. */
Test(lookup_near, falls_back_to_the_tree)
{
	struct bare b;
	uint64_t huge = (UINT64_C(1) << (MRMGR__LK_LEN_BITS + SHIFT)) + PG;

	bare_open(&b);
	add(&b, 0, BASE, BASE + PG - 1);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG, BASE + 2 * PG),
		     MRMGR__LK_NONE);
	/* A region the index cannot hold: only the tree knows of it. */
	add(&b, 1, BASE + 2 * huge, BASE + 3 * huge - 1);
	cr_assert(b.c->lookup.newest->partial);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG, BASE + 2 * PG),
		     MRMGR__LK_ASK_TREE);
	del(&b, 1);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG, BASE + 2 * PG),
		     MRMGR__LK_NONE);
	/* A range over more granules than it reads: 64 pages at level 12. */
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG, BASE + 64 * PG),
		     MRMGR__LK_ASK_TREE);
	/* Many levels in use: too many chains even for a narrow range. */
	for (int i = 2; i < 12; i++) {
		uint64_t s = BASE + (UINT64_C(1) << 30) * (uint64_t)i;

		add(&b, i, s, s + (PG << i) - 1);
	}
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG, BASE + 2 * PG),
		     MRMGR__LK_ASK_TREE);
	for (int i = 2; i < 12; i++)
		del(&b, i);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG, BASE + 2 * PG),
		     MRMGR__LK_NONE);
	/* A broken index (out of memory once) is never asked again. */
	b.c->lookup.broken = 1;
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG, BASE + 2 * PG),
		     MRMGR__LK_ASK_TREE);
	b.c->lookup.broken = 0;
	bare_close(&b);
}

/*
 * Granules 2^20 apart fold onto one counter of the near filter: the 256th
 * overflows it, and the filter is dropped; the chains still answer.
 */
Test(lookup_near, filter_overflow_drops_it)
{
	struct bare b;
	uint64_t apart = PG << 20;

	bare_open(&b);
	for (int i = 0; i < 255; i++)
		add(&b, i, BASE + (uint64_t)i * apart,
		    BASE + (uint64_t)i * apart + PG - 1);
	cr_assert_not_null(b.c->lookup.near);
	cr_assert_eq(mrmgr__lookup_near(b.c, BASE + PG - 1, BASE + 2 * PG),
		     MRMGR__LK_SOME, "reaches the first region");
	add(&b, 255, BASE + 255 * apart, BASE + 255 * apart + PG - 1);
	cr_assert_null(b.c->lookup.near, "a count overflowed");
	for (int i = 0; i < 256; i++) {
		uint64_t s = BASE + (uint64_t)i * apart;

		cr_assert_eq(mrmgr__lookup_near(b.c, s + PG - 1, s + 2 * PG),
			     MRMGR__LK_SOME);
		cr_assert_eq(mrmgr__lookup_near(b.c, s + PG, s + 2 * PG),
			     MRMGR__LK_NONE);
	}
	for (int i = 0; i < 256; i++)
		del(&b, i);
	bare_close(&b);
}

/*
 * The tree waits while the index holds every region (a new region joins
 * it at the next tree query), and is whole again in the write section
 * that leaves the index partial: lock-free readers fall back to it then.
 */
Test(lookup_near, tree_waits_while_the_index_holds_all)
{
	struct bare b;
	uint64_t huge = (UINT64_C(1) << (MRMGR__LK_LEN_BITS + SHIFT)) + PG;
	struct mrmgr__itree *t;

	bare_open(&b);
	t = &b.c->tree;
	for (int i = 0; i < 10; i++)
		add(&b, i, BASE + 4 * PG * (uint64_t)i,
		    BASE + 4 * PG * (uint64_t)i + PG - 1);
	cr_assert_eq(t->count, 0, "all ten wait");
	cr_assert_not(mrmgr__itree_pending_empty(&b.c->lookup.pending));
	del(&b, 3); /* a waiting region leaves without touching the tree */
	cr_assert_eq(t->count, 0);
	add(&b, 10, BASE + 2 * huge, BASE + 3 * huge - 1);
	cr_assert(b.c->lookup.newest->partial);
	cr_assert(mrmgr__itree_pending_empty(&b.c->lookup.pending),
		  "a partial index leaves nothing waiting");
	cr_assert_eq(t->count, 10);
	cr_assert_eq(mrmgr__itree_check(t), 0);
	add(&b, 11, BASE + 100 * PG, BASE + 101 * PG - 1);
	cr_assert_eq(t->count, 11, "straight into the tree while partial");
	del(&b, 10);
	cr_assert_not(b.c->lookup.newest->partial);
	add(&b, 12, BASE + 200 * PG, BASE + 201 * PG - 1);
	cr_assert_eq(t->count, 10, "waits again");
	cr_assert_eq(mrmgr__cache_tree(b.c), t);
	cr_assert_eq(t->count, b.nlive);
	cr_assert(mrmgr__itree_pending_empty(&b.c->lookup.pending));
	cr_assert_eq(mrmgr__itree_check(t), 0);
	cr_assert_eq(b.c->seq % 2, 0, "the flush's write section closed");
	cr_assert_eq(b.c->seq, 2, "in one write section");
	bare_close(&b);
}

/* At most MRMGR__TREE_WAIT_MAX regions wait; past that the oldest go in. */
Test(lookup_near, waiting_is_bounded)
{
	struct bare b;
	size_t n = MRMGR__TREE_WAIT_MAX + 10;
	size_t rsz = (sizeof(struct mrmgr_region) + 127) & ~(size_t)127;
	struct mrmgr_region **reg = calloc(n, sizeof(*reg));

	cr_assert_not_null(reg);
	bare_open(&b);
	for (size_t i = 0; i < n; i++) {
		reg[i] = aligned_alloc(128, rsz);
		cr_assert_not_null(reg[i]);
		memset(reg[i], 0, rsz);
		reg[i]->node.start = BASE + 2 * PG * i;
		reg[i]->node.last = reg[i]->node.start + PG - 1;
		mrmgr__index_insert(b.c, reg[i]);
		cr_assert_leq(mrmgr__itree_pending_count(&b.c->lookup.pending),
			      MRMGR__TREE_WAIT_MAX);
	}
	cr_assert_eq(b.c->tree.count, 10, "the ten oldest went in");
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(mrmgr__itree_is_pending(&reg[i]->node), i >= 10);
	cr_assert_eq(mrmgr__itree_check(&b.c->tree), 0);
	/* A removal from either place; then the tree whole. */
	mrmgr__index_remove(b.c, reg[3]);
	mrmgr__index_remove(b.c, reg[n - 1]);
	cr_assert_eq(b.c->tree.count, 9);
	cr_assert_eq(mrmgr__cache_tree(b.c)->count, n - 2);
	cr_assert_eq(mrmgr__itree_check(&b.c->tree), 0);
	for (size_t i = 0; i < n; i++)
		if (i != 3 && i != n - 1)
			mrmgr__index_remove(b.c, reg[i]);
	cr_assert_eq(b.c->tree.count, 0);
	cr_assert_eq(b.c->lookup.used, 0);
	bare_close(&b);
	for (size_t i = 0; i < n; i++)
		free(reg[i]);
	free(reg);
}
