/*
 * The cache object. Laid out by who writes what: the first line is read by
 * every hit and written only when the tree changes; the writer's state sits
 * behind the lock on lines of its own. Hits write only their thread's
 * reference words and hit counters, which live in the region slabs
 * (region.h), so hits never share a written line.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__CACHE_H
#define MRMGR__CACHE_H

#include <pthread.h>
#include <stdint.h>

#include <mrmgr/mrmgr.h>

#include "device.h"
#include "compiler.h"
#include "config_env.h"
#include "core.h"
#include "itree.h"
#include "kind.h"
#include "ext.h"
#include "lookup.h"
#include "events.h"
#include "monitor.h"
#include "region.h"
#include "request.h"

struct mrmgr__stale;

/* mrmgr_cache::lockers: the threads that have taken the cache lock. */
enum mrmgr__lockers {
	MRMGR__LOCKER_NONE,  /* none yet */
	MRMGR__LOCKER_ONE,   /* lock_owner only */
	MRMGR__LOCKER_MANY,  /* a second thread too (for good) */
};

/*
 * A miss registering [start, last] with the cache lock released
 * (miss.c): other misses that would register an overlapping range wait
 * for it, and an invalidation of an overlapping range marks it dropped
 * (its registration is then not cached). On the registering thread's
 * stack, linked under the lock.
 */
struct mrmgr__inflight {
	uint64_t start, last;
	int dropped;
	struct mrmgr__inflight *next, *prev;
};

/* Effective settings after attr and environment. */
struct mrmgr__cache_config {
	uint64_t max_regions;
	uint64_t max_bytes;
	uint64_t flags; /* enum mrmgr_cache_flags */
	uint32_t odp_mode, odp_flags, odp_transports, odp_ops; /* odp.c */
	uint32_t monitor; /* enum mrmgr_monitor_mode */
	/* user_data.c: called as each region leaves (may be NULL) */
	void (*region_gone)(mrmgr_region_t *, unsigned int, void *);
	void *region_gone_arg;
	struct mrmgr__config_src src; /* config_env.c: where each came from */
};

struct mrmgr_cache {
	/* Read by hits. */
	_Alignas(MRMGR__CACHELINE) uint64_t seq; /* odd while the tree changes */
	struct mrmgr__itree tree;
	unsigned int nstripes;                   /* power of two */
	unsigned int page_shift;
	uint64_t flags;
	struct mrmgr__lk_table *lk;              /* the tree's index (lookup.h);
						  * NULL: walk the tree */
	uint64_t mon_seen;                       /* event word last drained */

	/* Writer side: everything below is under lock. */
	_Alignas(MRMGR__CACHELINE) pthread_mutex_t lock;
	struct ibv_pd *pd;
	const struct mrmgr_device_ops *ops;  /* the device provider (device.h) */
	const struct mrmgr__kind *kind;     /* what it caches (kinds/kind.h):
					      * the miss registers and watches
					      * through it, hits never read it */
	void *kind_ctx;                     /* the kind's state (NULL: none) */
	struct mrmgr__dev_caps caps;
	struct mrmgr__cache_config cfg;
	const struct mrmgr__ext *const *exts; /* the features (ext.h) */
	struct mrmgr__core_view view;    /* what features read (core.h) */
	char *ext_priv;                  /* the features' private state */
	void *ext_priv_of[MRMGR__EXT_MAX]; /* view.c: by feature id, its
					    * state (NULL: none) */
	uint16_t ext_roff_of[MRMGR__EXT_MAX]; /* and the offset of its state
					       * in a region (0: none) */
	unsigned int ext_hooks; /* enum mrmgr__ext_hooks: which hooks the
				 * busy features have (ext.c) */
	unsigned int ext_idle;  /* by feature id: its miss and region hooks
				 * are skipped (mrmgr__core_init_idle()) */
	unsigned int reg_access;         /* ORed into every registration */
	int unpinned;                    /* registrations pin nothing (ODP):
					  * max_bytes bounds no merge */
	struct mrmgr__lru_link lru;      /* head: lru.next is the oldest */
	struct mrmgr__lru_link held;     /* cached regions found held (evict.c) */
	uint32_t evict_round;            /* evict.c: make_room() calls */
	struct mrmgr__lru_link *age_hand; /* evict.c: where the ageing hand
					   * is on lru; NULL: the oldest */
	struct mrmgr_region *free_list;  /* type-stable spare regions */
	struct mrmgr__region_slabs rslabs; /* their memory, freed with the
					    * cache */
	struct mrmgr_region **all;       /* every region ever made */
	size_t nall, all_cap;
	uint64_t nregions;               /* registered: cached or held */
	uint64_t ncached;                /* in the tree */
	uint64_t pinned_bytes;
	uint64_t next_gen;
	struct mrmgr_stats st;           /* slow-path counters */
	struct mrmgr__lookup lookup;     /* lookup.c: the index's writer side */
	struct mrmgr__stale *stale;      /* stale.c: MRMGR_CACHE_CHECK_STALE */
	/* stale.c's check of every get, set by its init: a pointer, so get.c
	 * and stale.c (which gets afresh) form no cycle at link level. */
	int (*check_get)(struct mrmgr_cache *c, uint64_t start, uint64_t last,
			 unsigned int access, unsigned int slot,
			 struct mrmgr_region *r, struct mrmgr_region **out);
	struct mrmgr__mon_cache mon;     /* memory events (monitor.h) */
	struct mrmgr__inflight inflight; /* ring of registrations under way
					  * without the lock (miss.c) */
	pthread_cond_t inflight_done;    /* one of them ended */
	unsigned int inflight_waiters;   /* threads waiting on it (lock) */
	/* Who has taken the lock (mrmgr__cache_lock()): while only one
	 * thread has, a miss keeps it while it registers (miss.c). */
	enum mrmgr__lockers lockers;
	uintptr_t lock_owner;            /* the one (mrmgr__cache_locker()) */
	struct mrmgr_region *reap;       /* eviction's victims, to deregister
					  * (retire.c; room.c) */
	struct ibv_mr **deferred;        /* dereg.c: failed deregistrations */
	size_t ndeferred, deferred_cap;
};

void mrmgr__cache_note_locker(struct mrmgr_cache *c);

/*
 * The calling thread, as the lockers count knows it: the address of one
 * of its thread-local variables (no call, unlike pthread_self()). A
 * thread that starts after another ended may get the same one; the two
 * never lock at once, which is all the count is about.
 */
static inline uintptr_t mrmgr__cache_locker(void)
{
	return (uintptr_t)&mrmgr__tls_slot;
}

/*
 * Take the cache lock, counting the threads that take it: a miss keeps
 * the lock while it registers until a second thread has taken it
 * (miss.c). Once two have, the count costs a load per lock; until then
 * a compare with the one.
 */
static inline void mrmgr__cache_lock(struct mrmgr_cache *c)
{
	pthread_mutex_lock(&c->lock);
	if (mrmgr__unlikely(c->lockers != MRMGR__LOCKER_MANY) &&
	    c->lock_owner != mrmgr__cache_locker())
		mrmgr__cache_note_locker(c);
}

/*
 * mrmgr_cache::ext_hooks: which of the hooks every miss may call some busy
 * feature has (as its scope narrows them, ext.h), so that a miss no
 * feature is concerned with calls none (ext.c sets them).
 */
enum mrmgr__ext_hooks {
	MRMGR__HAS_ALLOC = 1,
	MRMGR__HAS_ADDED = 2,
	MRMGR__HAS_RELEASED = 4,        /* for every region */
	MRMGR__HAS_RELEASED_MARKED = 8, /* for release_locked regions */
	MRMGR__HAS_PLAN = 16,           /* for every miss */
	MRMGR__HAS_PLAN_MERGED = 32,    /* for merged misses */
};

/* Whether mrmgr__ext_plan_miss() has a hook to call for m. */
static inline int mrmgr__ext_wants_plan(const struct mrmgr_cache *c,
					const struct mrmgr__miss *m)
{
	return c->ext_hooks & (m->merged ? MRMGR__HAS_PLAN |
						   MRMGR__HAS_PLAN_MERGED
					 : MRMGR__HAS_PLAN);
}

/* Whether mrmgr__ext_region_released() has a hook to call for r. */
static inline int mrmgr__ext_wants_released(const struct mrmgr_cache *c,
					    const struct mrmgr_region *r)
{
	return c->ext_hooks & (r->release_locked ? MRMGR__HAS_RELEASED |
							   MRMGR__HAS_RELEASED_MARKED
						 : MRMGR__HAS_RELEASED);
}

/* view.c: the view and the features' state, at creation (0 or ENOMEM)
 * and destruction. */
int mrmgr__view_init(struct mrmgr_cache *c);
void mrmgr__view_fini(struct mrmgr_cache *c);

/* ext.c: the features' hooks (ext.h), run in list order. */
int mrmgr__ext_init(struct mrmgr_cache *c);
void mrmgr__ext_fini(struct mrmgr_cache *c);
void mrmgr__ext_free(struct mrmgr_cache *c);
int mrmgr__ext_plan_miss(struct mrmgr_cache *c, struct mrmgr__miss *m,
			 struct mrmgr_region **out);
int mrmgr__ext_region_alloc(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__ext_region_added(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__ext_region_released(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__ext_region_invalidated(struct mrmgr_cache *c,
				   struct mrmgr_region *r);
void mrmgr__ext_destroy_begin(struct mrmgr_cache *c, uint64_t flags);
int mrmgr__ext_destroy_check(struct mrmgr_cache *c, uint64_t busy);
void mrmgr__ext_stats(struct mrmgr_cache *c, struct mrmgr_stats *s);
int mrmgr__ext_get(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		   uint64_t last, unsigned int access, unsigned int slot,
		   struct mrmgr_region **out);
void mrmgr__ext_after_get(struct mrmgr_cache *c, struct mrmgr_region *r,
			  void *addr, size_t length, unsigned int access,
			  uint64_t get_flags);
struct ibv_mr *mrmgr__ext_region_mr(const struct mrmgr_region *r);

/*
 * dereg.c (mrmgr__core_dereg(), core.h): the retry of failed
 * deregistrations runs at each release while any
 * is kept, and at destroy (last_chance: what fails then is abandoned).
 */
void mrmgr__cache_dereg_retry(struct mrmgr_cache *c, int last_chance);

/* A put found its region not live: release it if that was the last user. */
void mrmgr__cache_put_slow(struct mrmgr_cache *c, struct mrmgr_region *r);

/*
 * check.c: puts that were never got. mrmgr__region_refs() for a region
 * the caller may release, with the lock held: a sum below zero (more
 * puts than gets) is reported, counted and undone, and 0 returned. where
 * says what the cache was doing, for the log line.
 */
int64_t mrmgr__region_refs_checked(struct mrmgr_cache *c,
				   struct mrmgr_region *r, const char *where);
/* MRMGR_CHECK / MRMGR_CACHE_CHECK, at creation. */
void mrmgr__check_init(struct mrmgr_cache *c);
/* The cache flags MRMGR_CHECK asks for (a warning per unknown word when
 * say is set). */
unsigned int mrmgr__check_env_flags(int say);
/* Nonzero once a cache checks its puts: mrmgr_put() asks check.c. */
extern int mrmgr__check_puts;
/* The put of a checked cache, under its lock; 0 when r's cache does not
 * check (the caller does the ordinary put). */
int mrmgr__put_checked(struct mrmgr_region *r);

/*
 * account.c: registration accounting in one place. A registration's
 * counters and debug line (ret: the device's answer); a registration of
 * len bytes of kind (enum mrmgr__region_kind) counted (sign 1) or
 * uncounted (-1) against the limits. Features use the pair
 * mrmgr__core_reg_extra() / mrmgr__core_dereg_extra() (core.h).
 */
void mrmgr__core_reg_done(struct mrmgr_cache *c, uint64_t start, uint64_t len,
			  unsigned int access, int ret);
void mrmgr__core_account_reg(struct mrmgr_cache *c, int kind, uint64_t len,
			     int sign);

/* Regions callers hold now; O(n), call with the lock held. */
uint64_t mrmgr__cache_regions_in_use(struct mrmgr_cache *c);

/* The regions of the tree and of the LRU list. */
static inline struct mrmgr_region *
mrmgr__node_region(const struct mrmgr__itree_node *n)
{
	return mrmgr__container_of(n, struct mrmgr_region, node);
}

static inline struct mrmgr_region *mrmgr__lru_region(struct mrmgr__lru_link *l)
{
	return mrmgr__container_of(l, struct mrmgr_region, lru);
}

/*
 * Between the core's files (what features may call is core.h). All with
 * the lock held unless said otherwise.
 */
/* release.c: a region for a new registration (NULL: out of memory). */
struct mrmgr_region *mrmgr__cache_alloc_region(struct mrmgr_cache *c);
/* Deregister an idle region that is out of the tree, and recycle it. */
void mrmgr__cache_release_region(struct mrmgr_cache *c, struct mrmgr_region *r);
/* The same for a victim of eviction, but its MR goes on c->reap for the
 * caller to deregister (a region whose release needs the lock, or a
 * view, is released at once). */
void mrmgr__cache_retire_region(struct mrmgr_cache *c, struct mrmgr_region *r);
/* Out of the tree and off the LRU (still watched: _take; unwatched:
 * _remove). */
void mrmgr__cache_tree_take(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__cache_tree_remove(struct mrmgr_cache *c, struct mrmgr_region *r);
/* Make a region that is out of the tree live again. */
void mrmgr__cache_publish_region(struct mrmgr_cache *c, struct mrmgr_region *r);
/* A miss's new region, not referenced yet: published with its first
 * reference on slot's stripe, marked new (mrmgr__region_go_live_ref()). */
void mrmgr__cache_publish_new(struct mrmgr_cache *c, struct mrmgr_region *r,
			      unsigned int slot);
/* Evicted regions retired during a miss: deregister them (no lock;
 * returns how many succeeded), recycle them (lock), or both (lock). */
uint64_t mrmgr__cache_reap_dereg(struct mrmgr_cache *c,
				 struct mrmgr_region *list);
void mrmgr__cache_reap_recycle(struct mrmgr_cache *c, struct mrmgr_region *list,
			       uint64_t deregistered);
void mrmgr__cache_reap_locked(struct mrmgr_cache *c);
/* room.c: evict until n more regions of len more bytes fit (0: they
 * cannot), or every idle region; the victims are left on c->reap for the
 * caller (mrmgr__cache_reap_locked(), or the miss's unlocked reap). */
int mrmgr__cache_make_room(struct mrmgr_cache *c, uint64_t n, uint64_t len);
void mrmgr__cache_evict_all_idle(struct mrmgr_cache *c);
/* retire.c: the LRU list; parked (held) regions back on it. */
void mrmgr__lru_unlink(struct mrmgr_region *r);
void mrmgr__lru_append(struct mrmgr_cache *c, struct mrmgr_region *r);
void mrmgr__lru_unpark_all(struct mrmgr_cache *c);
/* miss.c: register [start, last] for a get that missed, in pd (NULL:
 * the cache's PD, c->pd; it may drop the lock: MRMGR__GET_MAY_UNLOCK). MRMGR__MISS_AGAIN: it waited for another
 * registration; look again. */
#define MRMGR__MISS_AGAIN (-1)
int mrmgr__cache_miss(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		      uint64_t last, unsigned int access, unsigned int slot,
		      unsigned int gflags, struct mrmgr_region **out);
/* inflight.c, lock held: link a reservation, unlink it (waking
 * waiters), wait for one to end. */
void mrmgr__inflight_begin(struct mrmgr_cache *c, struct mrmgr__inflight *f,
			   uint64_t start, uint64_t last);
void mrmgr__inflight_end(struct mrmgr_cache *c, struct mrmgr__inflight *f);
void mrmgr__inflight_wait(struct mrmgr_cache *c);
/* The reservation overlapping [start, last], or NULL (lock held; every
 * miss asks, and mostly none is under way). */
static inline struct mrmgr__inflight *
mrmgr__inflight_find(struct mrmgr_cache *c, uint64_t start, uint64_t last)
{
	for (struct mrmgr__inflight *f = c->inflight.next; f != &c->inflight;
	     f = f->next)
		if (f->start <= last && start <= f->last)
			return f;
	return NULL;
}
/* [start, last] is invalidated: registrations under way over it are not
 * cached. */
void mrmgr__cache_inflight_drop(struct mrmgr_cache *c, uint64_t start,
				uint64_t last);
/* invalidate.c: apply the memory events that arrived since last time. */
void mrmgr__cache_apply_events(struct mrmgr_cache *c);

#endif /* MRMGR__CACHE_H */
