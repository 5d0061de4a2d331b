/*
 * The hit path's lookup accelerator: a hash index of the cached regions
 * in front of the interval tree, so that a hit reads one or two cache
 * lines of index instead of walking O(log n) tree nodes.
 *
 * Keys. A region of len bytes has a level L = log2 of len rounded up to a
 * power of two (at least a page). It is indexed under the granules of
 * size 2^L that hold its first and its last byte: one or two slots, as a
 * region no longer than 2^L touches at most two such granules. A request
 * starting at address a is contained only by regions that overlap a's
 * granule at their level, so a lookup probes, for each level in use
 * (a bit mask, usually one or a few bits), the chain of slots for
 * (L, a >> L).
 *
 * Slots. Open addressing with linear probing, 16-byte slots (four to a
 * cache line), at most 3/8 full; deletion shifts later slots back
 * (no tombstones). A slot packs the region's first page and page count
 * (36 + 28 bits) in one word and the region pointer with its access bits
 * and which of its granules the slot is for in the other (in the pointer's
 * low 7 bits: regions are 128-byte aligned), so a lookup checks
 * containment and access without touching the region. Regions that do
 * not fit (over 2^28 pages, or addresses above 2^36 pages) are not
 * indexed; while any exist, a lookup that finds nothing falls back to the
 * tree.
 *
 * Concurrency. The index is the tree's shadow: changed only by the cache
 * lock's holder, inside the same sequence-count write section as the
 * tree change it mirrors, and read without a lock by hits that validate
 * what they found with that sequence count (hit.h). Readers load slots
 * with single-copy-atomic loads and may see torn or shifting chains; a
 * slot's region pointer is always NULL or a region of this cache (region
 * memory is type-stable), so a reader never touches freed memory, and the
 * sequence check rejects whatever it made of a torn view. A resized table
 * is swapped in inside a write section; old tables stay readable until
 * the cache is destroyed (each is at most half the size of the next, so
 * they add at most the current table's size).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__LOOKUP_H
#define MRMGR__LOOKUP_H

#include <stdint.h>

#include "compiler.h"
#include "itree.h"

struct mrmgr_region;

#define MRMGR__LK_LEN_BITS 28
#define MRMGR__LK_LEN_MASK ((UINT64_C(1) << MRMGR__LK_LEN_BITS) - 1)
#define MRMGR__LK_TAG 0x7f      /* low bits of rp that are not the pointer */
#define MRMGR__LK_TAG_LAST 0x40 /* the slot is for the last granule */
#define MRMGR__LK_TAG_ACCESS 0x3f

struct mrmgr__lk_slot {
	uint64_t range; /* first page << 28 | (pages - 1) */
	uint64_t rp;    /* region | tag; 0: empty */
};

struct mrmgr__lk_table {
	_Alignas(MRMGR__CACHELINE) uint64_t mask; /* slots - 1 */
	uint64_t levels;                          /* bit L: a region at level L */
	unsigned int page_shift;
	unsigned int partial;                     /* regions are not indexed */
	struct mrmgr__lk_table *retired;          /* older tables (writer) */
	_Alignas(MRMGR__CACHELINE) struct mrmgr__lk_slot slot[];
};

/* Writer-side state, under the cache lock. */
struct mrmgr__lookup {
	struct mrmgr__lk_table *newest; /* newest table; older ones chained */
	uint64_t used;            /* slots in use */
	uint64_t unindexed;       /* cached regions the index does not hold */
	uint32_t level_count[64]; /* regions per level */
	int broken;               /* out of memory once: tree only from now */
	/* Slots per (level, granule) folded 4 x slots ways, so a miss can
	 * see that the chains near its range are empty in one cache line
	 * (mrmgr__lookup_near); NULL: not kept (out of memory, or a count
	 * overflowed) until the next table. */
	uint8_t *near;
	uint64_t near_mask;
	/* Regions published while the index held every region, not yet in
	 * the tree (mrmgr__index_insert()). */
	struct mrmgr__itree_pending pending;
};

/* IBV access bits as the 6 tag bits: bits 0-4 as they are, bit 20
 * (IBV_ACCESS_RELAXED_ORDERING) as bit 5; the others must be clear. */
static inline uint64_t mrmgr__lk_access_tag(unsigned int access)
{
	return (access | access >> 15) & MRMGR__LK_TAG_ACCESS;
}

/*
 * Home slot (unmasked) of granule (address >> level) at level. The level
 * is left out: granules of one address at two levels differ anyway.
 */
static inline uint64_t mrmgr__lk_home(unsigned int level, uint64_t granule)
{
	(void)level;
	/* Fibonacci hashing takes the product's top bits; byte-swapped,
	 * they are the low bits the caller masks (one instruction, no
	 * shift by a variable). */
	return __builtin_bswap64(granule * UINT64_C(0x9E3779B97F4A7C15));
}

/*
 * A region that contains pages [first, last] of the request starting at
 * address start, with every tag bit of need; NULL when the index holds
 * none. Lock-free: the caller validates the answer (see above).
 */
static inline struct mrmgr_region *
mrmgr__lookup_find(const struct mrmgr__lk_table *t, uint64_t start,
		   uint64_t first, uint64_t last, uint64_t need)
{
	uint64_t mask = t->mask; /* set before the table was published */
	uint64_t levels = MRMGR__READ_ONCE(t->levels);

	while (levels) {
		unsigned int l = (unsigned int)__builtin_ctzll(levels);
		uint64_t i = mrmgr__lk_home(l, start >> l);

		levels &= levels - 1;
		for (uint64_t n = 0; n <= mask; n++, i++) {
			const struct mrmgr__lk_slot *s = &t->slot[i & mask];
			uint64_t rp = MRMGR__READ_ONCE(s->rp);
			uint64_t range = MRMGR__READ_ONCE(s->range);
			uint64_t sp = range >> MRMGR__LK_LEN_BITS;

			if (!rp)
				break;
			if (sp <= first &&
			    last - sp <= (range & MRMGR__LK_LEN_MASK) &&
			    (rp & need) == need)
				return (struct mrmgr_region *)(uintptr_t)(
					rp & ~(uint64_t)MRMGR__LK_TAG);
		}
	}
	return NULL;
}

/*
 * mrmgr__lookup_find() for the inline hit path: the same answer or not
 * one, probing at most MRMGR__LK_FAST_PROBES slots of the lowest level in
 * use (a chain at most 3/8 full is rarely longer). NULL: that level's
 * chain ended without a match, which is lookup_find()'s answer too when
 * it is the only level (a miss then need not be looked up again);
 * MRMGR__LK_UNSURE: the probes ran out. Either sends the caller to the
 * full lookup.
 */
#define MRMGR__LK_FAST_PROBES 4
#define MRMGR__LK_UNSURE ((struct mrmgr_region *)(uintptr_t)1)
static inline struct mrmgr_region *
mrmgr__lookup_fast(const struct mrmgr__lk_table *t, uint64_t start,
		   uint64_t first, uint64_t last, uint64_t need)
{
	uint64_t levels = MRMGR__READ_ONCE(t->levels);
	unsigned int l = (unsigned int)__builtin_ctzll(levels | (UINT64_C(1) << 63));
	uint64_t i = mrmgr__lk_home(l, start >> l);

	for (unsigned int n = 0; n < MRMGR__LK_FAST_PROBES; n++, i++) {
		const struct mrmgr__lk_slot *s = &t->slot[i & t->mask];
		uint64_t rp = MRMGR__READ_ONCE(s->rp);
		uint64_t range = MRMGR__READ_ONCE(s->range);
		uint64_t sp = range >> MRMGR__LK_LEN_BITS;

		if (!rp)
			return NULL;
		if (sp <= first &&
		    last - sp <= (range & MRMGR__LK_LEN_MASK) &&
		    (rp & need) == need) {
			rp &= ~(uint64_t)MRMGR__LK_TAG;
			if (!rp) /* a filled slot names a region */
				__builtin_unreachable();
			return (struct mrmgr_region *)(uintptr_t)rp;
		}
	}
	return MRMGR__LK_UNSURE;
}

/*
 * After mrmgr__lookup_fast() answered NULL: whether that is the whole
 * index's answer (one level in use, every region indexed). Unvalidated,
 * like the lookup: the caller checks the sequence count after it.
 */
static inline int mrmgr__lookup_fast_whole(const struct mrmgr__lk_table *t)
{
	uint64_t levels = MRMGR__READ_ONCE(t->levels);

	return !(levels & (levels - 1)) && !MRMGR__READ_ONCE(t->partial);
}

struct mrmgr_cache;

/*
 * Writer side, with the cache lock held and inside the sequence-count
 * write section of the tree change they mirror.
 */
/* r was inserted into the tree. */
void mrmgr__lookup_insert(struct mrmgr_cache *c, struct mrmgr_region *r);
/* r is being removed from the tree. */
void mrmgr__lookup_remove(struct mrmgr_cache *c, struct mrmgr_region *r);
/*
 * Forget every region at once (the tree is emptied the same way, as in a
 * fork child): the index is emptied in place, allocating nothing.
 */
void mrmgr__lookup_clear(struct mrmgr_cache *c);
/* Free every table (cache destruction, no readers left). */
void mrmgr__lookup_fini(struct mrmgr_cache *c);

/*
 * The cache's index as a whole: the tree and the table above. A region
 * joins the table at once and the tree lazily: while the table holds
 * every cached region (not broken, not partial), no lock-free reader
 * reads the tree, and the usual miss asks only the table
 * (mrmgr__lookup_near()), so a new region waits on c->lookup.pending and
 * enters the tree when a writer next needs the tree (mrmgr__cache_tree()).
 * A region evicted before that never touches the tree: under churn, the
 * tree's O(log n) cold nodes per insertion and removal are not paid.
 * Invariant: nothing waits while the table does not hold every region, so
 * the tree that lock-free readers fall back to (get.c) is whole; the
 * write section that makes the table partial or broken flushes the wait.
 *
 * Both in the sequence-count write section of the change, lock held.
 */
void mrmgr__index_insert(struct mrmgr_cache *c, struct mrmgr_region *r);

/*
 * At most this many regions wait for the tree, the oldest going in first:
 * so the query that needs the tree inserts at most as many at once. Each
 * insertion walks the tree's cold nodes; 1,024 of them took 0.14-0.4 ms
 * into a tree of 4,000 regions and 0.7-1.5 ms into one of 100,000 (warm
 * to cold caches), 4,096 took 3.4-4.6 ms there. A cache of more regions
 * than this pays the tree only for those that outlive as many
 * publications.
 */
#define MRMGR__TREE_WAIT_MAX 1024
void mrmgr__index_remove(struct mrmgr_cache *c, struct mrmgr_region *r);

/*
 * The cache's interval tree with every cached region in it: writers call
 * this (lock held) for each tree query. Flushes what waits, in a write
 * section of its own unless the caller is in one.
 */
struct mrmgr__itree *mrmgr__cache_tree(struct mrmgr_cache *c);

/* mrmgr__lookup_near()'s answers. */
enum mrmgr__lk_near {
	MRMGR__LK_NONE,     /* no cached region overlaps the range */
	MRMGR__LK_SOME,     /* an indexed region overlaps it */
	MRMGR__LK_ASK_TREE, /* the index cannot say: walk the tree */
};

/*
 * Whether a cached region overlaps the byte range [qs, ql], from the
 * index alone: a miss asks before its tree walk, as the usual miss has
 * nothing there. Writer side (cache lock held); reads a few chains.
 */
enum mrmgr__lk_near mrmgr__lookup_near(const struct mrmgr_cache *c,
				       uint64_t qs, uint64_t ql);

#endif /* MRMGR__LOOKUP_H */
