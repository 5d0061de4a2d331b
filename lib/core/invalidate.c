/*
 * Invalidation: mrmgr_invalidate(), and the memory events the monitor
 * queued, applied under the lock before any lookup.
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
#include "request.h"

uint64_t mrmgr__core_invalidate_locked(struct mrmgr_cache *c, uint64_t start,
				       uint64_t last)
{
	struct mrmgr__itree_node *n;
	uint64_t count = 0;

	mrmgr__cache_inflight_drop(c, start, last);
	/* Usually nothing cached is there: the index says so in a few
	 * lines, and the regions waiting for the tree stay waiting. */
	if (mrmgr__lookup_near(c, start, last) == MRMGR__LK_NONE)
		return 0;
	while ((n = mrmgr__itree_first_overlap(mrmgr__cache_tree(c), start, last))) {
		struct mrmgr_region *r = mrmgr__node_region(n);

		mrmgr__ext_region_invalidated(c, r);
		mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_INVALIDATED);
		mrmgr__core_detach(c, r);
		c->st.invalidations++;
		count++;
	}
	return count;
}

/* Apply the memory events that arrived since the last time; lock held. */
void mrmgr__cache_apply_events(struct mrmgr_cache *c)
{
	uint64_t s, l;
	int r;

	/* A kind the monitor does not watch (kinds/kind.h): its keys are
	 * not host addresses; the events are drained, none applied. */
	int watched = mrmgr__kind_monitored(c->kind);

	mrmgr__mon_drain_begin(&c->mon);
	while ((r = mrmgr__mon_drain_next(&c->mon, &s, &l)) > 0)
		if (watched)
			c->mon.invalidations +=
				mrmgr__core_invalidate_locked(c, s, l);
	if (r < 0 && watched) /* fell behind the queue: anything may have changed */
		c->mon.invalidations +=
			mrmgr__core_invalidate_locked(c, 0, UINT64_MAX);
	mrmgr__mon_drain_end(&c->mon, &c->mon_seen);
}

MRMGR_EXPORT int mrmgr_invalidate(mrmgr_cache_t *c, void *addr, size_t length)
{
	uint64_t start, last;
	int ret;

	if (!c) {
		mrmgr__err("mrmgr_invalidate: NULL cache");
		return EINVAL;
	}
	ret = mrmgr__cache_check_range("mrmgr_invalidate", addr, length,
			  ((uint64_t)1 << c->page_shift) - 1, &start, &last);
	if (ret)
		return ret;
	mrmgr__cache_lock(c);
	mrmgr__core_invalidate_locked(c, start, last);
	pthread_mutex_unlock(&c->lock);
	return 0;
}
