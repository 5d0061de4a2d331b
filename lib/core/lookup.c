/*
 * The lookup accelerator's writer side (see lookup.h for the design):
 * insert and remove a region's slots, grow the table, free it.
 *
 * All of it runs under the cache lock, inside the sequence-count write
 * section of the tree change it mirrors, so a reader that overlaps any of
 * it fails its sequence check. Stores a reader may see are single-copy
 * atomic; a new table is published with a release store.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache.h"
#include "hit.h"
#include "log.h"
#include "lookup.h"
#include "pool.h"

#define MIN_SLOTS 64

/*
 * Pages of 2^34 bytes at most: then a level (page shift + at most 28)
 * stays below 63 without a clamp. pack_range() leaves a region of larger
 * pages to the tree.
 */
#define MAX_PAGE_SHIFT 34

static inline unsigned int level_of(uint64_t pages, unsigned int page_shift)
{
	/* The least l >= page_shift with 2^(l - page_shift) >= pages, for
	 * 1 <= pages <= 2^28: the bit length of pages - 1, with no branch
	 * (every insert, removal and shifted slot asks). */
	uint64_t n = pages - 1;

	return page_shift + (64u - (unsigned int)__builtin_clzll(n | 1)) -
	       (n == 0);
}

/* Whether the index can hold a region, and its packed range. Inlined:
 * every insertion and removal asks, and as a call it cost a third of the
 * removal's own instructions. */
static inline __attribute__((always_inline)) int
pack_range(const struct mrmgr_region *r, unsigned int page_shift,
	   uint64_t *range, unsigned int *level)
{
	uint64_t first = r->node.start >> page_shift;
	uint64_t pages = ((r->node.last - r->node.start) >> page_shift) + 1;

	if (pages - 1 > MRMGR__LK_LEN_MASK || page_shift > MAX_PAGE_SHIFT ||
	    first >> (64 - MRMGR__LK_LEN_BITS) != 0 ||
	    ((uintptr_t)r & MRMGR__LK_TAG))
		return 0;
	*range = first << MRMGR__LK_LEN_BITS | (pages - 1);
	*level = level_of(pages, page_shift);
	return 1;
}

static size_t table_bytes(uint64_t slots)
{
	return sizeof(struct mrmgr__lk_table) +
	       slots * sizeof(struct mrmgr__lk_slot);
}

static struct mrmgr__lk_table *table_new(uint64_t slots,
					 unsigned int page_shift)
{
	struct mrmgr__lk_table *t = mrmgr__pool_alloc(table_bytes(slots), 1);

	if (!t)
		return NULL;
	/* Fresh memory is zero: every slot empty. */
	t->mask = slots - 1;
	t->page_shift = page_shift;
	return t;
}

/*
 * The near filter's counter of (level, granule): granules side by side
 * share a cache line (a miss asks about three of them); levels start
 * apart.
 */
static uint8_t *near_count(const struct mrmgr__lookup *lk, unsigned int level,
			   uint64_t granule)
{
	return &lk->near[(granule + level * UINT64_C(0x9E3779B9)) &
			 lk->near_mask];
}

/* Many granules folded onto one counter: the chains alone until the
 * next table. */
static __attribute__((noinline, cold)) void near_drop(struct mrmgr__lookup *lk)
{
	mrmgr__pool_free(lk->near, lk->near_mask + 1);
	lk->near = NULL;
}

/* Inlined, as near_sub(): every insertion and removal asks twice. */
static inline __attribute__((always_inline)) void
near_add(struct mrmgr__lookup *lk, unsigned int level, uint64_t granule)
{
	uint8_t *n;

	if (!lk->near)
		return;
	n = near_count(lk, level, granule);
	if (mrmgr__unlikely(++*n == 0))
		near_drop(lk);
}

static inline __attribute__((always_inline)) void
near_sub(struct mrmgr__lookup *lk, unsigned int level, uint64_t granule)
{
	if (lk->near)
		--*near_count(lk, level, granule);
}

/* Put (range, rp) in the first empty slot of its chain. */
static void slot_put(struct mrmgr__lk_table *t, unsigned int level,
		     uint64_t granule, uint64_t range, uint64_t rp)
{
	uint64_t mask = t->mask;
	uint64_t i = mrmgr__lk_home(level, granule) & mask;

	while (t->slot[i].rp)
		i = (i + 1) & mask;
	MRMGR__WRITE_ONCE(t->slot[i].range, range);
	MRMGR__WRITE_ONCE(t->slot[i].rp, rp);
}

/* The level and granule a filled slot (range, rp) is entered under, from
 * what it holds: its region's first or (TAG_LAST) last page. Inlined: a
 * removal asks for every slot it may shift. */
static inline __attribute__((always_inline)) uint64_t
granule_of(uint64_t range, uint64_t rp, unsigned int page_shift,
	   unsigned int *level)
{
	uint64_t first = range >> MRMGR__LK_LEN_BITS;
	uint64_t n = range & MRMGR__LK_LEN_MASK; /* pages - 1 */
	unsigned int l = level_of(n + 1, page_shift);
	uint64_t at = rp & MRMGR__LK_TAG_LAST ? first + n : first;

	*level = l;
	return (at << page_shift) >> l;
}

/* Twice the slots, everything rehashed; the old table is retired. */
static int grow(struct mrmgr_cache *c)
{
	struct mrmgr__lk_table *old = c->lookup.newest;
	struct mrmgr__lk_table *t = table_new(old ? 2 * (old->mask + 1)
						  : MIN_SLOTS,
					      c->page_shift);

	if (!t)
		return 0;
	/* A filter to match, rebuilt below; without one, the chains. */
	mrmgr__pool_free(c->lookup.near, c->lookup.near_mask + 1);
	c->lookup.near_mask = 4 * (t->mask + 1) - 1;
	c->lookup.near = mrmgr__pool_alloc(c->lookup.near_mask + 1, 0);
	if (old) {
		for (uint64_t i = 0; i <= old->mask; i++) {
			const struct mrmgr__lk_slot *s = &old->slot[i];
			unsigned int l;
			uint64_t g;

			if (!s->rp)
				continue;
			g = granule_of(s->range, s->rp, c->page_shift, &l);
			slot_put(t, l, g, s->range, s->rp);
			near_add(&c->lookup, l, g);
		}
		t->levels = old->levels;
		t->partial = old->partial;
		t->retired = old;
	}
	c->lookup.newest = t;
	/* Fields first, then the pointer: a reader that finds the table
	 * finds it filled. */
	__atomic_store_n(&c->lk, t, __ATOMIC_RELEASE);
	return 1;
}

/* Stop using the index: hits walk the tree from now on. */
static void give_up(struct mrmgr_cache *c, const char *why)
{
	if (!c->lookup.broken)
		mrmgr__warn("lookup index disabled (%s): hits walk the tree",
			    why);
	c->lookup.broken = 1;
	__atomic_store_n(&c->lk, NULL, __ATOMIC_RELEASE);
}

/* The body of mrmgr__lookup_insert(), inlined into mrmgr__index_insert()
 * too: one call per miss instead of two. */
static inline __attribute__((always_inline)) void
lk_insert(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t range, tag, first, lastp;
	unsigned int l;
	struct mrmgr__lk_table *t;

	if (c->lookup.broken)
		return;
	if (!pack_range(r, c->page_shift, &range, &l)) {
		t = c->lookup.newest;
		if (!t && !grow(c)) {
			give_up(c, "out of memory");
			return;
		}
		c->lookup.unindexed++;
		MRMGR__WRITE_ONCE(c->lookup.newest->partial, 1);
		return;
	}
	first = r->node.start >> l;
	lastp = r->node.last >> l;
	t = c->lookup.newest;
	/* At most 3/8 full after this insertion: chains stay short enough
	 * for the inline hit path's few probes. */
	while (!t || 8 * (c->lookup.used + 2) > 3 * (t->mask + 1)) {
		if (!grow(c)) {
			give_up(c, "out of memory");
			return;
		}
		t = c->lookup.newest;
	}
	tag = mrmgr__lk_access_tag(r->access);
	if (lastp != first) /* its line loads while the first chain is read */
		__builtin_prefetch(&t->slot[mrmgr__lk_home(l, lastp) & t->mask],
				   1);
	slot_put(t, l, first, range, (uintptr_t)r | tag);
	near_add(&c->lookup, l, first);
	c->lookup.used++;
	if (lastp != first) {
		slot_put(t, l, lastp, range,
			 (uintptr_t)r | tag | MRMGR__LK_TAG_LAST);
		near_add(&c->lookup, l, lastp);
		c->lookup.used++;
	}
	if (c->lookup.level_count[l]++ == 0)
		MRMGR__WRITE_ONCE(t->levels, t->levels | UINT64_C(1) << l);
}

/*
 * Remove the slot whose region is want from the chain starting at home i,
 * shifting later slots of the cluster back into the hole (linear
 * probing's deletion): a slot moves unless its own home lies cyclically
 * in (hole, slot]. 0: not found. Locals for the table's fields: the
 * stores are volatile, so the compiler would load them again per slot.
 */
static inline __attribute__((always_inline)) int
slot_del(struct mrmgr__lk_slot *slot, uint64_t mask, unsigned int page_shift,
	 uint64_t i, uint64_t want)
{
	for (;; i = (i + 1) & mask) {
		uint64_t rp = slot[i].rp;

		if (!rp)
			return 0;
		if ((rp & ~(uint64_t)MRMGR__LK_TAG) == want)
			break;
	}
	for (uint64_t j = i;;) {
		uint64_t rp, range, k;
		unsigned int l;

		j = (j + 1) & mask;
		rp = slot[j].rp;
		if (!rp)
			break;
		range = slot[j].range;
		k = mrmgr__lk_home(l, granule_of(range, rp, page_shift, &l)) &
		    mask;
		if (((k - i - 1) & mask) < ((j - i) & mask))
			continue; /* its home is in (i, j]: stays */
		MRMGR__WRITE_ONCE(slot[i].range, range);
		MRMGR__WRITE_ONCE(slot[i].rp, rp);
		i = j;
	}
	MRMGR__WRITE_ONCE(slot[i].rp, 0);
	MRMGR__WRITE_ONCE(slot[i].range, 0);
	return 1;
}

/* The body of mrmgr__lookup_remove() (see lk_insert()). */
static inline __attribute__((always_inline)) void
lk_remove(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__lk_table *t = c->lookup.newest;
	uint64_t range, g0, g1, h1 = 0, mask;
	unsigned int l;
	int ok;

	if (c->lookup.broken)
		return;
	if (!pack_range(r, c->page_shift, &range, &l)) {
		if (--c->lookup.unindexed == 0)
			MRMGR__WRITE_ONCE(t->partial, 0);
		return;
	}
	g0 = r->node.start >> l;
	g1 = r->node.last >> l;
	/*
	 * Not finding a slot would mean r's range changed while it was in
	 * the tree; then its old slots may still name it, so the index
	 * cannot be trusted any more.
	 */
	ok = t != NULL;
	if (ok) {
		mask = t->mask;
		/* The second chain and the filter's line load while the
		 * first chain is walked (an evicted region's are cold). */
		if (g1 != g0) {
			h1 = mrmgr__lk_home(l, g1) & mask;
			__builtin_prefetch(&t->slot[h1], 1);
		}
		if (c->lookup.near)
			__builtin_prefetch(near_count(&c->lookup, l, g0), 1);
		ok = slot_del(t->slot, mask, t->page_shift,
			      mrmgr__lk_home(l, g0) & mask, (uintptr_t)r);
	}
	if (ok) {
		near_sub(&c->lookup, l, g0);
		c->lookup.used--;
		if (g1 != g0) {
			ok = slot_del(t->slot, mask, t->page_shift, h1,
				      (uintptr_t)r);
			near_sub(&c->lookup, l, g1);
			c->lookup.used--;
		}
	}
	if (!ok) {
		mrmgr__err("lookup index out of step with the tree at "
			   "[%#llx, %#llx]",
			   (unsigned long long)r->node.start,
			   (unsigned long long)r->node.last);
		give_up(c, "inconsistent");
		return;
	}
	if (--c->lookup.level_count[l] == 0)
		MRMGR__WRITE_ONCE(t->levels, t->levels & ~(UINT64_C(1) << l));
}

void mrmgr__lookup_insert(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	lk_insert(c, r);
}

void mrmgr__lookup_remove(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	lk_remove(c, r);
}

/* Whether the table holds every cached region (see mrmgr__index_insert()). */
static int holds_all(const struct mrmgr_cache *c)
{
	return !c->lookup.broken && c->lookup.newest &&
	       !c->lookup.newest->partial;
}

void mrmgr__index_insert(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	lk_insert(c, r);
	if (mrmgr__likely(holds_all(c))) {
		if (mrmgr__unlikely(mrmgr__itree_pending_count(
					    &c->lookup.pending) >=
				    MRMGR__TREE_WAIT_MAX))
			mrmgr__itree_flush_to(&c->tree, &c->lookup.pending,
					      MRMGR__TREE_WAIT_MAX - 1);
		mrmgr__itree_defer(&c->lookup.pending, &r->node);
		return;
	}
	/* Readers may walk the tree from now on: it must be whole. */
	mrmgr__itree_flush(&c->tree, &c->lookup.pending);
	mrmgr__itree_insert(&c->tree, &r->node);
}

void mrmgr__index_remove(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	lk_remove(c, r);
	mrmgr__itree_remove(&c->tree, &r->node); /* waiting or not */
	if (mrmgr__unlikely(!holds_all(c)))
		mrmgr__itree_flush(&c->tree, &c->lookup.pending);
}

struct mrmgr__itree *mrmgr__cache_tree(struct mrmgr_cache *c)
{
	if (!mrmgr__itree_pending_empty(&c->lookup.pending)) {
		/* Nested in the caller's write section, or one of its own:
		 * the tree changes only inside one. */
		int open = !(c->seq & 1);

		if (open)
			mrmgr__seq_write_begin(c);
		mrmgr__itree_flush(&c->tree, &c->lookup.pending);
		if (open)
			mrmgr__seq_write_end(c);
	}
	return &c->tree;
}

/*
 * Chains mrmgr__lookup_near() reads at most before it leaves the answer
 * to the tree: a chain is one or two cache lines of slots, a tree walk
 * some ten cold nodes at a thousand regions.
 */
#define NEAR_CHAINS 8

/*
 * A region at level L is at most 2^L bytes long, so its first and last
 * granule (2^L-aligned blocks) are equal or adjacent. If it overlaps
 * [qs, ql], one of them lies among the granules qs >> L .. ql >> L:
 * its first byte does when it is in the range; else it starts before
 * qs, and its last byte is in the range, or past ql with the whole
 * range inside it, when qs and ql share a granule with one of its ends
 * (granules first..last are at most two). Every indexed region sits in
 * the chains of both its granules, so reading those chains at each level
 * in use finds every indexed region that overlaps. Chains of other
 * levels (the hash leaves the level out) only add slots to check.
 *
 * Regions are page-aligned (region.h), so page numbers decide overlap
 * exactly: region pages [sp, sp + n] overlap the bytes when
 * sp <= ql >> shift and sp + n >= qs >> shift.
 */
/* Whether the chain from home holds a region overlapping pages
 * [qsp, qlp]. */
static int chain_overlaps(const struct mrmgr__lk_table *t, uint64_t i,
			  uint64_t qsp, uint64_t qlp)
{
	for (;; i++) {
		const struct mrmgr__lk_slot *s = &t->slot[i & t->mask];
		uint64_t sp = s->range >> MRMGR__LK_LEN_BITS;

		/* At most 3/8 full: a chain ends. */
		if (!s->rp)
			return 0;
		if (sp <= qlp && sp + (s->range & MRMGR__LK_LEN_MASK) >= qsp)
			return 1;
	}
}

enum mrmgr__lk_near mrmgr__lookup_near(const struct mrmgr_cache *c,
				       uint64_t qs, uint64_t ql)
{
	const struct mrmgr__lk_table *t = c->lookup.newest;
	const uint8_t *filter = c->lookup.near;
	uint64_t levels, chains = 0, qsp, qlp;

	/* Not held, or not all held: only the tree knows. */
	if (c->lookup.broken || !t || t->partial)
		return MRMGR__LK_ASK_TREE;
	qsp = qs >> t->page_shift;
	qlp = ql >> t->page_shift;
	for (levels = t->levels; levels; levels &= levels - 1) {
		unsigned int l = (unsigned int)__builtin_ctzll(levels);
		uint64_t g = qs >> l, d = (ql >> l) - g;

		/* Past the budget, a region found already is still one. */
		if (d >= NEAR_CHAINS || (chains += d + 1) > NEAR_CHAINS)
			return MRMGR__LK_ASK_TREE;
		for (d += g;; g++) {
			/* No slot of this granule: its chain holds none of
			 * the regions sought. */
			if ((!filter || *near_count(&c->lookup, l, g)) &&
			    chain_overlaps(t, mrmgr__lk_home(l, g), qsp, qlp))
				return MRMGR__LK_SOME;
			if (g == d)
				break;
		}
	}
	return MRMGR__LK_NONE;
}

void mrmgr__lookup_clear(struct mrmgr_cache *c)
{
	struct mrmgr__lk_table *t = c->lookup.newest;

	if (t) {
		for (uint64_t i = 0; i <= t->mask; i++) {
			MRMGR__WRITE_ONCE(t->slot[i].rp, 0);
			MRMGR__WRITE_ONCE(t->slot[i].range, 0);
		}
		MRMGR__WRITE_ONCE(t->levels, 0);
		MRMGR__WRITE_ONCE(t->partial, 0);
	}
	if (c->lookup.near)
		memset(c->lookup.near, 0, c->lookup.near_mask + 1);
	mrmgr__itree_pending_clear(&c->lookup.pending);
	c->lookup.used = 0;
	c->lookup.unindexed = 0;
	memset(c->lookup.level_count, 0, sizeof(c->lookup.level_count));
}

void mrmgr__lookup_fini(struct mrmgr_cache *c)
{
	struct mrmgr__lk_table *t = c->lookup.newest;

	while (t) {
		struct mrmgr__lk_table *next = t->retired;

		mrmgr__pool_free(t, table_bytes(t->mask + 1));
		t = next;
	}
	c->lk = NULL;
	c->lookup.newest = NULL;
	mrmgr__pool_free(c->lookup.near, c->lookup.near_mask + 1);
	c->lookup.near = NULL;
}
