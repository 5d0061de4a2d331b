/*
 * What middleware hangs on a region: a pointer of its own, and a callback
 * when the region's registration ends (mrmgr_cache_attr::region_gone).
 *
 * The pointer is one atomic word in the region: a hit reads it with one
 * load and takes no lock. Region memory is type-stable, so a pointer is
 * cleared only when the region is released (under the cache lock, after
 * the callback), never while a holder can read it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "cache.h"
#include "log.h"
#include "region.h"

MRMGR_EXPORT void mrmgr_region_set_user_data(mrmgr_region_t *r, void *data)
{
	if (!r) {
		mrmgr__err("mrmgr_region_set_user_data: NULL region");
		return;
	}
	__atomic_store_n(&r->user_data, data, __ATOMIC_RELEASE);
}

MRMGR_EXPORT void *mrmgr_region_cas_user_data(mrmgr_region_t *r,
					      void *expected, void *data)
{
	if (!r) {
		mrmgr__err("mrmgr_region_cas_user_data: NULL region");
		return NULL;
	}
	/* On failure, expected receives what is attached. */
	__atomic_compare_exchange_n(&r->user_data, &expected, data, 0,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	return expected;
}

MRMGR_EXPORT void *mrmgr_region_user_data(const mrmgr_region_t *r)
{
	return r ? __atomic_load_n(&r->user_data, __ATOMIC_ACQUIRE) : NULL;
}

void mrmgr__region_gone(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr_region_gone_fn fn = c->cfg.region_gone;

	/* Nothing recorded: it was handed out uncached (or fell out of the
	 * cache in grow.c's publish) and its last holder let go. */
	if (fn)
		fn(r, r->gone ? r->gone : MRMGR_REGION_GONE_UNCACHED,
		   c->cfg.region_gone_arg);
	r->gone = 0;
	__atomic_store_n(&r->user_data, NULL, __ATOMIC_RELAXED);
}
