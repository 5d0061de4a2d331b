/*
 * What a feature may hook: the core (lib/core) names no feature; growth,
 * ODP, sharing and buffers (lib/ext) each describe themselves with one
 * struct mrmgr__ext, and the public creation entry point (ext/features.c)
 * hands the core the list. The core calls the hooks on the slow path only
 * (creation, destruction, a miss under the lock, a region made, released
 * or invalidated, statistics): never on a hit, and a hit never looks at
 * the list. Every hook may be NULL; they run in list order.
 *
 * A feature keeps its per-cache state in priv_size bytes the core
 * allocates for it (mrmgr__core_priv()) and its per-region state in
 * region_size bytes beside each region (mrmgr__core_region_priv()), as
 * UCX's region_struct_size and libfabric's entry_data_size. A feature
 * includes core.h and ext.h of the core, nothing else of it
 * (tests/arch/check-layers.sh).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__EXT_H
#define MRMGR__EXT_H

#include <stdint.h>
#include <stddef.h>

#include <mrmgr/mrmgr.h>

struct mrmgr_cache;
struct mrmgr_region;

/*
 * Bits of mrmgr_cache::flags above the public ones, on the line every hit
 * reads: either one sends every get to the slow path (one shift tests
 * both), where the core calls the hooks they announce.
 */
/* A successful mrmgr_get() calls the after_get hooks. */
#define MRMGR__CACHE_AFTER_GET (UINT64_C(1) << 63)
/* Gets go to the get hook (a feature answers them); regions keep no keys
 * in their reference words (the MR depends on who asks). */
#define MRMGR__CACHE_EXT_GET (UINT64_C(1) << 62)

/* plan_miss(): go on with the miss. */
#define MRMGR__PLAN_GO_ON (-1)

/*
 * A miss, as the hooks may shape it. The request [start, last] with
 * access is fixed; the span [rs, rl] with racc is what will be
 * registered; [as, al] is what was asked of the regions it absorbs.
 */
struct mrmgr__miss {
	uint64_t start, last;
	unsigned int access;
	unsigned int slot;   /* the caller's reference word */
	unsigned int gflags; /* enum mrmgr__get_flags (core.h) */
	uint64_t rs, rl;
	unsigned int racc;
	uint64_t as, al;
	int merged; /* the span absorbs cached regions */
	int kind;   /* enum mrmgr__region_kind of the region to make */
	/* kind MRMGR__REGION_VIEW: the MR that already covers the span
	 * (no registration); it outlives the region. */
	struct ibv_mr *view_mr;
};

/* Narrower calls of a feature's hooks (mrmgr__ext::scope). */
enum mrmgr__ext_scope {
	/* plan_miss only for a miss whose span absorbs cached regions
	 * (mrmgr__miss::merged set by the merge). */
	MRMGR__EXT_PLAN_MERGED = 1,
	/* region_released only for regions the feature marked with
	 * mrmgr__rgn_release_locked() (it keeps state in them). */
	MRMGR__EXT_RELEASED_MARKED = 2,
};

/* Features a cache may have at most; their ids are below it. */
#define MRMGR__EXT_MAX 8
/* The core's own hook table (stale.c, MRMGR_CHECK=stale) takes the last
 * number, so lib/ext's numbers (lib/ext/ids.h) stay the features'. */
#define MRMGR__EXT_ID_STALE (MRMGR__EXT_MAX - 1)

struct mrmgr__ext {
	const char *name;
	/* The feature's number, below MRMGR__EXT_MAX and its own among the
	 * library's features (lib/ext/ids.h): where the core keeps its
	 * state, so that finding it costs a load, not a search. */
	unsigned int id;
	/* Bytes of private state per cache and per region (core.h). */
	size_t priv_size;
	size_t region_size;
	/* enum mrmgr__ext_scope: the misses and regions its plan_miss and
	 * region_released hooks concern, when fewer than all (0: all). The
	 * core does not call them for the others, so a miss that no
	 * feature is concerned with calls no hook at all. */
	unsigned int scope;
	/* Creation, cache not shared yet: 0 or a positive errno (the hooks
	 * that ran are undone by fini and free). */
	int (*init)(struct mrmgr_cache *c);
	/* Destruction, lock held, every region released. */
	void (*fini)(struct mrmgr_cache *c);
	/* Destruction, last, no lock: free the feature's memory. */
	void (*free)(struct mrmgr_cache *c);
	/*
	 * A miss, lock held, after the merge: 0 with *out referenced on
	 * m->slot (the feature answered), MRMGR__PLAN_GO_ON, or a positive
	 * errno (the get fails).
	 */
	int (*plan_miss)(struct mrmgr_cache *c, struct mrmgr__miss *m,
			 struct mrmgr_region **out);
	/* A region is taken for a new registration (lock held): 0, or
	 * ENOMEM and the miss fails. */
	int (*region_alloc)(struct mrmgr_cache *c, struct mrmgr_region *r);
	/* A region has its MR, range, access and kind (lock held). */
	void (*region_added)(struct mrmgr_cache *c, struct mrmgr_region *r);
	/* A region is deregistered (lock held); its MR is still there. */
	void (*region_released)(struct mrmgr_cache *c, struct mrmgr_region *r);
	/* A cached region is invalidated, before it is detached. */
	void (*region_invalidated)(struct mrmgr_cache *c,
				   struct mrmgr_region *r);
	/* mrmgr_cache_destroy_ex(), lock held, before counting the busy
	 * regions (MRMGR_DESTROY_FORCE lets members go). */
	void (*destroy_begin)(struct mrmgr_cache *c, uint64_t flags);
	/* Then, busy regions held: report what holds them, 0 or EBUSY
	 * (with a log line) when the feature's own objects still use it. */
	int (*destroy_check)(struct mrmgr_cache *c, uint64_t busy);
	/* mrmgr_cache_query_stats(), no lock: the feature's counters. */
	void (*stats)(struct mrmgr_cache *c, struct mrmgr_stats *s);
	/* MRMGR__CACHE_EXT_GET: the body of mrmgr_get() and mrmgr_get_ex()
	 * (request checked, page-aligned); pd: the PD asked for
	 * (mrmgr_get_attr::pd), NULL for the cache's first. */
	int (*get)(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		   uint64_t last, unsigned int access, unsigned int slot,
		   struct mrmgr_region **out);
	/* After a successful get: mrmgr_get() (get_flags 0, only with
	 * MRMGR__CACHE_AFTER_GET) or mrmgr_get_ex() (its flags; with none,
	 * only with MRMGR__CACHE_AFTER_GET too). */
	void (*after_get)(struct mrmgr_cache *c, struct mrmgr_region *r,
			  void *addr, size_t length, unsigned int access,
			  uint64_t get_flags);
	/* MRMGR__CACHE_EXT_GET: the MR the plain accessors report. */
	struct ibv_mr *(*region_mr)(const struct mrmgr_region *r);
};

/*
 * cache.c: make a cache with the features of exts (NULL-terminated,
 * static). The body of mrmgr_cache_create(), which ext/features.c
 * defines with the library's list.
 */
int mrmgr__cache_create(struct ibv_pd *pd, const struct mrmgr_cache_attr *attr,
			const struct mrmgr__ext *const *exts,
			struct mrmgr_cache **cache);

/* Decisions a feature takes before the cache is built (create_ex()). */
enum mrmgr__create_flags {
	/*
	 * Every registration pins (no ODP): an ODP mode asked for (attr or
	 * environment) is turned off, with an info line saying why; asked
	 * with MRMGR_ODP_STRICT for a mode other than auto, creation fails
	 * with EOPNOTSUPP and an error line.
	 */
	MRMGR__CREATE_PINNED = 1u << 0,
};

/* The same with cflags (enum mrmgr__create_flags); why: the reason, for
 * the log lines. */
int mrmgr__cache_create_ex(struct ibv_pd *pd,
			   const struct mrmgr_cache_attr *attr,
			   const struct mrmgr__ext *const *exts,
			   unsigned int cflags, const char *why,
			   struct mrmgr_cache **cache);

/* The core's own stale check (stale.c, MRMGR_CHECK=stale): in a cache's
 * list only when asked for (ext/features.c), so a cache without it pays
 * nothing anywhere; mrmgr__stale_wanted() says whether a cache made with
 * these attribute flags asks (the flag or MRMGR_CHECK). */
extern const struct mrmgr__ext mrmgr__ext_stale;
int mrmgr__stale_wanted(uint64_t attr_flags);

#endif /* MRMGR__EXT_H */
