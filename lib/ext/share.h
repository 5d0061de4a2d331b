/*
 * Share sets: every MR that maps a region's memory besides the one the
 * cache registered for it. Three sources:
 *   - multi-PD caches (multipd.c): one region, one MR per PD asked for;
 *   - exports (share.c): the region's MR handed to other processes
 *     through ibv_import_mr(); each export pins the region;
 *   - aliases (alias.c): the region's pages, from a shared file, mapped
 *     again and registered again; each pins the region;
 *   - imports on the other side are not in a cache: they are tracked by
 *     the importer and the share helpers, in libmrmgr-share (share/),
 *     which uses the public API only (mrmgr_export_importers() tells an
 *     export its importers).
 *
 * How the cache uses it (its hooks, mrmgr__ext_share and, in a cache of
 * several PDs, mrmgr__ext_multipd, ext.h): a multi-PD cache calls
 * mrmgr__share_region_new() on every region it makes; a
 * region with share state (mrmgr__share_of()) calls mrmgr__share_region_release()
 * when it is deregistered and mrmgr__share_invalidated() when it is
 * invalidated; mrmgr_cache_destroy_ex() calls mrmgr__share_force() and
 * mrmgr__share_report_busy(). A multi-PD cache's gets go through
 * mrmgr__multi_get(). Everything here runs under the cache lock except
 * mrmgr__multi_get()'s hit path and the accessors, which read pd_mrs[]
 * with acquire loads: an entry is written once while the region is
 * referenced and cleared only when it is released.
 *
 * Regions in a share set carry MRMGR__REGION_SHARED, so grow.c never
 * re-registers them in place (a translation rereg would make the shared
 * MR private): growth registers a new, private region and the old one
 * keeps its members until they are released.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__SHARE_H
#define MRMGR__SHARE_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include <mrmgr/mrmgr.h>

#include "compiler.h"
#include "core.h"
#include "ext.h"

struct mrmgr_cache;

/*
 * The cache serves several PDs, so gets go through mrmgr__multi_get(): the
 * core's feature-get bit of mrmgr_cache::flags (ext.h), on the line every
 * get reads.
 */
#define MRMGR__CACHE_MULTI_PD MRMGR__CACHE_EXT_GET

/* The features as the core sees them (ext.h): share sets (every cache),
 * one MR per PD (caches of several PDs only, multipd.c). */
extern const struct mrmgr__ext mrmgr__ext_share;
extern const struct mrmgr__ext mrmgr__ext_multipd;

/* A region's share state; type-stable with the region (freed with the
 * cache), reset when the region is released. */
struct mrmgr__share {
	struct ibv_mr **pd_mrs;          /* multi-PD: [npds]; else NULL */
	unsigned int npd_mrs;            /* non-NULL entries of pd_mrs */
	unsigned int nexports;
	struct mrmgr_export *exports;    /* the region's live exports */
	unsigned int naliases;
	struct mrmgr_alias *aliases;     /* alias.c: its live aliases */
	int in_set;                      /* counted in share_sets */
};

/* An export (export.c); fields under its cache's lock. */
struct mrmgr_export {
	struct mrmgr_export *next, *prev; /* the region's exports (cache lock) */
	struct mrmgr_cache *cache;        /* NULL once orphaned by force */
	struct mrmgr_region *r;           /* pinned while cache != NULL */
	struct ibv_mr *mr;                /* the exported MR */
	struct mrmgr_export_desc desc;
	int cmd_fd;
	uint32_t importers;               /* as told by the share server */
	int revoked;                      /* atomic: read without the lock */
	int forced;
};

/* export.c: take e out of its region's share set (counts included), lock
 * held; the pin is the caller's to drop. */
void mrmgr__export_unlink(struct mrmgr_cache *c, struct mrmgr_export *e);

/* alias.c: an alias's mapping keeps the original's offset within this. */
#define MRMGR__ALIAS_ALIGN (UINT64_C(4) << 20)

/* An alias (alias.c); fields under its cache's lock. */
struct mrmgr_alias {
	struct mrmgr_alias *next, *prev; /* the region's aliases */
	struct mrmgr_cache *cache;       /* NULL once forced */
	struct mrmgr_region *r;          /* pinned while cache != NULL */
	struct ibv_mr *mr;               /* NULL once forced */
	void *addr;                      /* its own mapping of the file */
	uint64_t len;
	unsigned int access;
	int revoked;                     /* atomic */
};

/* alias.c: revoke by force, lock held; returns the region to unpin. */
struct mrmgr_region *mrmgr__alias_force(struct mrmgr_cache *c,
					struct mrmgr_alias *al);

/* A cache's share state, made on first need (multi-PD creation, first
 * export). */
struct mrmgr__share_cache {
	struct ibv_pd **pds;             /* multi-PD: npds PDs, [0] = the
					  * cache's PD */
	size_t npds;                     /* 0 for a single-PD cache */
};

/*
 * The feature's state (core.h): beside each region a pointer to its share
 * state, NULL until needed, kept while the cache lives (written under
 * the lock with a release store: accessors read it without the lock);
 * in the cache a pointer to the cache's, NULL until needed.
 */
static inline struct mrmgr__share **mrmgr__share_slot(const struct mrmgr_region *r)
{
	return mrmgr__core_region_priv(r, &mrmgr__ext_share);
}

static inline struct mrmgr__share *mrmgr__share_of(const struct mrmgr_region *r)
{
	return *mrmgr__share_slot(r);
}

static inline struct mrmgr__share_cache **
mrmgr__share_cache_slot(const struct mrmgr_cache *c)
{
	return mrmgr__core_priv(c, &mrmgr__ext_share);
}

static inline struct mrmgr__share_cache *
mrmgr__share_cache_of(const struct mrmgr_cache *c)
{
	return *mrmgr__share_cache_slot(c);
}

/* What its hooks (mrmgr__ext_share) call. Cache lock held. */
void mrmgr__share_region_new(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__share_region_release(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__share_invalidated(struct mrmgr_cache *c, struct mrmgr_region *r);
/* Revoke every export (drops their pins); returns how many. */
uint64_t mrmgr__share_force(struct mrmgr_cache *c);
/* Log which share-set members keep the cache busy. */
void mrmgr__share_report_busy(struct mrmgr_cache *c);
/* Cache destruction: free the region's share state / the cache's. */
void mrmgr__share_region_free(struct mrmgr_region *r);
void mrmgr__share_cache_free(struct mrmgr_cache *c);

/* share.c, for multipd.c: the region's share state, made on first need
 * (ENOMEM), and the share_sets gauge after a membership change. */
int mrmgr__share_get(struct mrmgr_cache *c, struct mrmgr_region *r);
/* The cache's share state, made on first need (ENOMEM). */
int mrmgr__share_cache_get(struct mrmgr_cache *c);
/* A new export or alias of r (counted in r's share state already): pin r
 * (one reference) and mark it shared. Lock held, r held by the caller. */
void mrmgr__share_pin(struct mrmgr_cache *c, struct mrmgr_region *r);
/* An export or alias of r is gone (uncounted already): r stays shared
 * while it has members. Lock held; the pin is the caller's to drop. */
void mrmgr__share_member_gone(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__share_update_set(struct mrmgr_cache *c, struct mrmgr_region *r);

/* Whether the device of pd can import (0) or not (EOPNOTSUPP), asked once
 * per device; another errno when the question could not be asked. */
int mrmgr__share_probe(struct ibv_pd *pd);

/* multipd.c */
/* mrmgr_cache_create() with MRMGR_CACHE_ATTR_PDS: the core's cache over
 * attr->pds[0], with the other PDs and one MR slot per PD per region. */
int mrmgr__multi_create(struct ibv_pd *pd, const struct mrmgr_cache_attr *attr,
			const struct mrmgr__ext *const *exts,
			struct mrmgr_cache **cache);
/* A multi-PD get (pd NULL: the cache's first PD); the body of mrmgr_get()
 * and mrmgr_get_ex() on such a cache. */
int mrmgr__multi_get(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		     uint64_t last, unsigned int access, unsigned int slot,
		     struct mrmgr_region **out);
/* Index of pd among the cache's PDs, or -1. */
int mrmgr__multi_pd_index(const struct mrmgr_cache *c, const struct ibv_pd *pd);
/* The MR a region has in the cache's PD i (acquire), or NULL. */
struct ibv_mr *mrmgr__multi_mr(const struct mrmgr_region *r, size_t i);
/* Deregister the region's MRs other than r->mr. Lock held. */
void mrmgr__multi_release(struct mrmgr_cache *c, struct mrmgr_region *r);

/*
 * The MR the plain accessors (mrmgr_region_mr(), _lkey, _rkey) report:
 * in a multi-PD cache the one in the cache's first PD (NULL until a get
 * asked for it there), else the region's own.
 */
static inline struct ibv_mr *mrmgr__region_plain_mr(const struct mrmgr_region *r)
{
	const struct mrmgr__share *sh =
		__atomic_load_n(mrmgr__share_slot(r), __ATOMIC_ACQUIRE);

	if (mrmgr__unlikely(sh && sh->pd_mrs))
		return __atomic_load_n(&sh->pd_mrs[0], __ATOMIC_ACQUIRE);
	return mrmgr__rgn_mr(r);
}

#endif /* MRMGR__SHARE_H */
