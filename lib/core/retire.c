/*
 * A region's place in the cache, the lowest of the lifecycle's steps:
 * taken for a registration, into the tree and onto the LRU (publish), out
 * of them, released (deregistered and recycled now) or retired (evicted
 * during a miss: everything of a release but the deregistration, which
 * waits until the lock is free), and the retired ones' deregistration.
 * What decides when (put, detach, eviction, invalidation, the miss)
 * calls down to here, never the other way.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "core.h"
#include "evict.h"
#include "ext.h"
#include "hit.h"
#include "log.h"

static void region_retire(struct mrmgr_cache *c, struct mrmgr_region *r);

void mrmgr__lru_unlink(struct mrmgr_region *r)
{
	mrmgr__evict_unlinking(&r->cache->age_hand, &r->lru);
	r->lru.prev->next = r->lru.next;
	r->lru.next->prev = r->lru.prev;
	r->lru.prev = r->lru.next = NULL;
}

void mrmgr__lru_append(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	r->lru.prev = c->lru.prev;
	r->lru.next = &c->lru;
	c->lru.prev->next = &r->lru;
	c->lru.prev = &r->lru;
}

/* Every parked region back on the LRU list (teardown, whole-cache walks). */
void mrmgr__lru_unpark_all(struct mrmgr_cache *c)
{
	while (c->held.next != &c->held) {
		struct mrmgr_region *r = mrmgr__lru_region(c->held.next);

		mrmgr__lru_unlink(r);
		mrmgr__lru_append(c, r);
	}
}

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

/* Out of the tree, still watched: grow.c works on it and publishes it. */
void mrmgr__cache_tree_take(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__seq_write_begin(c);
	mrmgr__index_remove(c, r);
	mrmgr__seq_write_end(c);
	mrmgr__lru_unlink(r);
	c->ncached--;
}

void mrmgr__cache_tree_remove(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__cache_tree_take(c, r);
	mrmgr__mon_unwatch(c, r);
}

/* Into the tree, the index and the LRU list, once live. */
static void publish(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__seq_write_begin(c);
	mrmgr__index_insert(c, r);
	mrmgr__seq_write_end(c);
	mrmgr__lru_append(c, r);
	c->ncached++;
}

/* Make a region that is out of the tree live again. */
void mrmgr__cache_publish_region(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	r->gone = 0; /* cached again (grow.c) */
	mrmgr__region_go_live(r); /* keys, then live: one pass */
	publish(c, r);
}

void mrmgr__cache_publish_new(struct mrmgr_cache *c, struct mrmgr_region *r,
			      unsigned int slot)
{
	r->gone = 0;
	mrmgr__region_go_live_ref(r, slot); /* and its first reference */
	publish(c, r);
}

static void release_now(struct mrmgr_cache *c, struct mrmgr_region *r);

/* Deregister an idle region that is out of the tree, and recycle it. */
void mrmgr__cache_release_region(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__region_gone(c, r); /* the caller's callback: keys still valid */
	release_now(c, r);
}

void mrmgr__cache_retire_region(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__region_gone(c, r); /* the caller's callback: keys still valid */
	/* A feature's state that needs the lock at the release (core.h),
	 * or a view (no MR of its own): released now. */
	if (r->release_locked || r->kind == MRMGR__REGION_VIEW)
		release_now(c, r);
	else
		region_retire(c, r); /* deregistered by whoever reaps */
}

/* mrmgr__cache_release_region() after the callback. */
static void release_now(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t len = mrmgr__region_len(r);
	int ret;

	mrmgr__region_clear_keys(r);
	mrmgr__mon_unwatch(c, r); /* a no-op unless grow.c held it out */
	if (mrmgr__unlikely(c->ndeferred))
		mrmgr__cache_dereg_retry(c, 0);
	if (mrmgr__ext_wants_released(c, r)) /* before its MR goes */
		mrmgr__ext_region_released(c, r);
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
 * deregistration, which the reaper does (mrmgr__cache_reap_dereg() once
 * the lock is free, or mrmgr__cache_reap_locked()). */
static void region_retire(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__mon_unwatch(c, r);
	mrmgr__region_clear_keys(r);
	if (mrmgr__ext_wants_released(c, r))
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
		if (!mrmgr__kind_dereg(c->kind, c->kind_ctx, c->ops, r->mr)) {
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
	if (!reap)
		return;
	/* As a release does: failed deregistrations kept from before are
	 * retried first. */
	if (mrmgr__unlikely(c->ndeferred))
		mrmgr__cache_dereg_retry(c, 0);
	mrmgr__cache_reap_recycle(c, reap, mrmgr__cache_reap_dereg(c, reap));
}
