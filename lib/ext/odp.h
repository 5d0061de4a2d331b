/*
 * On-demand paging: the cache's ODP mode (decided once, at creation, from
 * the device's odp_caps), the implicit MR, the mapping check that keeps
 * ODP away from memory it would fault on, and prefetch hints.
 *
 * How the cache uses it (its hooks, mrmgr__ext_odp, ext.h):
 *   - creation calls mrmgr__odp_init(); destruction mrmgr__odp_fini();
 *   - a miss plans through mrmgr__odp_miss() (ODP modes only), which checks the
 *     mapping and says what kind of region to make: an explicit ODP
 *     registration, or (implicit mode) a view of the implicit MR that
 *     needs no registration at all;
 *   - registrations carry the cache's reg_access (IBV_ACCESS_ON_DEMAND in
 *     ODP modes); ODP regions are accounted in odp_bytes, not pinned_bytes,
 *     and views are never deregistered;
 *   - a successful get may issue the automatic prefetch hint.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__ODP_H
#define MRMGR__ODP_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include <mrmgr/mrmgr.h>

#include "core.h"
#include "ext.h"

struct mrmgr_cache;
struct mrmgr_region;

/*
 * The automatic prefetch policy: the core's after-get bit of
 * mrmgr_cache::flags (ext.h), on the line every hit already reads.
 */
#define MRMGR__CACHE_AUTO_PREFETCH MRMGR__CACHE_AFTER_GET

/* The feature as the core sees it (ext.h). */
extern const struct mrmgr__ext mrmgr__ext_odp;

/* Prefetch counters: updated with atomic adds outside the cache lock. */
struct mrmgr__prefetch_stats {
	uint64_t calls, sges, batches, noops, failures, retries;
};

struct mrmgr__odp {
	uint32_t requested;         /* enum mrmgr_odp_mode asked for */
	uint32_t mode;              /* effective: OFF, EXPLICIT or IMPLICIT */
	uint32_t reason;            /* enum mrmgr_odp_reason */
	uint32_t flags;             /* enum mrmgr_odp_flags */
	uint32_t transports, ops;   /* what the caps were checked for */
	unsigned int reg_access;    /* ORed into every registration */
	unsigned int implicit_access;
	struct ibv_mr *implicit_mr; /* implicit mode only */
	char reason_text[160];
	/*
	 * Advice values the device refused with EOPNOTSUPP/ENOTSUP/ENOSYS:
	 * bit (1 << advice). Learnt once, then prefetches with that advice
	 * are no-ops without a system call. On Linux ENOTSUP == EOPNOTSUPP,
	 * so "no advise at all" and "not this advice" cannot be told apart
	 * by the number; remembering per advice serves both.
	 */
	uint32_t unsupported;
	struct mrmgr__prefetch_stats pst;
};

/* The feature's state (core.h): its struct mrmgr__odp, made by the core
 * with the cache, set at creation and never changed after it. */
static inline struct mrmgr__odp *mrmgr__odp_of(const struct mrmgr_cache *c)
{
	return mrmgr__core_priv(c, &mrmgr__ext_odp);
}

/* Decide the mode and register the implicit MR. 0 or a positive errno. */
int mrmgr__odp_init(struct mrmgr_cache *c);
/* Deregister the implicit MR. The cache holds no regions any more. */
void mrmgr__odp_fini(struct mrmgr_cache *c);

/*
 * For a miss in an ODP mode, with the cache lock held: check that
 * [*rs, *rl] is mapped with the protections *racc needs (falling back to
 * the request [start, last] with access when the merged span fails), and
 * choose the region kind (enum mrmgr__region_kind). Returns 0, or EFAULT
 * with a log line when even the request is unmapped or read-only for a
 * write access: ODP would accept the registration and fail at fault time.
 */
int mrmgr__odp_miss(struct mrmgr_cache *c, uint64_t start, uint64_t last,
		    unsigned int access, uint64_t *rs, uint64_t *rl,
		    unsigned int *racc, int *merged, int *kind);

/* Accounting of an ODP region or view entering or leaving the cache. */
void mrmgr__odp_region_added(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__odp_region_gone(struct mrmgr_cache *c, struct mrmgr_region *r);

/* Whether a successful get with these mrmgr_get_ex() flags hints. */
static inline int mrmgr__odp_want_hint(uint64_t cache_flags, uint64_t get_flags)
{
	if (get_flags & MRMGR_GET_NO_PREFETCH)
		return 0;
	return (get_flags & MRMGR_GET_PREFETCH) ||
	       (cache_flags & MRMGR__CACHE_AUTO_PREFETCH);
}

/*
 * The automatic hint after a get: an asynchronous PREFETCH(_WRITE) of
 * [addr, addr+length) through a held region; nothing for pinned regions.
 * Failures are counted and logged, never returned.
 */
void mrmgr__odp_get_hint(struct mrmgr_region *r, void *addr, size_t length,
			 unsigned int access);

/* Fill the ODP part of the statistics. */
void mrmgr__odp_stats(struct mrmgr_cache *c, struct mrmgr_stats *s);

#endif /* MRMGR__ODP_H */
