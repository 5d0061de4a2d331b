/*
 * Room within the limits: evicting idle regions as evict.c picks them
 * (the LRU list itself is retire.c's). Eviction returns its victims: out
 * of the tree and of the limits, their MRs on the cache's reap list for
 * the caller to deregister (the miss with the lock released).
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

/* Park a region found held on the held list (evict.c). */
static void held_append(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	r->lru.prev = c->held.prev;
	r->lru.next = &c->held;
	c->held.prev->next = &r->lru;
	c->held.prev = &r->lru;
}

/*
 * Evict r if idle. Returns 1 when it was evicted.
 *
 * One pass over r's words marks it not live, clears its keys' bit and
 * adds up its count (mrmgr__region_leave()), where set_state(), a second
 * read of every word and clear_keys() at its release made three. The
 * keys' bit goes with the mark because an evicted region loses its keys
 * anyway; when a holder turns up after all, the region goes back live
 * with its keys (the same MR), and meanwhile its holders read the keys
 * from the MR (mrmgr_region_lkey() falls back when the bit is clear).
 */
static int region_try_evict(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t had;
	int64_t n = mrmgr__region_leave(r, MRMGR__REGION_EVICTING,
					MRMGR__REF_KEYS, &had);

	if (mrmgr__region_refs_fix(c, r, n, "evicting it") != 0) {
		mrmgr__region_go_live(r);
		return 0;
	}
	mrmgr__cache_tree_remove(c, r);
	mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_EVICTED);
	/* A victim: out of the limits now, its MR the caller's to reap. */
	mrmgr__cache_retire_region(c, r);
	c->st.evictions++;
	return 1;
}

/*
 * Evict one idle region to free shortfall bytes (0: a region slot), as
 * evict.c picks it: least recently used first, sizes weighed under the
 * byte limit. Bounded; returns 0 when no idle region turned up.
 */
static int evict_one(struct mrmgr_cache *c, uint64_t shortfall)
{
	for (int tries = 0; tries < 4; tries++) {
		struct mrmgr_region *r = mrmgr__evict_pick(c, shortfall);

		if (!r)
			return 0;
		if (region_try_evict(c, r))
			return 1;
		/* Taken by a hit since the pick looked. */
		mrmgr__lru_unlink(r);
		held_append(c, r);
	}
	return 0;
}

/* Evict every idle region (a registration failed for want of memory).
 * O(n), on that failure only. */
void mrmgr__cache_evict_all_idle(struct mrmgr_cache *c)
{
	struct mrmgr__lru_link *lists[] = { &c->lru, &c->held };

	for (int i = 0; i < 2; i++) {
		struct mrmgr__lru_link *l = lists[i]->next;

		while (l != lists[i]) {
			struct mrmgr__lru_link *next = l->next;

			region_try_evict(c, mrmgr__lru_region(l));
			l = next;
		}
	}
}

/*
 * Evict until n more regions of len more bytes fit the limits. Returns 0
 * when they cannot (everything left is in use, or nothing idle turned up).
 */
int mrmgr__cache_make_room(struct mrmgr_cache *c, uint64_t n, uint64_t len)
{
	if (len > c->cfg.max_bytes || (n && c->cfg.max_regions == 0))
		return 0;
	c->evict_round++;
	while (c->nregions + n > c->cfg.max_regions ||
	       c->pinned_bytes + len > c->cfg.max_bytes) {
		uint64_t over = c->pinned_bytes + len > c->cfg.max_bytes
					? c->pinned_bytes + len - c->cfg.max_bytes
					: 0;

		if (!evict_one(c, over))
			return 0;
	}
	return 1;
}

/* The features' calls (core.h): the victims are deregistered at once. */
int mrmgr__core_make_room(struct mrmgr_cache *c, uint64_t n, uint64_t len)
{
	int ret = mrmgr__cache_make_room(c, n, len);

	mrmgr__cache_reap_locked(c);
	return ret;
}

void mrmgr__core_evict_all_idle(struct mrmgr_cache *c)
{
	mrmgr__cache_evict_all_idle(c);
	mrmgr__cache_reap_locked(c);
}

void mrmgr__core_each_cached(struct mrmgr_cache *c,
			     void (*fn)(struct mrmgr_cache *c,
			     struct mrmgr_region *r, void *arg),
			     void *arg)
{
	struct mrmgr__lru_link todo;

	mrmgr__lru_unpark_all(c);
	c->age_hand = NULL; /* the list moves aside */
	if (c->lru.next == &c->lru)
		return;
	/* Move the list aside; each region rejoins the cache's list before
	 * fn sees it, so fn finds it linked as usual, and regions fn
	 * publishes are not visited again. */
	todo.next = c->lru.next;
	todo.prev = c->lru.prev;
	todo.next->prev = &todo;
	todo.prev->next = &todo;
	c->lru.next = c->lru.prev = &c->lru;
	while (todo.next != &todo) {
		struct mrmgr_region *r = mrmgr__lru_region(todo.next);

		mrmgr__lru_unlink(r);
		mrmgr__lru_append(c, r);
		fn(c, r, arg);
	}
}
