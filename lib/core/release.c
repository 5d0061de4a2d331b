/*
 * A region's way out as its users and features ask for it: put (and the
 * checked mode's put), detach, quiesce, publish again, release; the
 * steps themselves (release, retire, publish) are retire.c's.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "config_env.h"
#include "core.h"
#include "evict.h"
#include "ext.h"
#include "hit.h"
#include "log.h"

/*
 * Take a live region out of the cache for good (invalidation, merge). It is
 * deregistered now if idle, else at its last put. Returns 1 when it was idle.
 */
int mrmgr__core_detach(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t had;
	int64_t n;

	mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_REPLACED);
	/* Marked and added up in one pass (region.c); its holders keep
	 * their keys. */
	n = mrmgr__region_leave(r, MRMGR__REGION_DETACHED, 0, &had);
	mrmgr__cache_tree_remove(c, r);
	if (mrmgr__region_refs_fix(c, r, n, "detaching it") != 0)
		return 0;
	mrmgr__cache_release_region(c, r);
	return 1;
}

/* The checked mode's put (check.c: the rules and why). */
/* A put with nothing taken, in the checked mode: say so and do nothing. */
static void refuse(struct mrmgr_cache *c, struct mrmgr_region *r,
		   const char *why)
{
	c->st.double_puts++;
	mrmgr__err("mrmgr_put: region %p [%#llx, +%llu) of cache %p %s (a "
		   "double put?): the put is ignored (counted in double_puts)",
		   (void *)r, (unsigned long long)mrmgr__region_start(r),
		   (unsigned long long)mrmgr__region_len(r), (void *)c, why);
}

/* noinline: inlined into mrmgr_put() (link-time optimisation does), its
 * registers cost every put a save and a restore. */
__attribute__((noinline)) int mrmgr__put_checked(struct mrmgr_region *r)
{
	struct mrmgr_cache *c = r->cache;
	int state;

	if (!(c->flags & MRMGR_CACHE_CHECK))
		return 0;
	mrmgr__cache_lock(c);
	state = mrmgr__region_state(r);
	if (state == MRMGR__REGION_FREE)
		refuse(c, r, "was released already");
	else if (state != MRMGR__REGION_ABANDONED &&
		 mrmgr__region_refs(r, c->nstripes) <= 0)
		refuse(c, r, "is held by nobody");
	else
		mrmgr__core_unref_locked(c, r,
					  mrmgr__thread_slot() & (c->nstripes - 1));
	pthread_mutex_unlock(&c->lock);
	return 1;
}
/* mrmgr_put() on a region no longer live: perhaps the last user. */
static __attribute__((noinline)) void put_slow(struct mrmgr_region *r)
{
	mrmgr__cache_put_slow(r->cache, r);
}

/* mrmgr_put() from a thread that has no stripe yet. */
static __attribute__((noinline)) void put_first(struct mrmgr_region *r)
{
	if (__atomic_fetch_sub(mrmgr__my_ref_word(r), MRMGR__REF_ONE,
			       __ATOMIC_SEQ_CST) &
	    MRMGR__REF_DEAD)
		put_slow(r);
}

MRMGR_EXPORT void mrmgr_put(mrmgr_region_t *region)
{
	uintptr_t words = mrmgr__tls_words;

	if (!region)
		return;
	if (mrmgr__unlikely(__atomic_load_n(&mrmgr__check_puts, __ATOMIC_RELAXED)) &&
	    mrmgr__put_checked(region))
		return;
	if (mrmgr__unlikely(!words)) {
		put_first(region);
		return;
	}
	/* The thread's reference word, which get wrote: nothing else of the
	 * region or the cache is read unless the region is no longer live. */
	if (mrmgr__unlikely(__atomic_fetch_sub(mrmgr__ref_word_at(region, words),
					       MRMGR__REF_ONE,
					       __ATOMIC_SEQ_CST) &
			    MRMGR__REF_DEAD))
		put_slow(region);
}

/* A put found the region not live: see whether that was its last user. */
void mrmgr__cache_put_slow(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__cache_lock(c);
	/* Under the lock the state is stable; FREE or a recycled LIVE region
	 * means someone else already released it (a put after that was
	 * one too many: check.c). */
	if (mrmgr__region_state(r) == MRMGR__REGION_DETACHED) {
		if (mrmgr__region_refs_checked(c, r, "at its last put") == 0)
			mrmgr__cache_release_region(c, r);
	} else if (mrmgr__region_state(r) == MRMGR__REGION_FREE) {
		(void)mrmgr__region_refs_checked(c, r, "after its release");
	}
	pthread_mutex_unlock(&c->lock);
}

int mrmgr__core_quiesce(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t had;
	int64_t n;

	/*
	 * region_try_evict()'s protocol: once the stripes add up to zero
	 * after the state store, every later hit sees the region not live
	 * and backs off, so nobody can be using its MR, range or access
	 * while grow.c changes them out of the tree. It goes back in (or is
	 * released) before the lock is dropped.
	 */
	n = mrmgr__region_leave(r, MRMGR__REGION_EVICTING, 0, &had);
	if (mrmgr__region_refs_fix(c, r, n, "growing it") != 0) {
		mrmgr__region_set_state(r, MRMGR__REGION_LIVE);
		return 0;
	}
	/* It keeps its watch: the memory under its MR stays reported until
	 * it is published again or released. */
	mrmgr__cache_tree_take(c, r);
	return 1;
}

int mrmgr__publish_test_no_watch;

void mrmgr__core_publish(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__watch_tx tx;

	if (mrmgr__publish_test_no_watch) {
		mrmgr__cache_publish_region(c, r);
		return;
	}

	/*
	 * grow.c may have changed the range: watch it as it is now before
	 * the old watch goes, so the pages under the MR are never
	 * unwatched. What cannot be watched leaves the cache, released at
	 * its last put.
	 */
	if (mrmgr__mon_watch_begin(c, mrmgr__region_start(r), r->node.last,
				   &tx)) {
		mrmgr__mon_unwatch(c, r);
		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		c->st.uncached++;
		if (mrmgr__region_refs_checked(c, r, "uncaching it") == 0)
			mrmgr__cache_release_region(c, r);
		return;
	}
	mrmgr__mon_unwatch(c, r);
	if (mrmgr__mon_watch_commit(c, &tx, r)) {
		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		c->st.uncached++;
		if (mrmgr__region_refs(r, c->nstripes) == 0)
			mrmgr__cache_release_region(c, r);
		return;
	}
	mrmgr__cache_publish_region(c, r);
}

void mrmgr__core_release(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_REPLACED); /* grow.c */
	mrmgr__cache_release_region(c, r);
}

void mrmgr__core_unref_locked(struct mrmgr_cache *c, struct mrmgr_region *r,
			      unsigned int slot)
{
	mrmgr__ref_drop(r, slot);
	if (mrmgr__region_state(r) == MRMGR__REGION_DETACHED &&
	    mrmgr__region_refs_checked(c, r, "at its last put") == 0)
		mrmgr__cache_release_region(c, r);
}
