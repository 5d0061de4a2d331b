/*
 * A region's way out: put, detach, release (deregister and recycle),
 * and retire (evicted during a miss, deregistered once the lock is
 * free); and its way back in: publish.
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

struct mrmgr_region *mrmgr__cache_alloc_region(struct mrmgr_cache *c)
{
	struct mrmgr_region *r = c->free_list;

	if (r) {
		/* Stripes are left as they are: a stale reader may still
		 * hold a transient reference it is about to drop. */
		c->free_list = r->free_next;
		goto got;
	}
	if (c->nall == c->all_cap) {
		size_t cap = c->all_cap ? c->all_cap * 2 : 64;
		struct mrmgr_region **all = realloc(c->all, cap * sizeof(*all));

		if (!all)
			return NULL;
		c->all = all;
		c->all_cap = cap;
	}
	r = mrmgr__region_carve(&c->rslabs); /* zeroed */
	if (!r)
		return NULL;
	r->cache = c;
	mrmgr__region_set_state(r, MRMGR__REGION_FREE);
	c->all[c->nall++] = r;
got:
	/* A feature may need state of its own before the region is used. */
	if (mrmgr__ext_region_alloc(c, r)) {
		r->free_next = c->free_list;
		c->free_list = r;
		return NULL;
	}
	return r;
}

static void region_retire(struct mrmgr_cache *c, struct mrmgr_region *r);

/* Out of the tree, still watched: grow.c works on it and publishes it. */
void mrmgr__cache_tree_take(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__seq_write_begin(c);
	mrmgr__lookup_remove(c, r);
	mrmgr__itree_remove(&c->tree, &r->node);
	mrmgr__seq_write_end(c);
	mrmgr__lru_unlink(r);
	c->ncached--;
}

void mrmgr__cache_tree_remove(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__cache_tree_take(c, r);
	mrmgr__mon_unwatch(c, r);
}

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

/* Make a region that is out of the tree live again. */
void mrmgr__cache_publish_region(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	r->gone = 0; /* cached again (grow.c) */
	mrmgr__region_go_live(r); /* keys, then live: one pass */
	mrmgr__seq_write_begin(c);
	mrmgr__itree_insert(&c->tree, &r->node);
	mrmgr__lookup_insert(c, r);
	mrmgr__seq_write_end(c);
	mrmgr__lru_append(c, r);
	c->ncached++;
}

/* Deregister an idle region that is out of the tree, and recycle it. */
void mrmgr__cache_release_region(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t len = mrmgr__region_len(r);
	int ret;

	mrmgr__region_gone(c, r); /* the caller's callback: keys still valid */
	if (c->reap_on && !r->release_locked && r->kind != MRMGR__REGION_VIEW) {
		region_retire(c, r); /* deregistered once the lock is free */
		return;
	}
	mrmgr__region_clear_keys(r);
	mrmgr__mon_unwatch(c, r); /* a no-op unless grow.c held it out */
	if (mrmgr__unlikely(c->ndeferred))
		mrmgr__cache_dereg_retry(c, 0);
	mrmgr__ext_region_released(c, r); /* before its MR goes */
	/* A view borrows the implicit MR, which lives as long as the cache. */
	ret = r->kind == MRMGR__REGION_VIEW ? 0
	      : mrmgr__core_dereg(c, r->mr, "a region's MR");
	if (!ret && r->kind != MRMGR__REGION_VIEW)
		c->st.deregistrations++;
	mrmgr__dbg("dereg [%#llx, +%llu)",
		   (unsigned long long)mrmgr__region_start(r),
		   (unsigned long long)len);
	r->mr = NULL;
	mrmgr__core_account_reg(c, r->kind, len, -1);
	mrmgr__region_set_state(r, MRMGR__REGION_FREE);
	r->free_next = c->free_list;
	c->free_list = r;
}

/* An evicted region: everything of mrmgr__cache_release_region() but the
 * deregistration, which mrmgr__cache_reap_dereg() does once the lock is
 * free. */
static void region_retire(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__mon_unwatch(c, r);
	mrmgr__region_clear_keys(r);
	mrmgr__ext_region_released(c, r);
	mrmgr__core_account_reg(c, r->kind, mrmgr__region_len(r), -1);
	/* FREE: a stale reader's put leaves it alone; off the free list
	 * until its MR is gone. */
	mrmgr__region_set_state(r, MRMGR__REGION_FREE);
	r->free_next = c->reap;
	c->reap = r;
}

/* Deregister retired regions; no lock. Returns how many succeeded. */
uint64_t mrmgr__cache_reap_dereg(struct mrmgr_cache *c,
				 struct mrmgr_region *list)
{
	uint64_t n = 0;

	/* The retired regions are this thread's alone until they are
	 * recycled: an MR deregistered here is forgotten here, a failed one
	 * stays for mrmgr__cache_reap_recycle() to keep and retry (dereg.c). */
	for (struct mrmgr_region *r = list; r; r = r->free_next) {
		if (!mrmgr__dev_dereg_mr(c->ops, r->mr)) {
			r->mr = NULL;
			n++;
		}
	}
	return n;
}

/* Recycle retired regions once deregistered; lock held. */
void mrmgr__cache_reap_recycle(struct mrmgr_cache *c, struct mrmgr_region *list,
			       uint64_t deregistered)
{
	c->st.deregistrations += deregistered;
	while (list) {
		struct mrmgr_region *r = list;

		list = r->free_next;
		/* Its deregistration failed: kept and retried, not abandoned. */
		if (r->mr && !mrmgr__core_dereg(c, r->mr, "an evicted region's MR"))
			c->st.deregistrations++;
		r->mr = NULL;
		r->free_next = c->free_list;
		c->free_list = r;
	}
}

/* Deregister and recycle what was retired, lock held (nothing to register
 * meanwhile). */
void mrmgr__cache_reap_locked(struct mrmgr_cache *c)
{
	struct mrmgr_region *reap = c->reap;

	c->reap = NULL;
	if (reap)
		mrmgr__cache_reap_recycle(c, reap, mrmgr__cache_reap_dereg(c, reap));
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
	pthread_mutex_lock(&c->lock);
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

void mrmgr__core_publish(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__watch_tx tx;

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
