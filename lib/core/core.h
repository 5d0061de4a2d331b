/*
 * What features (lib/ext) call the core through: one small header. All
 * with the cache lock held (mrmgr__core_lock()) unless said otherwise.
 * What a feature may hook is ext.h.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__CORE_H
#define MRMGR__CORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <mrmgr/mrmgr.h>

#include "device.h"

struct ibv_mr;
struct ibv_pd;
struct mrmgr_cache;
struct mrmgr_region;
struct mrmgr__ext;

/* ------------------------------------------------------------ the view */

/*
 * The cache as a feature reads it: what the core decided at creation
 * (the device, its capabilities, the effective configuration, the page
 * size), never written by a feature. The PD changes only through
 * mrmgr__core_set_pd(). Valid for the cache's life.
 */
struct mrmgr__core_view {
	struct ibv_pd *pd;                  /* the cache's (first) PD */
	const struct mrmgr_device_ops *ops; /* its device's provider */
	const struct mrmgr__dev_caps *caps; /* what the device said */
	uint64_t max_regions, max_bytes;    /* the limits */
	uint64_t cfg_flags;                 /* enum mrmgr_cache_flags */
	uint32_t odp_mode, odp_flags, odp_transports, odp_ops;
	unsigned int page_shift;
	unsigned int nstripes;              /* reference stripes (slots) */
};
const struct mrmgr__core_view *mrmgr__core_view(const struct mrmgr_cache *c);

/* The cache's flags word as hits read it (enum mrmgr_cache_flags and
 * ext.h's bits). No lock. */
uint64_t mrmgr__core_flags(const struct mrmgr_cache *c);

/*
 * Creation only (a feature's init, the cache not shared yet): what every
 * registration ORs into its access, and whether registrations pin
 * nothing (ODP: max_bytes then bounds no merge); bits of the flags word
 * to set and clear (ext.h's, which send gets to the features' hooks).
 */
void mrmgr__core_init_reg(struct mrmgr_cache *c, unsigned int reg_access,
			  int unpinned);
void mrmgr__core_init_flags(struct mrmgr_cache *c, uint64_t set,
			    uint64_t clear);

/*
 * Creation only: ext has nothing to do for this cache's misses and
 * regions (its plan_miss and region hooks are not called; the others
 * are), e.g. ODP in a cache that registers pinned memory. A miss then
 * pays nothing for the feature.
 */
void mrmgr__core_init_idle(struct mrmgr_cache *c, const struct mrmgr__ext *ext);

/* Bytes of pinned registrations counted against max_bytes now (lock
 * held). */
uint64_t mrmgr__core_pinned_bytes(const struct mrmgr_cache *c);

/* Whether memory nobody asked for (growth headroom) may be registered in
 * c: every change to it reaches the cache before and after the kernel
 * acts (events.c, from the memory-event sources). No lock needed. */
int mrmgr__mon_headroom_ok(struct mrmgr_cache *c);

/* The calling thread's reference slot in c. No lock. */
unsigned int mrmgr__core_slot(const struct mrmgr_cache *c);

/*
 * A feature's private state, ext->priv_size zeroed bytes the core
 * allocated before the feature's init and frees after its free hook
 * (NULL when the feature is not in c's list or asked for none); and a
 * region's, ext->region_size bytes beside the region, zeroed when the
 * region is first made and kept while the cache lives (regions are
 * type-stable: the state survives the region's reuse). No lock.
 */
void *mrmgr__core_priv(const struct mrmgr_cache *c,
		       const struct mrmgr__ext *ext);
void *mrmgr__core_region_priv(const struct mrmgr_region *r,
			      const struct mrmgr__ext *ext);

/* A fresh registration number (the one a region takes when it is
 * registered or re-registered), lock held. */
uint64_t mrmgr__core_next_gen(struct mrmgr_cache *c);

/* ------------------------------------------------------------ counters */

/*
 * The one counter API: add delta (negative for gauges going down) to
 * the slow-path statistic named by field (struct mrmgr_stats), lock held.
 */
void mrmgr__core_count_at(struct mrmgr_cache *c, size_t offset, int64_t delta);
#define mrmgr__core_count(c, field, delta)                                  \
	mrmgr__core_count_at((c), offsetof(struct mrmgr_stats, field) +     \
				  MRMGR__STAT_IS_U64(field),                \
			     (int64_t)(delta))
/* 0, and a compile error unless the statistic is a 64-bit counter. */
#define MRMGR__STAT_IS_U64(field)                                           \
	(0 * sizeof(char[sizeof(((struct mrmgr_stats *)0)->field) == 8      \
				 ? 1 : -1]))

/* ------------------------------------------------------------ regions */

/* What backs a region; set once when it is made. */
enum mrmgr__region_kind {
	MRMGR__REGION_PINNED = 0, /* its own pinned MR */
	MRMGR__REGION_ODP,        /* its own explicit ODP MR: nothing pinned */
	MRMGR__REGION_VIEW,       /* a range of the cache's implicit ODP MR:
				   * no MR of its own, never deregistered */
};

/*
 * Bits of a region's flags: what backs the MR beyond plain pinned
 * memory. grow.c never re-registers such a region in place (a translation
 * rereg makes a shared MR private; peer memory and dma-buf MRs have no
 * user translation to change): they grow by make-before-break.
 */
enum mrmgr__region_flags {
	MRMGR__REGION_SHARED = 1u << 0, /* shared with other PDs or processes */
	MRMGR__REGION_PEER = 1u << 1,   /* peer memory or dma-buf */
	MRMGR__REGION_BUFFER = 1u << 2, /* a growable buffer's (buf.c) */
};

enum mrmgr__region_state {
	/* In the tree and on the LRU: hits may take it. */
	MRMGR__REGION_LIVE = 0,
	/* Being checked for eviction under the cache lock. */
	MRMGR__REGION_EVICTING,
	/* Out of the tree; deregistered when its references reach zero. */
	MRMGR__REGION_DETACHED,
	/* On the free list. */
	MRMGR__REGION_FREE,
	/* A fork child's copy of a region its parent held: never released. */
	MRMGR__REGION_ABANDONED,
};

/* A region as a feature reads it (lock held, or the region held). */
uint64_t mrmgr__rgn_start(const struct mrmgr_region *r);
uint64_t mrmgr__rgn_last(const struct mrmgr_region *r);
static inline uint64_t mrmgr__rgn_len(const struct mrmgr_region *r)
{
	return mrmgr__rgn_last(r) - mrmgr__rgn_start(r) + 1;
}
struct ibv_mr *mrmgr__rgn_mr(const struct mrmgr_region *r);
unsigned int mrmgr__rgn_access(const struct mrmgr_region *r);
int mrmgr__rgn_kind(const struct mrmgr_region *r); /* mrmgr__region_kind */
unsigned int mrmgr__rgn_flags(const struct mrmgr_region *r);
uint64_t mrmgr__rgn_gen(const struct mrmgr_region *r);
struct mrmgr_cache *mrmgr__rgn_cache(const struct mrmgr_region *r);
int mrmgr__rgn_state(const struct mrmgr_region *r); /* mrmgr__region_state */
/* Whether hits may take it (in the tree, on the LRU). */
int mrmgr__rgn_live(const struct mrmgr_region *r);
/* The sum of its references (lock held). */
int64_t mrmgr__rgn_refs(const struct mrmgr_region *r);
/* A feature keeps state for r that its release hook must see with the
 * lock held: r is deregistered under the lock from now on, never after
 * it (an evicted region's MR otherwise goes once the lock is free). For
 * the cache's life. */
void mrmgr__rgn_release_locked(struct mrmgr_region *r);
/* Set and clear bits of its flags (lock held). */
void mrmgr__rgn_set_flags(struct mrmgr_region *r, unsigned int set,
			  unsigned int clear);
/* Take one reference on slot (a region the caller holds, or live under
 * the lock); _used also marks it used, as a new region is (evict.c). */
void mrmgr__rgn_ref(struct mrmgr_region *r, unsigned int slot);
void mrmgr__rgn_ref_used(struct mrmgr_region *r, unsigned int slot);
/* Drop one the caller holds on slot, releasing nothing: the caller then
 * quiesces, detaches or releases the region itself (lock held). */
void mrmgr__rgn_unref(struct mrmgr_region *r, unsigned int slot);
/* What gets asked of r: its range less headroom (lock held). */
void mrmgr__rgn_set_asked(struct mrmgr_region *r, uint64_t start,
			  uint64_t last);

/* ------------------------------------------------------------ iterators */

/*
 * The cached regions overlapping [start, last], in address order (lock
 * held; the loop may not change the tree), and every region the cache
 * ever made, whatever its state (lock held).
 */
struct mrmgr_region *mrmgr__core_first_overlap(struct mrmgr_cache *c,
					       uint64_t start, uint64_t last);
struct mrmgr_region *mrmgr__core_next_overlap(struct mrmgr_region *r,
					      uint64_t start, uint64_t last);
#define mrmgr__core_for_each_overlap(c, r, start, last)                     \
	for ((r) = mrmgr__core_first_overlap((c), (start), (last)); (r);    \
	     (r) = mrmgr__core_next_overlap((r), (start), (last)))
struct mrmgr_region *mrmgr__core_region_at(struct mrmgr_cache *c, size_t i);
#define mrmgr__core_for_each_region(c, r, i)                                \
	for ((i) = 0; ((r) = mrmgr__core_region_at((c), (i))) != NULL; (i)++)

/* The cache lock: every slow-path step below runs under it. */
void mrmgr__core_lock(struct mrmgr_cache *c);
void mrmgr__core_unlock(struct mrmgr_cache *c);

/* Flags of mrmgr__core_get_locked(). */
enum mrmgr__get_flags {
	MRMGR__GET_NO_GROW = 1u << 0,  /* no in-place rereg, no headroom */
	MRMGR__GET_NO_MERGE = 1u << 1, /* register exactly [start, last] */
	/* The caller holds nothing else across the call: the miss may drop
	 * the lock while it registers (and takes it again before returning) */
	MRMGR__GET_MAY_UNLOCK = 1u << 2,
};

/* mrmgr_get() after the hit path: look again, else register. */
int mrmgr__core_get_locked(struct mrmgr_cache *c, uint64_t start,
			   uint64_t last, unsigned int access,
			   unsigned int slot, unsigned int gflags,
			   struct mrmgr_region **out);
/*
 * The same, and a miss registers in pd (a PD the cache serves) rather
 * than in the cache's own PD: a region holds one MR per PD, the one the
 * miss makes is r->mr, in pd (r->mr->pd). NULL pd: the cache's PD.
 */
int mrmgr__core_get_pd_locked(struct mrmgr_cache *c, struct ibv_pd *pd,
			      uint64_t start, uint64_t last,
			      unsigned int access, unsigned int slot,
			      unsigned int gflags, struct mrmgr_region **out);
/*
 * Take a live region out of hit reach if it is idle, by the eviction
 * protocol (state first, then the stripes), then out of the tree and off
 * the LRU. Returns 1 when done; 0, leaving it live, when it is held.
 */
int mrmgr__core_quiesce(struct mrmgr_cache *c, struct mrmgr_region *r);
/* Put a region that is out of the tree back in: live, on the LRU. */
void mrmgr__core_publish(struct mrmgr_cache *c, struct mrmgr_region *r);
/*
 * Tests only (tests/unit/test_rereg_window.c): each of the two watches
 * that classify a rereg's new range turned off, so a test shows the
 * other one alone keeps unwatchable memory out of the cache. 0 in
 * production. mrmgr__rereg_test_no_watch: the rereg does not watch its
 * new range (nor commit, nor abort); mrmgr__publish_test_no_watch: the
 * publish puts the region back as it is, with the watch it has.
 */
extern int mrmgr__rereg_test_no_watch, mrmgr__publish_test_no_watch;
/* Detach a live region for good; returns 1 when it was idle and released. */
int mrmgr__core_detach(struct mrmgr_cache *c, struct mrmgr_region *r);
/* Deregister and recycle an idle region that is out of the tree. */
void mrmgr__core_release(struct mrmgr_cache *c, struct mrmgr_region *r);
/* Drop a reference on slot; release the region if that freed it. */
void mrmgr__core_unref_locked(struct mrmgr_cache *c, struct mrmgr_region *r,
			      unsigned int slot);
/* mrmgr_invalidate() of [start, last]: detach every cached region that
 * overlaps it. Returns how many. */
uint64_t mrmgr__core_invalidate_locked(struct mrmgr_cache *c, uint64_t start,
				       uint64_t last);
/*
 * Evict idle regions until regions more regions and bytes more bytes fit
 * the limits; 0 when they cannot.
 */
int mrmgr__core_make_room(struct mrmgr_cache *c, uint64_t regions,
			  uint64_t bytes);
/*
 * Call fn once on every region cached when it starts, oldest first; fn may
 * quiesce, detach or publish the region it is given (and nothing else).
 */
void mrmgr__core_each_cached(struct mrmgr_cache *c,
			     void (*fn)(struct mrmgr_cache *c,
			     struct mrmgr_region *r, void *arg),
			     void *arg);
/*
 * Whether cached region r joins a miss whose requests span [as, al]
 * (the request and what was asked of the regions joined so far) and
 * whose registration spans [s, l]: r overlaps it and either what was
 * asked of r overlaps [as, al] or r lies inside [s, l]. A region the
 * miss overlaps only in its headroom (memory nobody asked for, perhaps
 * the next buffer) stays apart.
 */
int mrmgr__core_joins(const struct mrmgr_region *r, uint64_t as, uint64_t al,
		      uint64_t s, uint64_t l);

/*
 * rereg.c: re-register idle region r, out of the tree (quiesced), in
 * place with ibv_rereg_mr() flags (IBV_REREG_MR_CHANGE_*) to [start,
 * start+len), access, pd. A new translation is watched first:
 * MRMGR__REREG_UNWATCHED, nothing tried, when it cannot be. Else the
 * device's code, its errno in *err; on 0 and IBV_REREG_MR_ERR_DO_FORK_OLD
 * (the new registration in force) the region has its new range, access,
 * generation and keys, and the accounting follows. What the other codes
 * mean is the caller's (grow.c).
 */
#define MRMGR__REREG_UNWATCHED (-1000)
int mrmgr__core_rereg(struct mrmgr_cache *c, struct mrmgr_region *r,
		      int flags, struct ibv_pd *pd, uint64_t start,
		      uint64_t len, unsigned int access, int *err);

/*
 * Tests only (tests/unit/test_rereg_window.c): called, lock held, after
 * a translation rereg to [s, l] succeeded and before its watch commits:
 * the window rereg.c's "a refused commit marks the region dirty" is
 * about (the device may hold the pages a change now releases), held open
 * so that a test changes memory there, as another thread could. NULL in
 * production.
 */
extern void (*mrmgr__rereg_test_window)(uint64_t s, uint64_t l);

/*
 * Move the cache to pd (of the same device), lock held: misses register
 * there from now on; what is cached is the caller's to move.
 */
void mrmgr__core_set_pd(struct mrmgr_cache *c, struct ibv_pd *pd);

/* mrmgr_get()'s access check (EINVAL and a log line). */
int mrmgr__core_check_access(const char *fn, unsigned int access);

/* mrmgr_get()'s checks of a request: EINVAL and a log line, or 0 and the
 * page-aligned [*start, *last]. No lock. */
int mrmgr__core_check_request(const char *fn, const struct mrmgr_cache *c,
			      const void *addr, size_t length,
			      unsigned int access, uint64_t *start,
			      uint64_t *last);
/*
 * The features' accounting pair. An MR more for a held region (another
 * PD's, multipd.c): room for one
 * more registration, the device's call with a retry after evicting every
 * idle region, the counters and the accounting. 0 or the device's errno
 * (counted). Lock held.
 */
int mrmgr__core_reg_extra(struct mrmgr_cache *c, struct ibv_pd *pd,
			  uint64_t start, uint64_t len, unsigned int access,
			  struct ibv_mr **mr);
/* Its pair: deregister such an MR of len bytes (kept to retry when that
 * fails, dereg.c), counted, and no longer against the limits. */
void mrmgr__core_dereg_extra(struct mrmgr_cache *c, struct ibv_mr *mr,
			     uint64_t len, const char *what);
/* The lock-free hit path, as mrmgr_get() takes it (not with caching off,
 * not while memory events wait to be applied): a region referenced on
 * slot, or NULL. */
struct mrmgr_region *mrmgr__core_try_hit(struct mrmgr_cache *c, uint64_t start,
					 uint64_t last, unsigned int access,
					 unsigned int slot);
/* Evict every idle region (before retrying an ENOMEM registration). */
void mrmgr__core_evict_all_idle(struct mrmgr_cache *c);

/*
 * dereg.c, with the lock held (or before the cache is shared): deregister
 * mr; when that fails, log it (what names the MR) and keep it to retry.
 * Returns the device's answer.
 */
int mrmgr__core_dereg(struct mrmgr_cache *c, struct ibv_mr *mr,
		      const char *what);

#endif /* MRMGR__CORE_H */
