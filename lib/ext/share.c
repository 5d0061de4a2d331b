/*
 * Share sets: the rule every member follows (exports are in export.c,
 * aliases in alias.c, a multi-PD cache's MRs in multipd.c).
 *
 * A region's share set is every MR that maps its memory: its MRs in each
 * PD of a multi-PD cache (multipd.c) and its exports to other processes.
 * The set is what makes sharing safe:
 *   - membership sets MRMGR__REGION_SHARED, so growth never re-registers
 *     the region in place (grow.c's blocker): a translation rereg would
 *     make the shared MR private under its sharers. Growth registers a
 *     new, private region; the old one keeps its members until they go;
 *   - an export pins the region (one reference, like a get): it is not
 *     evicted, and invalidation detaches it from the cache (no get
 *     returns it again) but does not deregister it while the export
 *     lives. ibv_import_mr() shares the kernel object and counts nothing,
 *     so deregistering under an importer would kill its MR mid-operation;
 *   - invalidation marks the region's exports revoked: the memory is no
 *     longer what was registered, importers must stop (the share server
 *     tells them) and the owner releases the export when they have; the
 *     MR is deregistered at that last release;
 *   - cache destruction refuses (EBUSY) while exports live and says which;
 *     MRMGR_DESTROY_FORCE revokes them and drops their pins.
 *
 * Locking: a region's share state and its exports are under its cache's
 * lock. An export whose cache was destroyed by force is an orphan
 * (cache == NULL), touched only by whoever holds it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "ext.h"
#include "ids.h"
#include "log.h"
#include "share.h"


/* ------------------------------------------------------------ share state */

int mrmgr__share_get(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__share *sh = mrmgr__share_of(r);
	const struct mrmgr__share_cache *sc = mrmgr__share_cache_of(c);
	size_t npds = sc ? sc->npds : 0;

	if (!sh) {
		sh = calloc(1, sizeof(*sh));
		if (!sh)
			return ENOMEM;
	}
	if (npds && !sh->pd_mrs) {
		sh->pd_mrs = calloc(npds, sizeof(*sh->pd_mrs));
		if (!sh->pd_mrs) {
			if (!mrmgr__share_of(r))
				free(sh);
			return ENOMEM;
		}
	}
	/* Lock-free readers (accessors) load it with acquire. It stays
	 * while the cache lives: the region is deregistered under the lock
	 * from now on (its release hook needs the state). */
	__atomic_store_n(mrmgr__share_slot(r), sh, __ATOMIC_RELEASE);
	mrmgr__rgn_release_locked(r);
	return 0;
}

int mrmgr__share_cache_get(struct mrmgr_cache *c)
{
	struct mrmgr__share_cache **sc = mrmgr__share_cache_slot(c);

	if (!*sc) {
		*sc = calloc(1, sizeof(**sc));
		if (!*sc)
			return ENOMEM;
	}
	return 0;
}

void mrmgr__share_update_set(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__share *sh = mrmgr__share_of(r);
	int in = sh->npd_mrs >= 2 || sh->nexports > 0 || sh->naliases > 0;

	if (in != sh->in_set) {
		sh->in_set = in;
		if (in)
			mrmgr__core_count(c, share_sets, 1);
		else
			mrmgr__core_count(c, share_sets, -1);
	}
}

void mrmgr__share_pin(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	/* A reference like a get's, on this thread's stripe; dropped with
	 * mrmgr__core_unref_locked() from any thread (stripes add up). */
	mrmgr__rgn_ref(r, mrmgr__core_slot(c));
	mrmgr__rgn_set_flags(r, MRMGR__REGION_SHARED, 0);
	mrmgr__share_update_set(c, r);
}

void mrmgr__share_member_gone(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	const struct mrmgr__share *sh = mrmgr__share_of(r);

	/* A multi-PD region stays shared: its PDs' MRs are members too. */
	if (!sh->nexports && !sh->naliases &&
	    !(mrmgr__core_flags(c) & MRMGR__CACHE_MULTI_PD))
		mrmgr__rgn_set_flags(r, 0, MRMGR__REGION_SHARED);
	mrmgr__share_update_set(c, r);
}

void mrmgr__share_region_release(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__share *sh = mrmgr__share_of(r);

	/* Exports pin their region, so none can be left here. */
	if (sh->pd_mrs)
		mrmgr__multi_release(c, r);
	sh->npd_mrs = 0;
	mrmgr__share_update_set(c, r);
}

void mrmgr__share_region_free(struct mrmgr_region *r)
{
	struct mrmgr__share *sh = mrmgr__share_of(r);

	if (sh) {
		free(sh->pd_mrs);
		free(sh);
		*mrmgr__share_slot(r) = NULL;
	}
}

void mrmgr__share_cache_free(struct mrmgr_cache *c)
{
	struct mrmgr__share_cache **sc = mrmgr__share_cache_slot(c);

	if (*sc) {
		free((*sc)->pds);
		free(*sc);
		*sc = NULL;
	}
}

void mrmgr__share_invalidated(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint32_t importers = 0;

	for (struct mrmgr_export *e = mrmgr__share_of(r)->exports; e; e = e->next) {
		if (__atomic_exchange_n(&e->revoked, 1, __ATOMIC_RELEASE))
			continue;
		importers += e->importers;
		mrmgr__core_count(c, share_revocations, 1);
	}
	for (struct mrmgr_alias *a = mrmgr__share_of(r)->aliases; a; a = a->next)
		if (!__atomic_exchange_n(&a->revoked, 1, __ATOMIC_RELEASE))
			mrmgr__core_count(c, share_revocations, 1);
	if (mrmgr__share_of(r)->exports || mrmgr__share_of(r)->aliases)
		mrmgr__info("[%#llx, +%llu) invalidated while shared (%u "
			    "exports, %u importers, %u aliases): revoked; it "
			    "stays registered until they are released",
			    (unsigned long long)mrmgr__rgn_start(r),
			    (unsigned long long)mrmgr__rgn_len(r),
			    mrmgr__share_of(r)->nexports, importers, mrmgr__share_of(r)->naliases);
}

uint64_t mrmgr__share_force(struct mrmgr_cache *c)
{
	unsigned int slot = mrmgr__core_slot(c);
	uint64_t n = 0;
	struct mrmgr_region *r;
	size_t i;

	mrmgr__core_for_each_region(c, r, i) {
		struct mrmgr_export *e;

		while (mrmgr__share_of(r) &&
		       (e = mrmgr__share_of(r)->exports)) {
			mrmgr__export_unlink(c, e);
			if (!__atomic_exchange_n(&e->revoked, 1, __ATOMIC_RELEASE))
				mrmgr__core_count(c, share_revocations, 1);
			if (e->importers) {
				mrmgr__core_count(c, share_forced, 1);
				mrmgr__warn("forced: export %llu of [%#llx, "
					    "+%llu) deregistered with %u "
					    "importers attached",
					    (unsigned long long)e->desc.export_id,
					    (unsigned long long)mrmgr__rgn_start(r),
					    (unsigned long long)mrmgr__rgn_len(r),
					    e->importers);
			}
			e->forced = 1;
			e->cache = NULL;
			e->r = NULL;
			n++;
			/* The pin: the region goes now if nothing else holds it. */
			mrmgr__core_unref_locked(c, r, slot);
		}
		while (mrmgr__share_of(r) && mrmgr__share_of(r)->aliases) {
			mrmgr__warn("forced: the alias at %p of [%#llx, +%llu) is "
				    "deregistered", mrmgr__share_of(r)->aliases->addr,
				    (unsigned long long)mrmgr__rgn_start(r),
				    (unsigned long long)mrmgr__rgn_len(r));
			mrmgr__core_count(c, share_revocations, 1);
			mrmgr__core_unref_locked(
				c, mrmgr__alias_force(c, mrmgr__share_of(r)->aliases),
				slot);
			n++;
		}
	}
	return n;
}

void mrmgr__share_report_busy(struct mrmgr_cache *c)
{
	unsigned int lines = 0, more = 0;
	struct mrmgr_region *r;
	size_t i;

	mrmgr__core_for_each_region(c, r, i) {
		int state = mrmgr__rgn_state(r);

		if (!mrmgr__share_of(r) || state == MRMGR__REGION_FREE)
			continue;
		for (struct mrmgr_export *e = mrmgr__share_of(r)->exports; e; e = e->next) {
			if (lines++ >= 16) {
				more++;
				continue;
			}
			mrmgr__err("mrmgr_cache_destroy: [%#llx, +%llu) is "
				   "exported (export %llu%s, %u importers "
				   "attached); release the export, or destroy "
				   "with MRMGR_DESTROY_FORCE",
				   (unsigned long long)mrmgr__rgn_start(r),
				   (unsigned long long)mrmgr__rgn_len(r),
				   (unsigned long long)e->desc.export_id,
				   __atomic_load_n(&e->revoked, __ATOMIC_RELAXED)
					   ? ", revoked" : "",
				   e->importers);
		}
		for (struct mrmgr_alias *a = mrmgr__share_of(r)->aliases; a; a = a->next) {
			if (lines++ >= 16) {
				more++;
				continue;
			}
			mrmgr__err("mrmgr_cache_destroy: [%#llx, +%llu) has an "
				   "alias at %p; destroy the alias, or destroy "
				   "with MRMGR_DESTROY_FORCE",
				   (unsigned long long)mrmgr__rgn_start(r),
				   (unsigned long long)mrmgr__rgn_len(r), a->addr);
		}
		if (mrmgr__share_of(r)->npd_mrs >= 2 &&
		    mrmgr__rgn_refs(r) >
			    (int64_t)(mrmgr__share_of(r)->nexports + mrmgr__share_of(r)->naliases)) {
			if (lines++ >= 16) {
				more++;
				continue;
			}
			mrmgr__err("mrmgr_cache_destroy: [%#llx, +%llu) is held, "
				   "with MRs in %u PDs",
				   (unsigned long long)mrmgr__rgn_start(r),
				   (unsigned long long)mrmgr__rgn_len(r),
				   mrmgr__share_of(r)->npd_mrs);
		}
	}
	if (more)
		mrmgr__err("mrmgr_cache_destroy: and %u more share-set members",
			   more);
}

/* ------------------------------------------------------------ import probe */

/* Can the device import? Asked of its provider once per device and
 * process (the seam's learnt-capability table). */
int mrmgr__share_probe(struct ibv_pd *pd)
{
	return mrmgr__dev_can_import(pd);
}

/* ------------------------------------------------------------ query */

static void put_info(struct mrmgr_share_info *info, size_t max,
		     size_t info_size, size_t idx,
		     const struct mrmgr_share_info *one)
{
	if (idx >= max)
		return;
	memcpy((char *)info + idx * info_size, one,
	       info_size < sizeof(*one) ? info_size : sizeof(*one));
}

MRMGR_EXPORT int mrmgr_region_query_shares(const mrmgr_region_t *r,
					   struct mrmgr_share_info *info,
					   size_t max, size_t info_size,
					   size_t *n)
{
	struct mrmgr_cache *c;
	const struct mrmgr__share *sh;
	struct mrmgr_share_info one;
	size_t k = 0, npds;
	uint32_t detached;
	int64_t refs;

	if (!r || !n || !info_size || (max && !info)) {
		mrmgr__err("mrmgr_region_query_shares: %s",
			   !r ? "NULL region" : !n ? "NULL count"
			   : !info_size ? "info_size 0" : "NULL info");
		return EINVAL;
	}
	c = mrmgr__rgn_cache(r);
	mrmgr__core_lock(c);
	refs = mrmgr__rgn_refs(r);
	detached = !mrmgr__rgn_live(r)
			   ? MRMGR_SHARE_DETACHED : 0;
	sh = mrmgr__share_of(r);
	npds = (mrmgr__core_flags(c) & MRMGR__CACHE_MULTI_PD)
		       ? mrmgr__share_cache_of(c)->npds : 1;
	for (size_t i = 0; i < npds; i++) {
		struct ibv_mr *mr = (mrmgr__core_flags(c) & MRMGR__CACHE_MULTI_PD)
					    ? sh->pd_mrs[i] : mrmgr__rgn_mr(r);

		if (!mr)
			continue;
		memset(&one, 0, sizeof(one));
		one.kind = MRMGR_SHARE_MR;
		one.flags = detached;
		one.pd = mr->pd;
		one.mr = mr;
		one.addr = mrmgr__rgn_start(r);
		one.length = mrmgr__rgn_len(r);
		one.lkey = mr->lkey;
		one.rkey = mr->rkey;
		one.access = mrmgr__rgn_access(r);
		one.refs = refs > 0 ? (uint64_t)refs : 0;
		put_info(info, max, info_size, k++, &one);
	}
	for (struct mrmgr_export *e = sh ? sh->exports : NULL; e;
	     e = e->next) {
		memset(&one, 0, sizeof(one));
		one.kind = MRMGR_SHARE_EXPORT;
		one.flags = detached | (__atomic_load_n(&e->revoked, __ATOMIC_RELAXED)
						? MRMGR_SHARE_REVOKED : 0);
		one.pd = e->mr->pd;
		one.mr = e->mr;
		one.addr = e->desc.addr;
		one.length = e->desc.length;
		one.lkey = e->desc.lkey;
		one.rkey = e->desc.rkey;
		one.access = e->desc.access;
		one.importers = e->importers;
		one.refs = 1;
		one.export_id = e->desc.export_id;
		put_info(info, max, info_size, k++, &one);
	}
	for (struct mrmgr_alias *a = sh ? sh->aliases : NULL; a;
	     a = a->next) {
		memset(&one, 0, sizeof(one));
		one.kind = MRMGR_SHARE_ALIAS;
		one.flags = detached | (__atomic_load_n(&a->revoked, __ATOMIC_RELAXED)
						? MRMGR_SHARE_REVOKED : 0);
		one.pd = a->mr->pd;
		one.mr = a->mr;
		one.addr = (uint64_t)(uintptr_t)a->addr;
		one.length = a->len;
		one.lkey = a->mr->lkey;
		one.rkey = a->mr->rkey;
		one.access = a->access;
		one.refs = 1;
		put_info(info, max, info_size, k++, &one);
	}
	mrmgr__core_unlock(c);
	*n = k;
	return 0;
}

/* ------------------------------------------------------------ hooks */

/* Its MRs in other PDs, its share-set membership. */
static void share_region_released(struct mrmgr_cache *c,
				  struct mrmgr_region *r)
{
	if (mrmgr__share_of(r))
		mrmgr__share_region_release(c, r);
}

/* Its exports are revoked. */
static void share_region_invalidated(struct mrmgr_cache *c,
				     struct mrmgr_region *r)
{
	if (mrmgr__share_of(r))
		mrmgr__share_invalidated(c, r);
}

/* MRMGR_DESTROY_FORCE: exports give up their pins. */
static void share_destroy_begin(struct mrmgr_cache *c, uint64_t flags)
{
	if ((flags & MRMGR_DESTROY_FORCE) && mrmgr__share_cache_of(c))
		(void)mrmgr__share_force(c);
}

static int share_destroy_check(struct mrmgr_cache *c, uint64_t busy)
{
	if (busy && mrmgr__share_cache_of(c))
		mrmgr__share_report_busy(c);
	return 0;
}

/* The regions' memory is their slabs'; their share state is not. */
static void share_free(struct mrmgr_cache *c)
{
	struct mrmgr_region *r;
	size_t i;

	mrmgr__core_for_each_region(c, r, i)
		mrmgr__share_region_free(r);
	mrmgr__share_cache_free(c);
}

const struct mrmgr__ext mrmgr__ext_share = {
	.name = "share",
	.id = MRMGR__EXT_ID_SHARE,
	.priv_size = sizeof(struct mrmgr__share_cache *),
	.region_size = sizeof(struct mrmgr__share *),
	/* A region with share state is marked (mrmgr__share_get()). */
	.scope = MRMGR__EXT_RELEASED_MARKED,
	.free = share_free,
	.region_released = share_region_released,
	.region_invalidated = share_region_invalidated,
	.destroy_begin = share_destroy_begin,
	.destroy_check = share_destroy_check,
};
