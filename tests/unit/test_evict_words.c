/*
 * What a miss and an eviction do to a region's reference words
 * (lib/core/region.c): publishing sets the keys and clears "not live" on
 * every stripe in one pass, an eviction's mark adds up the count of every
 * stripe as it marks it and puts everything back when a holder turns up,
 * and the ageing hand finds the used bits of every thread that ever had a
 * stripe.
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>

#include "helpers.h"

#include "cache.h"
#include "core.h"
#include "evict.h"

static const struct mrmgr_sim_attr nopin = {
	.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK,
	.flags = MRMGR_SIM_FLAG_NO_PIN,
	.memlock_bytes = UINT64_MAX,
};

static struct mrmgr_cache_attr limits(uint64_t max_regions)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_FLAGS,
		.max_regions = max_regions,
		.flags = MRMGR_CACHE_NO_MERGE,
	};

	return a;
}

/* Got and put back, and still cached: these tests read the region's
 * words afterwards, which an uncached region (no monitor source covered
 * it) no longer has after its put. */
static struct mrmgr_region *get_put(mrmgr_cache_t *c, void *p)
{
	uint64_t uncached = cstats(c).uncached;
	mrmgr_region_t *r;

	cr_assert_eq(mrmgr_get(c, p, 4 * KiB, RW, &r), 0);
	cr_assert_eq(cstats(c).uncached, uncached,
		     "the region was not cached (see the monitor's warning): "
		     "these tests need a cache that caches");
	mrmgr_put(r);
	return r;
}

/*
 * These tests take and drop references on every stripe, as threads of
 * every stripe would: every stripe given (region.h keeps the words of
 * the stripes given, and of stripe 0, only). Before the cache is made.
 */
static void every_stripe_given(void)
{
	__atomic_fetch_or(&mrmgr__stripes_seen, ~UINT64_C(0), __ATOMIC_SEQ_CST);
	__atomic_fetch_or(&mrmgr__stripes_joined, ~UINT64_C(0),
			  __ATOMIC_SEQ_CST);
}

/* Stripe s of r: live, keyed, with r's MR's keys. */
static void assert_live_keyed_on(struct mrmgr_region *r, unsigned int s)
{
	const uint64_t *w = mrmgr__ref_word(r, s);

	cr_assert_not(w[0] & MRMGR__REF_DEAD, "stripe %u live", s);
	cr_assert(w[0] & MRMGR__REF_KEYS, "stripe %u keyed", s);
	cr_assert_eq(w[1], (uint64_t)r->mr->rkey << 32 | r->mr->lkey,
		     "stripe %u has the MR's keys", s);
}

/* Every stripe of r: live, keyed, with r's MR's keys. */
static void assert_live_keyed(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t keys;

	cr_assert_not_null(r->mr, "the region has no MR");
	keys = (uint64_t)r->mr->rkey << 32 | r->mr->lkey;
	cr_assert_eq(mrmgr__region_state(r), MRMGR__REGION_LIVE);
	for (unsigned int i = 0; i < c->nstripes; i++) {
		const uint64_t *w = mrmgr__ref_word(r, i);

		cr_assert_not(w[0] & MRMGR__REF_DEAD, "stripe %u live", i);
		cr_assert(w[0] & MRMGR__REF_KEYS, "stripe %u keyed", i);
		cr_assert_eq(w[1], keys, "stripe %u has the MR's keys", i);
	}
}

Test(evict_words, published_region_is_live_and_keyed_on_every_stripe)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(1);
	char *buf = map_rw(4 * 64 * KiB, 0);
	struct mrmgr_region *r;

	every_stripe_given();
	fx_open(&f, &nopin, &a);
	cr_assert_geq(f.cache->nstripes, 2);
	r = get_put(f.cache, buf);
	assert_live_keyed(f.cache, r);
	/* Recycled for another range and MR: the words follow it. */
	cr_assert_eq(get_put(f.cache, buf + 2 * 64 * KiB), r);
	cr_assert_eq(cstats(f.cache).evictions, 1);
	assert_live_keyed(f.cache, r);
	fx_close(&f);
	munmap(buf, 4 * 64 * KiB);
}

/*
 * A reference on any one stripe keeps the region through an eviction
 * attempt, which leaves it live and keyed; a reference taken on one
 * stripe and dropped on another adds up to none: the region goes.
 */
Test(evict_words, eviction_counts_every_stripe_and_restores_a_held_region)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(4);
	char *buf = map_rw(2 * 64 * KiB, 0);
	struct mrmgr_cache *c;
	struct mrmgr_region *r;
	unsigned int n;

	every_stripe_given();
	fx_open(&f, &nopin, &a);
	c = f.cache;
	n = c->nstripes;
	for (unsigned int k = 0; k < n; k++) {
		uint64_t ev = cstats(c).evictions;

		r = get_put(c, buf);
		pthread_mutex_lock(&c->lock);
		mrmgr__ref_take(r, k);
		mrmgr__core_evict_all_idle(c);
		pthread_mutex_unlock(&c->lock);
		cr_assert_eq(cstats(c).evictions, ev, "held on stripe %u", k);
		assert_live_keyed(c, r);
		cr_assert_eq(get_put(c, buf), r, "still cached");

		pthread_mutex_lock(&c->lock);
		mrmgr__ref_drop(r, (k + 1) % n); /* another thread's put */
		mrmgr__core_evict_all_idle(c);
		pthread_mutex_unlock(&c->lock);
		cr_assert_eq(cstats(c).evictions, ev + 1, "idle, k %u", k);
		cr_assert_eq(cstats(c).regions, 0);
		cr_assert_eq(cstats(c).double_puts, 0);
	}
	fx_close(&f);
	munmap(buf, 2 * 64 * KiB);
}

/* The mark's sum: what every stripe held as it was marked; a put with no
 * get shows as a sum below zero, reported and undone. */
Test(evict_words, leave_adds_up_the_stripes_it_marks)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(4);
	char *buf = map_rw(2 * 64 * KiB, 0);
	struct mrmgr_cache *c;
	struct mrmgr_region *r;
	unsigned int n;
	uint64_t had;

	every_stripe_given();
	fx_open(&f, &nopin, &a);
	c = f.cache;
	n = c->nstripes;
	r = get_put(c, buf);
	pthread_mutex_lock(&c->lock);
	mrmgr__ref_take(r, n - 1);
	mrmgr__ref_take(r, n - 1);
	mrmgr__ref_take(r, 1);
	mrmgr__ref_drop(r, 0);
	cr_assert_eq(mrmgr__region_leave(r, MRMGR__REGION_EVICTING,
					 MRMGR__REF_KEYS, &had), 2);
	cr_assert(had & MRMGR__REF_KEYS);
	cr_assert_not(had & MRMGR__REF_DEAD);
	for (unsigned int i = 0; i < n; i++) {
		uint64_t w = *mrmgr__ref_word(r, i);

		cr_assert(w & MRMGR__REF_DEAD, "stripe %u marked", i);
		cr_assert_not(w & MRMGR__REF_KEYS, "stripe %u unkeyed", i);
	}
	mrmgr__region_go_live(r);
	assert_live_keyed(c, r);
	/* Three puts for the two gets left: one too many. */
	mrmgr__ref_drop(r, n - 1);
	mrmgr__ref_drop(r, n - 1);
	mrmgr__ref_drop(r, 1);
	cr_assert_eq(mrmgr__region_refs_fix(c, r,
					    mrmgr__region_leave(
						    r, MRMGR__REGION_EVICTING,
						    0, &had),
					    "testing"),
		     0);
	cr_assert_eq(c->st.double_puts, 1);
	cr_assert_eq(mrmgr__region_refs(r, n), 0, "the extra put undone");
	mrmgr__region_go_live(r);
	pthread_mutex_unlock(&c->lock);
	assert_live_keyed(c, r);
	fx_close(&f);
	munmap(buf, 2 * 64 * KiB);
}

struct hitter {
	mrmgr_cache_t *cache;
	char *p;
	unsigned int slot;
};

static void *hit_once(void *arg)
{
	struct hitter *h = arg;

	get_put(h->cache, h->p);
	h->slot = mrmgr__tls_slot;
	return NULL;
}

/*
 * The ageing hand reads only the stripes threads were given: a hit from
 * a second thread, which has exited since, is still found and cleared.
 */
Test(evict_words, ageing_finds_a_used_bit_of_a_thread_gone)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(4);
	char *buf = map_rw(2 * 64 * KiB, 0);
	struct hitter h;
	struct mrmgr_region *r;
	pthread_t t;
	unsigned int s;

	fx_open(&f, &nopin, &a);
	r = get_put(f.cache, buf);
	pthread_mutex_lock(&f.cache->lock);
	/* The miss's own mark, cleared: only the other thread's remains. */
	cr_assert(mrmgr__region_take_used(r, f.cache->nstripes));
	cr_assert_not(mrmgr__region_take_used(r, f.cache->nstripes));
	pthread_mutex_unlock(&f.cache->lock);
	h.cache = f.cache;
	h.p = buf;
	cr_assert_eq(pthread_create(&t, NULL, hit_once, &h), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	s = h.slot & (f.cache->nstripes - 1);
	cr_assert_neq(s, mrmgr__thread_slot() & (f.cache->nstripes - 1),
		      "the thread had a stripe of its own");
	cr_assert(*mrmgr__ref_word(r, s) & MRMGR__REF_USED);
	pthread_mutex_lock(&f.cache->lock);
	cr_assert(mrmgr__stripes_seen & (UINT64_C(1) << s));
	cr_assert(mrmgr__region_take_used(r, f.cache->nstripes),
		  "the hit on stripe %u is seen", s);
	cr_assert_not(*mrmgr__ref_word(r, s) & MRMGR__REF_USED);
	cr_assert_not(r->fresh, "the new mark is cleared with it");
	pthread_mutex_unlock(&f.cache->lock);
	fx_close(&f);
	munmap(buf, 2 * 64 * KiB);
}

/*
 * A stripe no thread was given keeps "not live" in every word (a miss
 * flips only the stripes given); a thread given it later joins at its
 * first get: its words of the live regions go live and keyed, and its
 * next get of a cached buffer is a hit on the inline path, no lock.
 */
Test(evict_words, a_stripe_given_later_joins_the_live_regions)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(4);
	char *buf = map_rw(2 * 64 * KiB, 0);
	struct mrmgr_region *r;
	struct hitter h;
	pthread_t t;
	unsigned int s, n;
	uint64_t hits;

	fx_open(&f, &nopin, &a);
	n = f.cache->nstripes;
	r = get_put(f.cache, buf);
	s = mrmgr__thread_slot() & (n - 1);
	for (unsigned int i = 0; i < n; i++) {
		int kept = i == 0 || i == s ||
			   (__atomic_load_n(&mrmgr__stripes_seen,
					    __ATOMIC_RELAXED) &
			    (UINT64_C(1) << i));
		uint64_t w = *mrmgr__ref_word(r, i);

		cr_assert_eq(!(w & MRMGR__REF_DEAD), kept,
			     "stripe %u: live only when given", i);
	}
	hits = cstats(f.cache).hits;
	h.cache = f.cache;
	h.p = buf;
	cr_assert_eq(pthread_create(&t, NULL, hit_once, &h), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	s = h.slot & (n - 1);
	cr_assert_eq(cstats(f.cache).hits, hits + 1, "the thread's get hit");
	cr_assert(mrmgr__stripes_joined & (UINT64_C(1) << s),
		  "stripe %u joined", s);
	assert_live_keyed_on(r, s);
	fx_close(&f);
	munmap(buf, 2 * 64 * KiB);
}

/* The cache's list, oldest first, as regions. */
static int lru_order(struct mrmgr_cache *c, struct mrmgr_region **out, int max)
{
	int n = 0;

	for (struct mrmgr__lru_link *l = c->lru.next; l != &c->lru && n < max;
	     l = l->next)
		out[n++] = mrmgr__container_of(l, struct mrmgr_region, lru);
	return n;
}

/*
 * The ageing hand sends a region hit since it last passed to the back,
 * but leaves one only made where it is: its place already says when it
 * was made, and moving it would make it look younger than the regions
 * made after it.
 */
Test(evict_words, ageing_moves_hit_regions_not_new_ones)
{
	struct fixture f;
	struct mrmgr_cache_attr a = limits(8);
	char *buf = map_rw(8 * 64 * KiB, 0);
	struct mrmgr_region *r[3], *order[8];
	struct mrmgr_cache *c;

	fx_open(&f, &nopin, &a);
	c = f.cache;
	for (int i = 0; i < 3; i++)
		r[i] = get_put(c, buf + (size_t)i * 2 * 64 * KiB);
	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < 3; i++) /* start from no marks at all */
		(void)mrmgr__region_take_used(r[i], c->nstripes);
	cr_assert_eq(lru_order(c, order, 8), 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(order[i], r[i]);

	/* Only made: the hand clears the mark and leaves it first. */
	r[0]->fresh = 1;
	c->age_hand = &r[0]->lru;
	mrmgr__evict_age(c);
	cr_assert_not(r[0]->fresh);
	cr_assert_eq(lru_order(c, order, 8), 3);
	cr_assert_eq(order[0], r[0], "a region only made keeps its place");
	cr_assert_eq(order[1], r[1]);
	cr_assert_eq(order[2], r[2]);

	/* Hit: to the back. */
	__atomic_fetch_or(mrmgr__ref_word(r[0], 0), MRMGR__REF_USED,
			  __ATOMIC_RELAXED);
	c->age_hand = &r[0]->lru;
	mrmgr__evict_age(c);
	cr_assert_not(*mrmgr__ref_word(r[0], 0) & MRMGR__REF_USED);
	cr_assert_eq(lru_order(c, order, 8), 3);
	cr_assert_eq(order[0], r[1]);
	cr_assert_eq(order[1], r[2]);
	cr_assert_eq(order[2], r[0], "a region hit goes to the back");
	pthread_mutex_unlock(&c->lock);
	fx_close(&f);
	munmap(buf, 8 * 64 * KiB);
}
