/*
 * Which idle region to evict: a CLOCK over the cached regions, aware of
 * sizes under the byte limit, with regions found in use parked aside so
 * the hand does not walk them again and again (see evict.c).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__EVICT_H
#define MRMGR__EVICT_H

#include <stdint.h>

struct mrmgr_cache;
struct mrmgr_region;

/*
 * A cached region that looked idle and cold just now, to be evicted by
 * the caller (who checks idleness for good under the eviction protocol),
 * or NULL when none turned up within a bounded look. shortfall: the bytes
 * the byte limit is short of (0 when only the region count is). Moves
 * regions between the cache's lists as it looks. Cache lock held.
 */
struct mrmgr_region *mrmgr__evict_pick(struct mrmgr_cache *c,
				       uint64_t shortfall);

/*
 * A region was made: move the ageing hand a few regions on (evict.c).
 * Cache lock held.
 */
void mrmgr__evict_age(struct mrmgr_cache *c);

/* l leaves the cache's lru list: the ageing hand must not stay on it. */
static inline void mrmgr__evict_unlinking(struct mrmgr__lru_link **hand,
					  struct mrmgr__lru_link *l)
{
	if (*hand == l)
		*hand = l->next;
}

/* The bytes evicting r gives back to the byte limit. */
uint64_t mrmgr__evict_bytes(const struct mrmgr_region *r);

#endif /* MRMGR__EVICT_H */
