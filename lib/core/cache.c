/*
 * The registration cache: creation and destruction. The rest of the core
 * is one concept a file: get.c (the hit path and get), miss.c (register
 * what missed), release.c (put, detach, release), room.c (LRU and
 * eviction to the limits), invalidate.c (invalidation and the memory
 * events' queue), account.c (registration accounting), hit.h (the one
 * hit protocol), ext.h (the hooks features plug into), core.h (what
 * features call).
 *
 * Life of a registration:
 *   mrmgr_get() first tries the hit path, inline (fast_hit()): the lookup
 *   index in front of the interval tree (lookup.h) names a region that
 *   contains the range with the access, validated by the cache's sequence
 *   count, and a reference is taken on the calling thread's reference
 *   word of the region (region.h). Anything unusual (a miss, a change
 *   under way, a region being evicted, regions the index does not hold)
 *   goes to get(): the same with retries and the tree, then the slow
 *   path, which runs under the cache lock: look again, widen the range
 *   over overlapping and adjacent regions (merge), let grow.c grow the
 *   one region absorbed in place (ibv_rereg_mr) or widen the span
 *   (headroom), evict idle regions to stay within the limits (evict.c
 *   picks them), register, publish.
 *   mrmgr_put() drops the reference on its word; only when the region is
 *   no longer live (invalidated, merged away, uncached) does it take the
 *   lock to see whether it was the last one and deregister.
 *
 * Why the hit path is safe without a lock:
 *   - tree and index change together between seq_write_begin/end; a
 *     reader that saw the same even sequence before and after its lookup
 *     saw a consistent index (or tree), and any region removal bumps the
 *     sequence;
 *   - region memory is type-stable (never freed before the cache), so a
 *     reader on a stale pointer reads garbage, not freed memory, and its
 *     reference lands in a word that is still a reference word;
 *   - removing a region is "mark every reference word not live, then sum
 *     them" while a hit is "add to my word and look at what it held":
 *     read-modify-writes of the same word, so either the hit sees the
 *     mark and backs off, or the remover's sum sees the reference and
 *     leaves the region to its last put. A put is "subtract from my word
 *     and look": the last put of a region marked not live sees the mark.
 *
 * Memory events (monitor.h): a miss caches a range only once a source
 * watches it; a hit (fast_hit() and mrmgr__core_try_hit()'s callers)
 * first checks, with one load, that no event arrived since this cache last applied
 * them, else takes the slow path, which applies them (detaching the
 * regions they touch) before looking up.
 *
 * LRU: hits only set a "used" bit in their own reference word; the
 * eviction hand (evict.c) gives used regions a second chance (CLOCK), so
 * least-recently-used idle regions go first without hits ever writing a
 * shared list.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "config_env.h"
#include "core.h"
#include "evict.h"
#include "ext.h"
#include "hit.h"
#include "log.h"

/* MRMGR__CREATE_PINNED: no ODP, whatever was asked (0 or EOPNOTSUPP). */
static int decide_pinned(struct mrmgr__cache_config *cfg, const char *why)
{
	if (cfg->odp_mode == MRMGR_ODP_OFF)
		return 0;
	if ((cfg->odp_flags & MRMGR_ODP_STRICT) &&
	    cfg->odp_mode != MRMGR_ODP_AUTO) {
		mrmgr__err("mrmgr_cache_create: ODP was asked with "
			   "MRMGR_ODP_STRICT, but %s", why);
		return EOPNOTSUPP;
	}
	cfg->odp_mode = MRMGR_ODP_OFF;
	cfg->odp_flags &= ~(uint32_t)MRMGR_ODP_AUTO_PREFETCH;
	mrmgr__info("ODP off, pinned registrations: %s", why);
	return 0;
}

int mrmgr__cache_create(struct ibv_pd *pd, const struct mrmgr_cache_attr *attr,
			const struct mrmgr__ext *const *exts,
			struct mrmgr_cache **cache)
{
	return mrmgr__cache_create_ex(pd, attr, exts, 0, NULL, cache);
}

int mrmgr__cache_create_ex(struct ibv_pd *pd,
			   const struct mrmgr_cache_attr *attr,
			   const struct mrmgr__ext *const *exts,
			   unsigned int cflags, const char *why,
			   struct mrmgr_cache **cache)
{
	struct mrmgr__dev_caps caps;
	struct mrmgr__cache_config cfg;
	const struct mrmgr_device_ops *ops;
	struct mrmgr_cache *c;
	long psz = sysconf(_SC_PAGESIZE);
	int ret;

	if (!pd || !cache || !pd->context) {
		mrmgr__err("mrmgr_cache_create: NULL %s",
			   !cache ? "cache pointer" : "protection domain");
		return EINVAL;
	}
	ops = mrmgr__dev_for(pd->context);
	ret = mrmgr__dev_query(ops, pd->context, &caps);
	if (ret) {
		mrmgr__err("mrmgr_cache_create: querying the device: %s",
			   strerror(ret));
		return ret;
	}
	ret = mrmgr__cache_config_resolve(&cfg, attr, &caps);
	if (!ret && (cflags & MRMGR__CREATE_PINNED))
		ret = decide_pinned(&cfg, why ? why : "asked by a feature");
	if (ret)
		return ret;

	c = aligned_alloc(MRMGR__CACHELINE, sizeof(*c));
	if (!c)
		return ENOMEM;
	memset(c, 0, sizeof(*c));
	c->nstripes = mrmgr__stripes();
	c->page_shift = (unsigned int)__builtin_ctzl(psz > 0 ? (unsigned long)psz : 4096);
	c->flags = cfg.flags;
	c->pd = pd;
	c->ops = ops;
	c->kind = &mrmgr__kind_host; /* mrmgr_cache_create(): kind one */
	c->caps = caps;
	c->cfg = cfg;
	c->exts = exts;
	c->lru.prev = c->lru.next = &c->lru;
	c->held.prev = c->held.next = &c->held;
	c->inflight.prev = c->inflight.next = &c->inflight;
	mrmgr__itree_init(&c->tree);
	{
		/* The lock is held for a microsecond or two around each
		 * registration, which runs unlocked: a miss that finds it
		 * taken is better off spinning a little than sleeping in
		 * the kernel and paying a wake-up (2 threads missing: 1.71
		 * -> 1.80 times one thread's throughput, bench/compare). */
		pthread_mutexattr_t ma;

		pthread_mutexattr_init(&ma);
		pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
		pthread_mutex_init(&c->lock, &ma);
		pthread_mutexattr_destroy(&ma);
	}
	pthread_cond_init(&c->inflight_done, NULL);
	ret = mrmgr__view_init(c);
	if (!ret) {
		ret = mrmgr__ext_init(c);
		if (ret)
			mrmgr__view_fini(c);
	}
	if (ret) {
		pthread_cond_destroy(&c->inflight_done);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return ret;
	}
	mrmgr__check_init(c);
	mrmgr__info("cache on %s (%s backend): at most %llu regions, %llu "
		    "bytes; merge %s, caching %s",
		    caps.name, ops->name, (unsigned long long)cfg.max_regions,
		    (unsigned long long)cfg.max_bytes,
		    cfg.flags & MRMGR_CACHE_NO_MERGE ? "off" : "on",
		    cfg.flags & MRMGR_CACHE_DISABLE ? "off" : "on");
	/* Subscribed, known to fork(), then the sources started. */
	mrmgr__mon_cache_init(c);
	mrmgr__fork_track(c);
	mrmgr__mon_cache_start(c);
	*cache = c;
	return 0;
}

/* Regions referenced by callers now. O(n): stats and teardown only. */
uint64_t mrmgr__cache_regions_in_use(struct mrmgr_cache *c)
{
	/* Detached ones are held; nregions also counts the MRs multi-PD
	 * regions have in their other PDs. */
	uint64_t n = c->nregions - c->st.share_pd_mrs - c->ncached;

	for (struct mrmgr__lru_link *l = c->lru.next; l != &c->lru; l = l->next)
		if (mrmgr__region_refs_checked(c, mrmgr__lru_region(l), "idle") != 0)
			n++;
	for (struct mrmgr__lru_link *l = c->held.next; l != &c->held; l = l->next)
		if (mrmgr__region_refs_checked(c, mrmgr__lru_region(l), "idle") != 0)
			n++;
	return n;
}

static int destroy(struct mrmgr_cache *c, uint64_t flags)
{
	uint64_t busy;
	int ret;

	if (!c || (flags & ~(uint64_t)MRMGR_DESTROY_FORCE)) {
		mrmgr__err("mrmgr_cache_destroy: %s", !c ? "NULL cache"
							 : "unknown flags");
		return EINVAL;
	}
	if (c->kind->busy && c->kind->busy(c->kind_ctx)) {
		mrmgr__err("mrmgr_cache_destroy: the %s cache's handles are "
			   "still open; close them first", c->kind->name);
		return EBUSY;
	}
	pthread_mutex_lock(&c->lock);
	mrmgr__ext_destroy_begin(c, flags); /* forced members let go */
	busy = mrmgr__cache_regions_in_use(c);
	if (busy) {
		(void)mrmgr__ext_destroy_check(c, busy); /* who holds them */
		pthread_mutex_unlock(&c->lock);
		mrmgr__err("mrmgr_cache_destroy: %llu regions are still held; "
			   "put them first", (unsigned long long)busy);
		return EBUSY;
	}
	ret = mrmgr__ext_destroy_check(c, 0);
	if (ret) {
		pthread_mutex_unlock(&c->lock);
		return ret;
	}
	mrmgr__cache_reap_locked(c); /* empty: every miss drains what it retired */
	mrmgr__lru_unpark_all(c); /* idle, as checked above */
	while (c->lru.next != &c->lru) {
		struct mrmgr_region *r = mrmgr__lru_region(c->lru.next);

		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		mrmgr__cache_tree_remove(c, r);
		mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_DESTROYED);
		mrmgr__cache_release_region(c, r);
	}
	mrmgr__ext_fini(c);
	mrmgr__cache_dereg_retry(c, 1);
	pthread_mutex_unlock(&c->lock);
	mrmgr__fork_untrack(c);
	mrmgr__lookup_fini(c);
	/* The regions' memory is their slabs'; the features' is theirs. */
	mrmgr__ext_free(c);
	mrmgr__view_fini(c);
	mrmgr__region_slabs_free(&c->rslabs);
	if (c->kind->fini) /* every MR of the kind's is gone */
		c->kind->fini(c->kind_ctx);
	free(c->all);
	pthread_cond_destroy(&c->inflight_done);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

MRMGR_EXPORT int mrmgr_cache_destroy(mrmgr_cache_t *c)
{
	return destroy(c, 0);
}

MRMGR_EXPORT int mrmgr_cache_destroy_ex(mrmgr_cache_t *c, uint64_t flags)
{
	return destroy(c, flags);
}

void mrmgr__core_lock(struct mrmgr_cache *c)
{
	mrmgr__cache_lock(c);
}

void mrmgr__core_unlock(struct mrmgr_cache *c)
{
	pthread_mutex_unlock(&c->lock);
}
