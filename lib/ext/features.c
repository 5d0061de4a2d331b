/*
 * The library's features, assembled: the public creation entry point
 * hands the core (which names no feature) the list of hook tables
 * (core/ext.h). The order is the order the hooks run in: growth plans a
 * miss before ODP checks what it will register.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "core.h"
#include "ext.h"
#include "grow.h"
#include "odp.h"
#include "share.h"

static const struct mrmgr__ext *const features[] = {
	&mrmgr__ext_grow,
	&mrmgr__ext_odp,
	&mrmgr__ext_share,
	&mrmgr__ext_buf,
	NULL,
};

/* The same with the stale check (core/stale.c) last: only a cache that
 * asked for it walks its hooks. */
static const struct mrmgr__ext *const features_stale[] = {
	&mrmgr__ext_grow,
	&mrmgr__ext_odp,
	&mrmgr__ext_share,
	&mrmgr__ext_buf,
	&mrmgr__ext_stale,
	NULL,
};

/*
 * A cache of several PDs: the same, and one MR per PD in each region.
 * First: it answers every get (the core looks for the first get hook),
 * and plans no miss, so the others' order is kept.
 */
static const struct mrmgr__ext *const features_multipd[] = {
	&mrmgr__ext_multipd,
	&mrmgr__ext_grow,
	&mrmgr__ext_odp,
	&mrmgr__ext_share,
	&mrmgr__ext_buf,
	NULL,
};

MRMGR_EXPORT int mrmgr_cache_create(struct ibv_pd *pd,
				    const struct mrmgr_cache_attr *attr,
				    mrmgr_cache_t **cache)
{
	/* Several PDs: one MR per PD in each region (multipd.c). */
	if (attr && (attr->comp_mask & MRMGR_CACHE_ATTR_PDS))
		return mrmgr__multi_create(pd, attr, features_multipd, cache);
	if (mrmgr__stale_wanted(attr && (attr->comp_mask & MRMGR_CACHE_ATTR_FLAGS)
				? attr->flags : 0))
		return mrmgr__cache_create(pd, attr, features_stale, cache);
	return mrmgr__cache_create(pd, attr, features, cache);
}
