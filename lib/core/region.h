/*
 * The region object: one registered range, its MR, its state and its
 * reference count.
 *
 * The reference count is striped: each thread adds and drops references
 * on the stripe of its own slot, so threads hitting the same region never
 * write the same cache line. A region's true count is the sum of its
 * stripes; only the slow paths (eviction, invalidation, a put on a
 * detached region) add them up.
 *
 * A stripe is one 64-bit reference word: whether the region is live and
 * the LRU's "used" bit in the low byte, the count above (biased, so it may
 * go below zero when another slot's thread puts). The words do not live in the region:
 * regions are carved from 2 MiB slabs that keep, per stripe, an array of
 * the words of all their regions (each beside a copy of the MR's keys:
 * 16-byte entries). So a thread's words of four regions share a cache
 * line that only that thread writes, a hit or a put touches 8 bytes of
 * the region's memory (not a line, nor the region itself), a key read
 * after it the 8 beside them, and a thread's entries of 100,000 regions
 * fit in 1.6 MB. The word's address
 * follows from the region's address and the slab's first line.
 *
 * Region memory is type-stable: a released region goes back to its cache's
 * free list and is only freed when the cache is destroyed, so a lock-free
 * reader holding a stale pointer still reads a region (and notices, through
 * the cache's sequence count, that it was not the one it looked for).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__REGION_H
#define MRMGR__REGION_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include "compiler.h"
#include "core.h"
#include "itree.h"
#include "monitor.h"

struct mrmgr_cache;

/* States of a region: core.h. */

/* Kinds and flags of a region: core.h (features read them). */

/*
 * A reference word: bit 0 "not live" (the region's state is not
 * MRMGR__REGION_LIVE), bit 1 "keys" (the word after it holds the MR's
 * lkey and rkey, see mrmgr__region_set_keys()), bit 2 unused (it was
 * "new", which only the lock's holder sets and clears: a field of the
 * region now, struct mrmgr_region's fresh), bit 3 "used" (set by hits,
 * cleared by the LRU hand), bits 8-63 the count plus a bias of
 * 2^63 (the count moves in steps of MRMGR__REF_ONE and never reaches the
 * low byte).
 *
 * Each word is the first half of a 16-byte entry; the second half holds
 * a copy of the region's keys, written by the lock's holder whenever the
 * MR is made or changed. A caller that reads a key after a hit reads it
 * from the line the hit just wrote, not from the region or the MR (two
 * more cache misses per hit when the regions are many).
 */
#define MRMGR__REF_DEAD UINT64_C(1)
#define MRMGR__REF_KEYS UINT64_C(2)
#define MRMGR__REF_USED UINT64_C(8)
#define MRMGR__REF_ONE UINT64_C(256)
#define MRMGR__REF_BIAS (UINT64_C(1) << 63)

/*
 * A slab of regions: this header (padded to a region's size), then
 * mrmgr__layout.per_slab regions of MRMGR__REGION_SIZE bytes, then one
 * array of reference words per stripe. Aligned to its size, so a region
 * finds its slab by masking. The layout is the same for every slab of
 * every cache of the process.
 */
#define MRMGR__SLAB_SIZE ((uintptr_t)2 << 20)
struct mrmgr__region_slab {
	struct mrmgr__region_slab *next;
	uint32_t used;
};

/* Process-wide constants, set once by mrmgr__layout_init(). */
struct mrmgr__layout {
	unsigned int nstripes; /* stripes per region, a power of two */
	uint32_t per_slab;     /* regions per slab */
	uintptr_t words;       /* offset in a slab of stripe 0's words */
	uintptr_t stride;      /* bytes from one stripe's words to the next */
};
extern struct mrmgr__layout mrmgr__layout;

/*
 * Bit i: stripe i was given to a thread at some time (it only grows).
 * Only such stripes' words, and stripe 0's (check.c undoes extra puts
 * there), can hold a count or a USED or NEW bit. So the state bits are
 * flipped only on those stripes (mrmgr__region_set_state() and the
 * rest, which load the mask under the cache's lock), and a stripe never
 * given keeps DEAD in every word: a miss pays one read-modify-write per
 * thread that ever ran, not one per stripe (64 on a large machine).
 *
 * A stripe given for the first time joins: its thread, at its next get
 * (mrmgr__stripe_join(), fork.c), flips its words of every live region
 * of every cache, under each cache's lock. Until then its hits find DEAD
 * and take the slow path (correct, only slower); a region made live
 * after its bit was set (the mask is loaded under the lock the join
 * takes too) is flipped by whoever makes it live.
 */
extern uint64_t mrmgr__stripes_seen;

/* The stripes whose words are kept: mrmgr__stripes_seen and stripe 0,
 * of n. */
static inline uint64_t mrmgr__stripes_kept(unsigned int n)
{
	uint64_t m = __atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_ACQUIRE) |
		     1;

	return n < 64 ? m & ((UINT64_C(1) << n) - 1) : m;
}

/*
 * stripes.c: bit i: every thread given stripe i has ended since (never
 * stripe 0). Its words still count in every pass until fork.c retires
 * it (mrmgr__stripe_retire_tick()): each region's count and marks there
 * are moved to stripe 0, its words left DEAD, and its bits cleared in
 * mrmgr__stripes_seen and mrmgr__stripes_joined, so that a thread given
 * it later joins as the first one did.
 */
extern uint64_t mrmgr__stripes_orphan;

/* stripes.c, for that retirement (every cache's lock held): no thread
 * holds or may take a slot of stripe s until mrmgr__stripe_unreserve(s).
 * 0: one does, or a thread past the slots shares it; nothing reserved. */
int mrmgr__stripe_reserve(unsigned int s);
void mrmgr__stripe_unreserve(unsigned int s);

/* fork.c: a get off the fast path while a stripe is an orphan; now and
 * then, when every cache's lock is free, retires the orphans. No cache
 * lock held. */
void mrmgr__stripe_retire_tick(void);
extern uint64_t mrmgr__stripes_retired; /* how many times, for tests */

/* region.c: c's part of it (c's lock held, s reserved): every region's
 * count and marks on stripe s move to stripe 0; its words go DEAD. */
void mrmgr__region_stripe_retire(struct mrmgr_cache *c, unsigned int s);

/* Bit i: stripe i joined every cache that existed then (fork.c). */
extern uint64_t mrmgr__stripes_joined;

/* Stripe + 1 the calling thread was given and found not joined yet (see
 * mrmgr__stripes_seen); 0: none. */
extern __thread unsigned int mrmgr__tls_join
	__attribute__((tls_model("initial-exec")));

/* fork.c: the calling thread's stripe joins every cache it can lock now
 * (mrmgr__tls_join cleared once all did). No cache lock held. */
void mrmgr__stripe_join(void);

/* A cache's part of it, the cache's lock held. */
void mrmgr__region_stripe_join(struct mrmgr_cache *c, unsigned int s);

/* Intrusive LRU list link; the cache's list head is one too. */
struct mrmgr__lru_link {
	struct mrmgr__lru_link *prev, *next;
};

struct mrmgr_region {
	struct mrmgr__itree_node node; /* [start, last], page-aligned */
	struct mrmgr_cache *cache;
	struct ibv_mr *mr;
	unsigned int access;
	int state;                     /* enum mrmgr__region_state, atomic */
	int kind;                      /* enum mrmgr__region_kind */
	unsigned int flags;            /* enum mrmgr__region_flags */
	uint64_t gen;                  /* cache-wide registration number;
					* a new one at every in-place rereg */
	struct mrmgr__lru_link lru;    /* cache lock; only LIVE regions */
	struct mrmgr_region *free_next;
	uint32_t spared;               /* evict.c: round of its last second
					* chance */
	uint32_t fresh;                /* evict.c, cache lock: made since the
					* hand last passed (the "new" mark) */
	int release_locked;            /* a feature's state needs the lock
					* at release (core.h), for good */
	uint64_t asked_start, asked_last; /* what gets asked of it: its
					   * range less headroom (miss.c,
					   * merge) */
	struct mrmgr__watch watch;     /* monitor registry entry (monitor.h) */
	unsigned int gone;             /* user_data.c: why it left the cache
					* (enum mrmgr_region_gone_reason), 0
					* while cached; cache lock */
	void *user_data;               /* user_data.c: the caller's, atomic */
};

/* Record why r leaves the cache, unless an earlier step already did
 * (cache lock held). */
static inline void mrmgr__region_mark_gone(struct mrmgr_region *r,
					   unsigned int reason)
{
	if (!r->gone)
		r->gone = reason;
}

/*
 * r's registration is about to end (region_release(), cache lock held):
 * call the cache's region_gone callback once, then forget the reason and
 * the user data for the region's next use. user_data.c.
 */
void mrmgr__region_gone(struct mrmgr_cache *c, struct mrmgr_region *r);

/* Regions are laid out at a power-of-two size in their slab. */
#define MRMGR__REGION_SHIFT                                                  \
	(sizeof(struct mrmgr_region) <= 128 ? 7u                             \
	 : sizeof(struct mrmgr_region) <= 256 ? 8u : 9u)
#define MRMGR__REGION_SIZE ((uintptr_t)1 << MRMGR__REGION_SHIFT)

/*
 * The calling thread's stripe (slot), and where its words are in a slab:
 * from the lowest slot free when the thread first asked, given back when
 * it exits, so a few long-lived threads keep stripes of their own however
 * many threads came and went.
 */
extern __thread unsigned int mrmgr__tls_slot
	__attribute__((tls_model("initial-exec")));
extern __thread uintptr_t mrmgr__tls_words
	__attribute__((tls_model("initial-exec")));
unsigned int mrmgr__thread_slot_slow(void);

static inline unsigned int mrmgr__thread_slot(void)
{
	unsigned int s = mrmgr__tls_slot;

	return mrmgr__likely(s != ~0u) ? s : mrmgr__thread_slot_slow();
}

/* Bytes of a reference entry (word, keys): 1 << MRMGR__REF_ENTRY_SHIFT. */
#define MRMGR__REF_ENTRY_SHIFT 4u

/* Region i sits at (i + 1) << shift in its slab: entry i + 1 of each array. */
static inline uint64_t *mrmgr__ref_word_at(const struct mrmgr_region *r,
					   uintptr_t words)
{
	uintptr_t base = (uintptr_t)r & ~(MRMGR__SLAB_SIZE - 1);

	return (uint64_t *)(base + words +
			    (((uintptr_t)r - base) >>
			     (MRMGR__REGION_SHIFT - MRMGR__REF_ENTRY_SHIFT)));
}

/* r's reference word of stripe slot: no load from r itself. */
static inline uint64_t *mrmgr__ref_word(const struct mrmgr_region *r,
					unsigned int slot)
{
	return mrmgr__ref_word_at(r, mrmgr__layout.words +
					     slot * mrmgr__layout.stride);
}

uintptr_t mrmgr__thread_words_slow(void) __attribute__((noinline));

/* The calling thread's word of r (its stripe). */
static inline uint64_t *mrmgr__my_ref_word(const struct mrmgr_region *r)
{
	uintptr_t w = mrmgr__tls_words;

	if (mrmgr__unlikely(!w))
		w = mrmgr__thread_words_slow();
	return mrmgr__ref_word_at(r, w);
}

/*
 * Hits of a stripe are counted in word 0 of its array in each slab (no
 * region sits there): a line only the stripe's thread writes.
 */
static inline uint64_t *mrmgr__hit_counter(const void *r, uintptr_t words)
{
	return (uint64_t *)(((uintptr_t)r & ~(MRMGR__SLAB_SIZE - 1)) + words);
}

static inline void mrmgr__count_hit(const struct mrmgr_region *r,
				    uintptr_t words)
{
	uint64_t *h = mrmgr__hit_counter(r, words);

	/* Load + store, not an atomic add: normally the thread's alone;
	 * threads sharing a stripe may lose a count. */
	MRMGR__WRITE_ONCE(*h, MRMGR__READ_ONCE(*h) + 1);
}

/* Add a reference on slot's stripe; returns the word before. */
static inline uint64_t mrmgr__ref_take(struct mrmgr_region *r,
				       unsigned int slot)
{
	return __atomic_fetch_add(mrmgr__ref_word(r, slot), MRMGR__REF_ONE,
				  __ATOMIC_SEQ_CST);
}

/* Drop one; returns the word before. */
static inline uint64_t mrmgr__ref_drop(struct mrmgr_region *r,
				       unsigned int slot)
{
	return __atomic_fetch_sub(mrmgr__ref_word(r, slot), MRMGR__REF_ONE,
				  __ATOMIC_SEQ_CST);
}

/* Set the used bit of a word (after a hit that found it clear). */
static inline void mrmgr__ref_mark_used(uint64_t *w)
{
	__atomic_fetch_or(w, MRMGR__REF_USED, __ATOMIC_RELAXED);
}

/*
 * The keys copied next to the reference words: lkey in the low half, rkey
 * in the high half. Set when the MR is made or changed (lock held, nobody
 * else using a changed MR: quiesced or new); cleared when it goes. Not
 * set in a multi-PD cache (the plain accessors' MR is another one).
 */
void mrmgr__region_set_keys(struct mrmgr_region *r);
void mrmgr__region_clear_keys(struct mrmgr_region *r);

/* Regions of a cache: slabs, newest first. */
struct mrmgr__region_slabs {
	struct mrmgr__region_slab *newest;
};

/* A zeroed region of a new slot (words: no references, FREE); NULL when
 * out of memory. */
struct mrmgr_region *mrmgr__region_carve(struct mrmgr__region_slabs *rs);
/* Hits counted in every slab (see mrmgr__hit_counter()). */
uint64_t mrmgr__region_slabs_hits(const struct mrmgr__region_slabs *rs);
/* Free every slab (the cache is being destroyed). */
void mrmgr__region_slabs_free(struct mrmgr__region_slabs *rs);

/*
 * Stripes per region: a power of two, the same for every cache of the
 * process (so a put needs nothing from the cache to find its stripe).
 * Sets mrmgr__layout on first use.
 */
unsigned int mrmgr__stripes(void);

static inline uint64_t mrmgr__region_start(const struct mrmgr_region *r)
{
	return r->node.start;
}

static inline uint64_t mrmgr__region_len(const struct mrmgr_region *r)
{
	return r->node.last - r->node.start + 1;
}

static inline int mrmgr__region_state(const struct mrmgr_region *r)
{
	return __atomic_load_n(&r->state, __ATOMIC_SEQ_CST);
}

/*
 * Set the state; when it goes from or to MRMGR__REGION_LIVE, also the
 * "not live" bit of every reference word (an atomic read-modify-write of
 * each, before the caller sums them): a hit's or a put's
 * read-modify-write of its word is ordered before or after it, so either
 * that side sees the region not live or the sum sees its reference.
 */
void mrmgr__region_set_state(struct mrmgr_region *r, int state);

/*
 * r leaves the live state for state (not MRMGR__REGION_LIVE), lock held:
 * the state, then DEAD set and the bits in clear cleared in one
 * read-modify-write per word. Returns the sum of the counts as those
 * found them (what mrmgr__region_refs() read after mrmgr__region_set_state()
 * answered; region.c says why that is as good) and ORs the words as they
 * were into *had. Pass it to mrmgr__region_refs_fix() (check.c).
 */
int64_t mrmgr__region_leave(struct mrmgr_region *r, int state, uint64_t clear,
			    uint64_t *had);

/*
 * mrmgr__region_set_keys() then mrmgr__region_set_state(r,
 * MRMGR__REGION_LIVE), in one read-modify-write per word. Lock held.
 */
void mrmgr__region_go_live(struct mrmgr_region *r);

/*
 * A new region's first reference on slot's stripe, marked new (evict.c;
 * the mark is the region's fresh field, lock held): one locked add.
 */
void mrmgr__region_ref_new(struct mrmgr_region *r, unsigned int slot);

/*
 * mrmgr__region_go_live() with mrmgr__region_ref_new() folded into the
 * pass: slot's word goes live, keyed and referenced in one
 * read-modify-write (a miss's new region: nobody else can reach it
 * before it is published), and the region is marked new.
 */
void mrmgr__region_go_live_ref(struct mrmgr_region *r, unsigned int slot);

/*
 * check.c: the sum n of a region that is not live (from
 * mrmgr__region_leave()) as mrmgr__region_refs_checked() answers it: a
 * sum below zero is reported, counted and undone, and 0 returned.
 */
int64_t mrmgr__region_refs_fix(struct mrmgr_cache *c, struct mrmgr_region *r,
			       int64_t n, const char *where);

/*
 * The eviction hand's look at r, reading each word once: returns 1 when
 * it is held (references summing to nonzero; the bits are left); else 0,
 * its used and new bits cleared and *used 2 when a hit had set one, 1
 * when only the miss that made it had, 0 when neither.
 */
int mrmgr__region_look(struct mrmgr_region *r, unsigned int nstripes,
		       int *used);

/* Clear the used and new bits (on the stripes of mrmgr__stripes_seen);
 * returns 2 when a used bit was set, 1 when only a new one, 0 when
 * none. */
int mrmgr__region_take_used(struct mrmgr_region *r, unsigned int nstripes);

/* Sum of the stripes (see mrmgr__region_set_state()). */
int64_t mrmgr__region_refs(const struct mrmgr_region *r, unsigned int nstripes);

#endif /* MRMGR__REGION_H */
