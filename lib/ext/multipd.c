/*
 * Multi-PD caches: one region per address range, one MR per PD.
 *
 * A multi-PD cache is an ordinary cache (its tree, LRU, limits, locking
 * and hit path are the core's) whose regions carry a table of MRs, one
 * slot per PD the cache serves (its share state's pd_mrs). The first get of a
 * range registers it in the PD that asked, through the cache's own miss
 * path, told which PD to register in (mrmgr__core_get_pd_locked(): the
 * cache's own PD never changes); gets from other PDs find the region by
 * the same lock-free walk and register it in their PD only if its slot
 * is still empty. So memory is registered only in the PDs that use it,
 * and one tree node covers them all: one invalidation, one eviction, one
 * reference count for the range.
 *
 * A feature (mrmgr__ext_multipd, ext.h) that only caches of several PDs
 * carry: mrmgr_cache_create() with MRMGR_CACHE_ATTR_PDS hands the core a
 * feature list with it (features.c). A cache of one PD keeps the region's
 * MR as its only MR and pays nothing for this file.
 *
 * Why the hit path stays lock-free: a region found by the core's try_hit (hit.h)
 * is referenced and live; its slot is read with an acquire load; a slot
 * is written (release) under the cache lock while the writer holds a
 * reference, and cleared only when the region is released, which cannot
 * happen while we hold ours. A miss in the slot takes the lock.
 *
 * Accounting: each MR counts as a region against max_regions and its
 * bytes against max_bytes (the device and memlock pay per registration);
 * stats: share_pd_mrs (MRs beyond a region's first), share_pd_registrations.
 *
 * Never re-registered in place: every region of a multi-PD cache is
 * MRMGR__REGION_SHARED (a rereg would have to change each PD's MR), so
 * growth makes a new region and the old keeps its MRs for its holders.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "device.h"
#include "ext.h"
#include "ids.h"
#include "log.h"
#include "share.h"

#define MAX_PDS 64

int mrmgr__multi_pd_index(const struct mrmgr_cache *c, const struct ibv_pd *pd)
{
	const struct mrmgr__share_cache *sc = mrmgr__share_cache_of(c);

	if (!pd)
		return 0;
	if (!sc || !sc->npds)
		return pd == mrmgr__core_view(c)->pd ? 0 : -1;
	for (size_t i = 0; i < sc->npds; i++)
		if (sc->pds[i] == pd)
			return (int)i;
	return -1;
}

struct ibv_mr *mrmgr__multi_mr(const struct mrmgr_region *r, size_t i)
{
	const struct mrmgr__share *sh =
		__atomic_load_n(mrmgr__share_slot(r), __ATOMIC_ACQUIRE);

	if (!sh || !sh->pd_mrs)
		return i == 0 ? mrmgr__rgn_mr(r) : NULL;
	return __atomic_load_n(&sh->pd_mrs[i], __ATOMIC_ACQUIRE);
}

void mrmgr__share_region_new(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__share *sh = mrmgr__share_of(r); /* made by region_alloc */
	/* The miss registered in the PD that asked. */
	int i = mrmgr__multi_pd_index(c, mrmgr__rgn_mr(r)->pd);

	mrmgr__rgn_set_flags(r, MRMGR__REGION_SHARED, 0);
	__atomic_store_n(&sh->pd_mrs[i], mrmgr__rgn_mr(r), __ATOMIC_RELEASE);
	sh->npd_mrs = 1;
}

void mrmgr__multi_release(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__share *sh = mrmgr__share_of(r);
	uint64_t len = mrmgr__rgn_len(r);

	for (size_t i = 0; sh->pd_mrs && i < mrmgr__share_cache_of(c)->npds; i++) {
		struct ibv_mr *mr = sh->pd_mrs[i];

		if (!mr)
			continue;
		__atomic_store_n(&sh->pd_mrs[i], NULL, __ATOMIC_RELAXED);
		if (mr == mrmgr__rgn_mr(r))
			continue; /* the core deregisters its own */
		mrmgr__core_dereg_extra(c, mr, len, "a region's MR in another PD");
		mrmgr__core_count(c, share_pd_mrs, -1);
	}
	sh->npd_mrs = 0;
}

/* Register a referenced region in the cache's PD i as well. Lock held. */
static int add_pd_mr(struct mrmgr_cache *c, struct mrmgr_region *r, int i)
{
	uint64_t start = mrmgr__rgn_start(r), len = mrmgr__rgn_len(r);
	struct mrmgr__share *sh = mrmgr__share_of(r);
	struct ibv_mr *mr = NULL;
	int ret;

	ret = mrmgr__core_reg_extra(c, mrmgr__share_cache_of(c)->pds[i], start,
				    len, mrmgr__rgn_access(r), &mr);
	if (ret) {
		MRMGR__LOG_IF(ret == EFAULT || ret == EINVAL ? MRMGR_LOG_ERROR
							   : MRMGR_LOG_WARN,
			   "registering [%#llx, +%llu) access %#x in PD %d: %s",
			   (unsigned long long)start, (unsigned long long)len,
			   mrmgr__rgn_access(r), i, strerror(ret));
		return ret;
	}
	mrmgr__core_count(c, share_pd_registrations, 1);
	mrmgr__core_count(c, share_pd_mrs, 1);
	sh->npd_mrs++;
	__atomic_store_n(&sh->pd_mrs[i], mr, __ATOMIC_RELEASE);
	mrmgr__share_update_set(c, r);
	return 0;
}

int mrmgr__multi_get(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		     uint64_t last, unsigned int access, unsigned int slot,
		     struct mrmgr_region **out)
{
	int i = mrmgr__multi_pd_index(c, pd);
	struct mrmgr_region *r = NULL;
	int ret = 0;

	if (i < 0) {
		mrmgr__err("mrmgr_get_ex: the cache does not serve PD %p",
			   (void *)pd);
		return EINVAL;
	}
	r = mrmgr__core_try_hit(c, start, last, access, slot);
	if (r && mrmgr__multi_mr(r, (size_t)i)) {
		*out = r;
		return 0;
	}
	mrmgr__core_lock(c);
	if (!r) /* the miss registers in the PD that asked */
		ret = mrmgr__core_get_pd_locked(c, mrmgr__share_cache_of(c)->pds[i],
						start, last, access, slot, 0, &r);
	if (!ret && !mrmgr__share_of(r)->pd_mrs[i]) {
		ret = add_pd_mr(c, r, i);
		if (ret)
			mrmgr__core_unref_locked(c, r, slot);
	}
	mrmgr__core_unlock(c);
	if (!ret)
		*out = r;
	return ret;
}

/* ------------------------------------------------------------ hooks */

/* Its per-PD MR table before the region is used. */
static int multipd_region_alloc(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	return mrmgr__share_get(c, r);
}

static int multipd_get(struct mrmgr_cache *c, struct ibv_pd *pd,
		       uint64_t start, uint64_t last, unsigned int access,
		       unsigned int slot, struct mrmgr_region **out)
{
	return mrmgr__multi_get(c, pd, start, last, access, slot, out);
}

/*
 * Only caches of several PDs carry these hooks (features.c hands
 * mrmgr__multi_create() a list with them): a cache of one PD pays
 * nothing for them, not even a test. Releasing the other PDs' MRs is
 * the share set's (share.c), which owns the region's share state.
 */
const struct mrmgr__ext mrmgr__ext_multipd = {
	.name = "multipd",
	.id = MRMGR__EXT_ID_MULTIPD,
	.region_alloc = multipd_region_alloc,
	.region_added = mrmgr__share_region_new,
	.get = multipd_get,
	.region_mr = mrmgr__region_plain_mr,
};

/* ------------------------------------------------------------ creation */

int mrmgr__multi_create(struct ibv_pd *pd, const struct mrmgr_cache_attr *attr,
			const struct mrmgr__ext *const *exts,
			struct mrmgr_cache **cache)
{
	struct ibv_pd *const *pds = attr->pds;
	size_t npds = attr->npds;
	struct mrmgr_cache_attr one = *attr;
	struct mrmgr__share_cache *sc;
	struct mrmgr_cache *c;
	int ret;

	if (!pds || !cache || npds == 0 || npds > MAX_PDS) {
		mrmgr__err("mrmgr_cache_create: %s",
			   !pds || !cache ? "NULL pds or cache pointer"
					  : "between 1 and 64 PDs");
		return EINVAL;
	}
	if (pd && pd != pds[0]) {
		mrmgr__err("mrmgr_cache_create: the PD is not the first of "
			   "attr->pds");
		return EINVAL;
	}
	for (size_t i = 0; i < npds; i++) {
		if (!pds[i] || !pds[i]->context) {
			mrmgr__err("mrmgr_cache_create: PD %zu is NULL", i);
			return EINVAL;
		}
		for (size_t j = 0; j < i; j++)
			if (pds[j] == pds[i]) {
				mrmgr__err("mrmgr_cache_create: PD %zu "
					   "repeats PD %zu", i, j);
				return EINVAL;
			}
		if (mrmgr__dev_for(pds[i]->context) !=
		    mrmgr__dev_for(pds[0]->context)) {
			mrmgr__err("mrmgr_cache_create: PD %zu is of "
				   "another backend than PD 0 (simulated and "
				   "real devices do not mix)", i);
			return EINVAL;
		}
	}
	sc = calloc(1, sizeof(*sc));
	if (sc)
		sc->pds = calloc(npds, sizeof(*sc->pds));
	if (!sc || !sc->pds) {
		free(sc);
		return ENOMEM;
	}
	memcpy(sc->pds, pds, npds * sizeof(*pds));
	sc->npds = npds;

	/* The core makes the cache over the first PD; the others are ours.
	 * One implicit MR, one PD: ODP views cannot serve several PDs, and
	 * prefetch works on one PD. Pinned it is, decided before the cache
	 * is built. */
	one.comp_mask &= ~(uint64_t)MRMGR_CACHE_ATTR_PDS;
	ret = mrmgr__cache_create_ex(pds[0], &one, exts, MRMGR__CREATE_PINNED,
				     "multi-PD caches register pinned memory "
				     "(ODP views serve one PD)", &c);
	if (ret) {
		free(sc->pds);
		free(sc);
		return ret;
	}
	/* Not handed out yet: nobody else sees the cache. */
	*mrmgr__share_cache_slot(c) = sc;
	mrmgr__core_init_flags(c, MRMGR__CACHE_MULTI_PD, 0);
	mrmgr__info("multi-PD cache over %zu PDs", npds);
	*cache = c;
	return 0;
}

MRMGR_EXPORT struct ibv_mr *mrmgr_region_mr_pd(const mrmgr_region_t *region,
					       const struct ibv_pd *pd)
{
	const struct mrmgr_cache *c;
	int i;

	if (!region || !pd)
		return NULL;
	c = mrmgr__rgn_cache(region);
	if (!(mrmgr__core_flags(c) & MRMGR__CACHE_MULTI_PD)) {
		struct ibv_mr *mr = mrmgr__rgn_mr(region);

		return mr && mr->pd == pd ? mr : NULL;
	}
	i = mrmgr__multi_pd_index(c, pd);
	return i < 0 ? NULL : mrmgr__multi_mr(region, (size_t)i);
}
