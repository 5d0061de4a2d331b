/*
 * Statistics: slow-path counters kept under the cache lock, hit counters
 * kept per thread slot, added up here.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "cache.h"
#include "log.h"

MRMGR_EXPORT int mrmgr_cache_query_stats(mrmgr_cache_t *c,
					 struct mrmgr_stats *stats, size_t size)
{
	struct mrmgr_stats s;
	uint64_t in_use;

	if (!c || !stats || !size) {
		mrmgr__err("mrmgr_cache_query_stats: %s",
			   !c ? "NULL cache" : !stats ? "NULL stats" : "size 0");
		return EINVAL;
	}
	mrmgr__cache_lock(c);
	/* First: adding the references up may find double puts (check.c). */
	in_use = mrmgr__cache_regions_in_use(c);
	s = c->st;
	s.regions = c->nregions;
	s.regions_in_use = in_use;
	s.pinned_bytes = c->pinned_bytes;
	s.max_regions = c->cfg.max_regions;
	s.max_bytes = c->cfg.max_bytes;
	/* Hits counted per stripe in the region slabs (region.h). */
	s.hits += mrmgr__region_slabs_hits(&c->rslabs);
	pthread_mutex_unlock(&c->lock);
	mrmgr__ext_stats(c, &s); /* the features' counters */

	memcpy(stats, &s, size < sizeof(s) ? size : sizeof(s));
	return 0;
}
