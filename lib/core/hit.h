/*
 * The hit protocol, written once: the sequence count that validates a
 * lock-free lookup, and the reference a hit takes. Both hit paths use it:
 * mrmgr_get()'s inline fast_hit() and mrmgr__core_try_hit() (get.c).
 *
 * Why it is safe without a lock (cache.c says more): tree and index change
 * together between mrmgr__seq_write_begin() and _end(); removing a region
 * is "mark every reference word not live, then sum them" while a hit is
 * "add to my word and look at what it held": read-modify-writes of one
 * word, so either the hit sees the mark and backs off, or the remover's
 * sum sees the reference and leaves the region to its last put.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__HIT_H
#define MRMGR__HIT_H

#include <stdint.h>

#include "cache.h"
#include "compiler.h"
#include "region.h"

/* The writer's side of the sequence count, lock held. */
static inline void mrmgr__seq_write_begin(struct mrmgr_cache *c)
{
	__atomic_store_n(&c->seq, c->seq + 1, __ATOMIC_RELAXED);
	/* The odd count must be visible before any tree store. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void mrmgr__seq_write_end(struct mrmgr_cache *c)
{
	__atomic_store_n(&c->seq, c->seq + 1, __ATOMIC_RELEASE);
}

/* The reference words of a thread slot (mrmgr__tls_words for its own). */
static inline uintptr_t mrmgr__slot_words(unsigned int slot)
{
	return mrmgr__layout.words + slot * mrmgr__layout.stride;
}

/*
 * A hit on r, which a lookup found while the sequence count was seq (even):
 * reference it on the word at words. 1: r was live and nothing changed
 * since seq, so r is what the lookup said (it contains the range, with the
 * access); its used bit and hit counter are updated. 0: the reference is
 * dropped again, and *dead says the region was not live, so that drop may
 * have been its last put: the caller finishes it (mrmgr__cache_put_slow()).
 * r may be stale (type-stable memory): its word is still a reference word.
 */
static inline __attribute__((always_inline)) int
mrmgr__hit_ref(struct mrmgr_cache *c, struct mrmgr_region *r, uintptr_t words,
	       uint64_t seq, int *dead)
{
	uint64_t *w = mrmgr__ref_word_at(r, words);
	uint64_t old = __atomic_fetch_add(w, MRMGR__REF_ONE, __ATOMIC_SEQ_CST);

	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (mrmgr__likely(!(old & MRMGR__REF_DEAD)) &&
	    mrmgr__likely(__atomic_load_n(&c->seq, __ATOMIC_RELAXED) == seq)) {
		if (mrmgr__unlikely(!(old & MRMGR__REF_USED)))
			mrmgr__ref_mark_used(w);
		mrmgr__count_hit(r, words);
		return 1;
	}
	*dead = !!(__atomic_fetch_sub(w, MRMGR__REF_ONE, __ATOMIC_SEQ_CST) &
		   MRMGR__REF_DEAD);
	return 0;
}

#endif /* MRMGR__HIT_H */
