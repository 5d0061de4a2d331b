/*
 * The registration cache: get, put, merge, evict, invalidate.
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
 * watches it; a hit (fast_hit() and try_hit()'s callers) first checks,
 * with one load, that no event arrived since this cache last applied
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
#include "evict.h"
#include "ext.h"
#include "log.h"

#define HIT_ATTEMPTS 4
#define HIT_MAX_STEPS 256

#define KNOWN_ACCESS                                                        \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                  \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |                 \
	 IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING)

static inline struct mrmgr_region *node_region(const struct mrmgr__itree_node *n)
{
	return mrmgr__container_of(n, struct mrmgr_region, node);
}

/* ------------------------------------------------------------ sequence */

static inline void seq_write_begin(struct mrmgr_cache *c)
{
	__atomic_store_n(&c->seq, c->seq + 1, __ATOMIC_RELAXED);
	/* The odd count must be visible before any tree store. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void seq_write_end(struct mrmgr_cache *c)
{
	__atomic_store_n(&c->seq, c->seq + 1, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------ LRU list */

static void lru_unlink(struct mrmgr_region *r)
{
	mrmgr__evict_unlinking(&r->cache->age_hand, &r->lru);
	r->lru.prev->next = r->lru.next;
	r->lru.next->prev = r->lru.prev;
	r->lru.prev = r->lru.next = NULL;
}

static void lru_append(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	r->lru.prev = c->lru.prev;
	r->lru.next = &c->lru;
	c->lru.prev->next = &r->lru;
	c->lru.prev = &r->lru;
}

static inline struct mrmgr_region *lru_region(struct mrmgr__lru_link *l)
{
	return mrmgr__container_of(l, struct mrmgr_region, lru);
}

/* Park a region found held on the held list (evict.c). */
static void held_append(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	r->lru.prev = c->held.prev;
	r->lru.next = &c->held;
	c->held.prev->next = &r->lru;
	c->held.prev = &r->lru;
}

/* Every parked region back on the LRU list (teardown, whole-cache walks). */
static void unpark_all(struct mrmgr_cache *c)
{
	while (c->held.next != &c->held) {
		struct mrmgr_region *r = lru_region(c->held.next);

		lru_unlink(r);
		lru_append(c, r);
	}
}

/* ------------------------------------------------------------ regions */

static struct mrmgr_region *region_alloc(struct mrmgr_cache *c)
{
	struct mrmgr_region *r = c->free_list;

	if (r) {
		/* Stripes are left as they are: a stale reader may still
		 * hold a transient reference it is about to drop. */
		c->free_list = r->free_next;
		goto got;
	}
	if (c->nall == c->all_cap) {
		size_t cap = c->all_cap ? c->all_cap * 2 : 64;
		struct mrmgr_region **all = realloc(c->all, cap * sizeof(*all));

		if (!all)
			return NULL;
		c->all = all;
		c->all_cap = cap;
	}
	r = mrmgr__region_carve(&c->rslabs); /* zeroed */
	if (!r)
		return NULL;
	r->cache = c;
	mrmgr__region_set_state(r, MRMGR__REGION_FREE);
	c->all[c->nall++] = r;
got:
	/* A feature may need state of its own before the region is used. */
	if (mrmgr__ext_region_alloc(c, r)) {
		r->free_next = c->free_list;
		c->free_list = r;
		return NULL;
	}
	return r;
}

static void region_retire(struct mrmgr_cache *c, struct mrmgr_region *r);

/* Deregister an idle region that is out of the tree, and recycle it. */
static void region_release(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	uint64_t len = mrmgr__region_len(r);
	int ret;

	mrmgr__region_gone(c, r); /* the caller's callback: keys still valid */
	if (c->reap_on && !r->share && r->kind != MRMGR__REGION_VIEW) {
		region_retire(c, r); /* deregistered once the lock is free */
		return;
	}
	mrmgr__region_clear_keys(r);
	mrmgr__mon_unwatch(c, r); /* a no-op unless grow.c held it out */
	if (mrmgr__unlikely(c->ndeferred))
		mrmgr__cache_dereg_retry(c, 0);
	mrmgr__ext_region_released(c, r); /* before its MR goes */
	/* A view borrows the implicit MR, which lives as long as the cache. */
	ret = r->kind == MRMGR__REGION_VIEW ? 0
	      : mrmgr__cache_dereg(c, r->mr, "a region's MR");
	if (!ret && r->kind != MRMGR__REGION_VIEW)
		c->st.deregistrations++;
	mrmgr__dbg("dereg [%#llx, +%llu)",
		   (unsigned long long)mrmgr__region_start(r),
		   (unsigned long long)len);
	r->mr = NULL;
	c->nregions--;
	if (r->kind == MRMGR__REGION_PINNED)
		c->pinned_bytes -= len;
	mrmgr__region_set_state(r, MRMGR__REGION_FREE);
	r->free_next = c->free_list;
	c->free_list = r;
}

/* Out of the tree, still watched: grow.c works on it and publishes it. */
static void tree_take(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	seq_write_begin(c);
	mrmgr__lookup_remove(c, r);
	mrmgr__itree_remove(&c->tree, &r->node);
	seq_write_end(c);
	lru_unlink(r);
	c->ncached--;
}

static void tree_remove(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	tree_take(c, r);
	mrmgr__mon_unwatch(c, r);
}

/*
 * Take a live region out of the cache for good (invalidation, merge). It is
 * deregistered now if idle, else at its last put. Returns 1 when it was idle.
 */
static int region_detach(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_REPLACED);
	mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
	tree_remove(c, r);
	if (mrmgr__region_refs_checked(c, r, "detaching it") != 0)
		return 0;
	region_release(c, r);
	return 1;
}

/* Make a region that is out of the tree live again. */
static void region_publish(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	r->gone = 0; /* cached again (grow.c) */
	mrmgr__region_set_keys(r);
	mrmgr__region_set_state(r, MRMGR__REGION_LIVE);
	seq_write_begin(c);
	mrmgr__itree_insert(&c->tree, &r->node);
	mrmgr__lookup_insert(c, r);
	seq_write_end(c);
	lru_append(c, r);
	c->ncached++;
}

/* Evict r if idle. Returns 1 when it was evicted. */
static int region_try_evict(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__region_set_state(r, MRMGR__REGION_EVICTING);
	if (mrmgr__region_refs_checked(c, r, "evicting it") != 0) {
		mrmgr__region_set_state(r, MRMGR__REGION_LIVE);
		return 0;
	}
	tree_remove(c, r);
	mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_EVICTED);
	region_release(c, r);
	c->st.evictions++;
	return 1;
}

/*
 * Evict one idle region to free shortfall bytes (0: a region slot), as
 * evict.c picks it: least recently used first, sizes weighed under the
 * byte limit. Bounded; returns 0 when no idle region turned up.
 */
static int evict_one(struct mrmgr_cache *c, uint64_t shortfall)
{
	for (int tries = 0; tries < 4; tries++) {
		struct mrmgr_region *r = mrmgr__evict_pick(c, shortfall);

		if (!r)
			return 0;
		if (region_try_evict(c, r))
			return 1;
		/* Taken by a hit since the pick looked. */
		lru_unlink(r);
		held_append(c, r);
	}
	return 0;
}

/* Evict every idle region (a registration failed for want of memory).
 * O(n), on that failure only. */
static void evict_all_idle(struct mrmgr_cache *c)
{
	struct mrmgr__lru_link *lists[] = { &c->lru, &c->held };

	for (int i = 0; i < 2; i++) {
		struct mrmgr__lru_link *l = lists[i]->next;

		while (l != lists[i]) {
			struct mrmgr__lru_link *next = l->next;

			region_try_evict(c, lru_region(l));
			l = next;
		}
	}
}

/*
 * Evict until n more regions of len more bytes fit the limits. Returns 0
 * when they cannot (everything left is in use, or nothing idle turned up).
 */
static int make_room_for(struct mrmgr_cache *c, uint64_t n, uint64_t len)
{
	if (len > c->cfg.max_bytes || (n && c->cfg.max_regions == 0))
		return 0;
	c->evict_round++;
	while (c->nregions + n > c->cfg.max_regions ||
	       c->pinned_bytes + len > c->cfg.max_bytes) {
		uint64_t over = c->pinned_bytes + len > c->cfg.max_bytes
					? c->pinned_bytes + len - c->cfg.max_bytes
					: 0;

		if (!evict_one(c, over))
			return 0;
	}
	return 1;
}

/*
 * Evict until a region of len bytes fits the limits. Returns 0 when it
 * cannot (everything left is in use), and then the caller does not cache.
 */
static int make_room(struct mrmgr_cache *c, uint64_t len)
{
	return make_room_for(c, 1, len);
}

/* ------------------------------------------------------------ lookup */

static int region_has_access(const struct mrmgr__itree_node *n, const void *arg)
{
	unsigned int need = *(const unsigned int *)arg;

	return (MRMGR__READ_ONCE(node_region(n)->access) & need) == need;
}

static struct mrmgr_region *lookup_locked(struct mrmgr_cache *c, uint64_t start,
					  uint64_t last, unsigned int access)
{
	const struct mrmgr__lk_table *t = c->lk;
	struct mrmgr__itree_node *n;
	int gave_up = 0;

	if (t) {
		/* Under the lock the index is exact: the tree only for what
		 * it does not hold. */
		struct mrmgr_region *r = mrmgr__lookup_find(
			t, start, start >> c->page_shift, last >> c->page_shift,
			mrmgr__lk_access_tag(access));

		if (r || !t->partial)
			return r;
	}
	n = mrmgr__itree_find_containing(&c->tree, start, last,
					 region_has_access, &access, UINT_MAX,
					 &gave_up);
	return n ? node_region(n) : NULL;
}

static inline void count_hit(struct mrmgr_region *r, unsigned int slot)
{
	mrmgr__count_hit(r, mrmgr__layout.words + slot * mrmgr__layout.stride);
}

/* A hit took a reference and the word before was old. */
static inline void mark_used(struct mrmgr_region *r, unsigned int slot,
			     uint64_t old)
{
	if (!(old & MRMGR__REF_USED))
		mrmgr__ref_mark_used(mrmgr__ref_word(r, slot));
}

/* Drop a reference; the last one on a region no longer live releases it. */
static inline void region_unref(struct mrmgr_cache *c, struct mrmgr_region *r,
				unsigned int slot)
{
	uint64_t old = mrmgr__ref_drop(r, slot);

	if (mrmgr__unlikely(old & MRMGR__REF_DEAD))
		mrmgr__cache_put_slow(c, r);
}

/*
 * A region that contains [start, last] with access, or NULL; unvalidated.
 * *sure: NULL means there is none (if the sequence count agrees).
 */
static inline struct mrmgr_region *candidate(struct mrmgr_cache *c,
					     uint64_t start, uint64_t last,
					     unsigned int access, int *sure)
{
	const struct mrmgr__lk_table *t =
		__atomic_load_n(&c->lk, __ATOMIC_ACQUIRE);
	struct mrmgr__itree_node *n;
	int gave_up = 0;

	if (mrmgr__likely(t != NULL)) {
		struct mrmgr_region *r = mrmgr__lookup_find(
			t, start, start >> c->page_shift, last >> c->page_shift,
			mrmgr__lk_access_tag(access));

		if (r || !MRMGR__READ_ONCE(t->partial)) {
			*sure = 1;
			return r;
		}
	}
	/* No index, or regions it does not hold: the tree. */
	n = mrmgr__itree_find_containing(&c->tree, start, last,
					 region_has_access, &access,
					 HIT_MAX_STEPS, &gave_up);
	*sure = !gave_up;
	return n ? node_region(n) : NULL;
}

/* The lock-free hit path. NULL: go to the slow path. */
static struct mrmgr_region *try_hit(struct mrmgr_cache *c, uint64_t start,
				    uint64_t last, unsigned int access,
				    unsigned int slot)
{
	for (int attempt = 0; attempt < HIT_ATTEMPTS; attempt++) {
		uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		struct mrmgr_region *r;
		uint64_t old;
		int sure = 0;

		if (seq & 1)
			continue;
		r = candidate(c, start, last, access, &sure);
		if (!r) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (sure &&
			    __atomic_load_n(&c->seq, __ATOMIC_RELAXED) == seq)
				return NULL; /* a true miss */
			continue;
		}
		/*
		 * r is a region of this cache (type-stable memory), though
		 * perhaps not the one the tree holds now: reference it; the
		 * word before says whether it was live (the reference and a
		 * remover's state change are ordered on this word: one sees
		 * the other); then check nothing changed since seq, so it is
		 * what the index said: it contains the range, with access.
		 */
		old = mrmgr__ref_take(r, slot);
		if (mrmgr__likely(!(old & MRMGR__REF_DEAD))) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (mrmgr__likely(__atomic_load_n(&c->seq,
							  __ATOMIC_RELAXED) ==
					  seq)) {
				mark_used(r, slot, old);
				count_hit(r, slot);
				return r;
			}
		}
		region_unref(c, r, slot);
	}
	return NULL;
}

/* ------------------------------------------------------------ miss path */

/*
 * Widen [*start, *last] over every live region it overlaps, and over the
 * regions it merely touches when that cannot swallow a neighbour, until
 * nothing more joins. Gives up (restores the request) past limit.
 * Returns whether any region joins: one inside the request with no more
 * access joins too, though the span does not change, so that it is
 * absorbed instead of staying cached beside its superset.
 *
 * A region that only touches the span is someone else's buffer as often
 * as not: buffers laid back to back in one mapping each touch the next.
 * Joining it re-registers all of its pages for nothing the request
 * needs, and a buffer that grows past its neighbours' ends would take
 * them all in, one ever larger region (the doubling benchmark registered
 * 80 G pages that way, UCX 84 M). So a touching region joins only a
 * fresh request (one that overlaps no region: pieces of one buffer
 * registered in turn still come together), and only if it is at most
 * twice the request's size.
 */
static int merge_span(struct mrmgr_cache *c, uint64_t *start, uint64_t *last,
		      unsigned int *access, uint64_t limit, uint64_t *ask_start,
		      uint64_t *ask_last)
{
	uint64_t s = *start, l = *last, req = l - s, as = s, al = l;
	unsigned int acc = *access;
	int grown, joined = 0, growth = 0;

	for (struct mrmgr__itree_node *n =
		     mrmgr__itree_first_overlap(&c->tree, s, l);
	     n && !growth; n = mrmgr__itree_next_overlap(n, s, l))
		growth = mrmgr__cache_joins(node_region(n), s, l, s, l);
	do {
		uint64_t qs = s ? s - 1 : 0, ql = l != UINT64_MAX ? l + 1 : l;

		grown = 0;
		for (struct mrmgr__itree_node *n =
			     mrmgr__itree_first_overlap(&c->tree, qs, ql);
		     n; n = mrmgr__itree_next_overlap(n, qs, ql)) {
			struct mrmgr_region *r = node_region(n);

			if (n->last < s || n->start > l) {
				if (growth || n->last - n->start > 2 * req + 1)
					continue; /* touches: stays apart */
			} else if (!mrmgr__cache_joins(r, as, al, s, l)) {
				continue; /* overlaps only its headroom */
			}
			if (r->asked_start < as)
				as = r->asked_start;
			if (r->asked_last > al)
				al = r->asked_last;
			if (n->start < s) {
				s = n->start;
				grown = 1;
			}
			if (n->last > l) {
				l = n->last;
				grown = 1;
			}
			acc |= node_region(n)->access;
			joined = 1;
		}
		if (l - s >= limit)
			return 0;
	} while (grown);
	*start = s;
	*last = l;
	*access = acc;
	*ask_start = as;
	*ask_last = al;
	return joined;
}

int mrmgr__cache_joins(const struct mrmgr_region *r, uint64_t as, uint64_t al,
		       uint64_t s, uint64_t l)
{
	return (r->asked_start <= al && as <= r->asked_last) ||
	       (r->node.start >= s && r->node.last <= l);
}

/* A registration's counters and debug line; lock held. */
static void reg_done(struct mrmgr_cache *c, uint64_t start, uint64_t len,
		     unsigned int access, int ret)
{
	if (!ret) {
		c->st.registrations++;
		c->st.pages_registered += len >> c->page_shift;
	}
	mrmgr__dbg("reg [%#llx, +%llu) access %#x: %s",
		   (unsigned long long)start, (unsigned long long)len, access,
		   ret ? strerror(ret) : "ok");
}

static int do_reg(struct mrmgr_cache *c, uint64_t start, uint64_t len,
		  unsigned int access, struct ibv_mr **mr)
{
	int ret = mrmgr__dev_reg_mr(c->ops, c->pd, (void *)(uintptr_t)start,
				    len, (int)(access | c->reg_access), mr);

	reg_done(c, start, len, access, ret);
	return ret;
}

/* ------------------------------------------ registering without the lock */

/*
 * A registration costs microseconds to milliseconds (the device pins and
 * translates every page); under the lock, every other miss and every put
 * of a detached region would wait for it. So a miss on the plain
 * mrmgr_get() path (MRMGR__GET_MAY_UNLOCK) decides everything under the
 * lock (span, room, watch), reserves its span, drops the lock to
 * deregister what it evicted and to register, and takes the lock again
 * to publish.
 *
 * The reservation (struct mrmgr__inflight) is what other misses see of
 * it meanwhile: a miss whose request or span overlaps a reserved span
 * waits for it to end and looks again, so two threads missing on one
 * buffer make one registration; misses elsewhere go ahead. An
 * invalidation (mrmgr_invalidate(), a memory event) of an overlapping
 * range marks the reservation dropped, and its registration is then
 * handed out uncached: nothing it covered is cached from before it. The
 * limits count a reservation's region and bytes from the start, so
 * concurrent misses never overshoot them together.
 */

#define MISS_AGAIN (-1) /* miss(): waited for another; look again */

static void apply_events(struct mrmgr_cache *c);

static struct mrmgr__inflight *inflight_find(struct mrmgr_cache *c,
					     uint64_t start, uint64_t last)
{
	for (struct mrmgr__inflight *f = c->inflight.next; f != &c->inflight;
	     f = f->next)
		if (f->start <= last && start <= f->last)
			return f;
	return NULL;
}

static void inflight_begin(struct mrmgr_cache *c, struct mrmgr__inflight *f,
			   uint64_t start, uint64_t last)
{
	f->start = start;
	f->last = last;
	f->dropped = 0;
	f->prev = c->inflight.prev;
	f->next = &c->inflight;
	c->inflight.prev->next = f;
	c->inflight.prev = f;
}

static void inflight_end(struct mrmgr_cache *c, struct mrmgr__inflight *f)
{
	f->prev->next = f->next;
	f->next->prev = f->prev;
	pthread_cond_broadcast(&c->inflight_done);
}

/* Lock held; returns with it held, after some registration ended. */
static void inflight_wait(struct mrmgr_cache *c)
{
	pthread_cond_wait(&c->inflight_done, &c->lock);
}

/* [start, last] is invalidated: registrations under way over it are not
 * cached. */
static void inflight_drop(struct mrmgr_cache *c, uint64_t start, uint64_t last)
{
	for (struct mrmgr__inflight *f = c->inflight.next; f != &c->inflight;
	     f = f->next)
		if (f->start <= last && start <= f->last)
			f->dropped = 1;
}

/* An evicted region: everything of region_release() but the
 * deregistration, which reap_dereg() does once the lock is free. */
static void region_retire(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__mon_unwatch(c, r);
	mrmgr__region_clear_keys(r);
	c->nregions--;
	mrmgr__ext_region_released(c, r);
	if (r->kind == MRMGR__REGION_PINNED)
		c->pinned_bytes -= mrmgr__region_len(r);
	/* FREE: a stale reader's put leaves it alone; off the free list
	 * until its MR is gone. */
	mrmgr__region_set_state(r, MRMGR__REGION_FREE);
	r->free_next = c->reap;
	c->reap = r;
}

/* Deregister retired regions; no lock. Returns how many succeeded. */
static uint64_t reap_dereg(struct mrmgr_cache *c, struct mrmgr_region *list)
{
	uint64_t n = 0;

	/* The retired regions are this thread's alone until they are
	 * recycled: an MR deregistered here is forgotten here, a failed one
	 * stays for reap_recycle() to keep and retry (dereg.c). */
	for (struct mrmgr_region *r = list; r; r = r->free_next) {
		if (!mrmgr__dev_dereg_mr(c->ops, r->mr)) {
			r->mr = NULL;
			n++;
		}
	}
	return n;
}

/* Recycle retired regions once deregistered; lock held. */
static void reap_recycle(struct mrmgr_cache *c, struct mrmgr_region *list,
			 uint64_t deregistered)
{
	c->st.deregistrations += deregistered;
	while (list) {
		struct mrmgr_region *r = list;

		list = r->free_next;
		/* Its deregistration failed: kept and retried, not abandoned. */
		if (r->mr && !mrmgr__cache_dereg(c, r->mr, "an evicted region's MR"))
			c->st.deregistrations++;
		r->mr = NULL;
		r->free_next = c->free_list;
		c->free_list = r;
	}
}

/* Deregister and recycle what was retired, lock held (nothing to register
 * meanwhile). */
static void reap_locked(struct mrmgr_cache *c)
{
	struct mrmgr_region *reap = c->reap;

	c->reap = NULL;
	if (reap)
		reap_recycle(c, reap, reap_dereg(c, reap));
}

/*
 * Register [start, +len) with the lock released; deregister the regions
 * make_room() retired first. Lock held on entry and on return.
 */
static int reg_unlocked(struct mrmgr_cache *c, uint64_t start, uint64_t len,
			unsigned int access, struct ibv_mr **mr)
{
	struct mrmgr_region *reap = c->reap;
	struct ibv_pd *pd = c->pd;
	int extra = (int)c->reg_access;
	uint64_t n = 0;
	int ret;

	c->reap = NULL;
	pthread_mutex_unlock(&c->lock);
	if (reap)
		n = reap_dereg(c, reap);
	ret = mrmgr__dev_reg_mr(c->ops, pd, (void *)(uintptr_t)start, len,
				(int)access | extra, mr);
	pthread_mutex_lock(&c->lock);
	if (reap)
		reap_recycle(c, reap, n);
	reg_done(c, start, len, access, ret);
	return ret;
}

/* Count (sign 1) or uncount (-1) a pinned registration of len bytes. */
static void account_pinned(struct mrmgr_cache *c, int kind, uint64_t len,
			   int sign)
{
	if (sign > 0) {
		c->nregions++;
		if (kind != MRMGR__REGION_PINNED)
			return;
		c->pinned_bytes += len;
		if (c->pinned_bytes > c->st.peak_pinned_bytes)
			c->st.peak_pinned_bytes = c->pinned_bytes;
	} else {
		c->nregions--;
		if (kind == MRMGR__REGION_PINNED)
			c->pinned_bytes -= len;
	}
}

/*
 * The memory-event watch's last step, with the region made: 0 when it
 * may be cached, else it is handed out uncached (the monitor may say
 * that a change overlapped the range since the watch began).
 */
static int watch_commit(struct mrmgr_cache *c, struct mrmgr__watch_tx *tx,
			struct mrmgr_region *r)
{
	/* Under the lock that also publishes: change.c's argument needs the
	 * check and the publish in one critical section. */
	return mrmgr__mon_watch_commit(c, tx, r);
}

/*
 * Register [start, last] for a get that missed; called with the lock
 * (which it may drop and take again: MRMGR__GET_MAY_UNLOCK). gflags: enum
 * mrmgr__get_flags. MISS_AGAIN: it waited for another registration; the
 * caller looks again.
 */
static int miss(struct mrmgr_cache *c, uint64_t start, uint64_t last,
		unsigned int access, unsigned int slot, unsigned int gflags,
		struct mrmgr_region **out)
{
	uint64_t rs = start, rl = last, as = start, al = last;
	unsigned int racc = access;
	int cacheable = !(c->cfg.flags & MRMGR_CACHE_DISABLE);
	int unlock = (gflags & MRMGR__GET_MAY_UNLOCK) &&
		     !(c->flags & MRMGR__CACHE_EXT_GET);
	int merged = 0, reserved = 0;
	int kind = MRMGR__REGION_PINNED;
	struct ibv_mr *mr = NULL;
	struct mrmgr_region *r;
	struct mrmgr__watch_tx watch;
	struct mrmgr__inflight fl;
	struct mrmgr__miss m;
	int ret;

	/* Another miss registers this already: wait for it, look again. */
	if (unlock && inflight_find(c, start, last)) {
		inflight_wait(c);
		return MISS_AGAIN;
	}
	if (cacheable && !(c->cfg.flags & MRMGR_CACHE_NO_MERGE) &&
	    !(gflags & MRMGR__GET_NO_MERGE)) {
		/* Regions that pin nothing: max_bytes does not bound them. */
		uint64_t limit = c->unpinned ? UINT64_MAX : c->cfg.max_bytes;

		if (c->caps.max_mr_size && c->caps.max_mr_size < limit)
			limit = c->caps.max_mr_size;
		/* Also true for a region inside the request: it is absorbed. */
		merged = merge_span(c, &rs, &rl, &racc, limit, &as, &al);
	}
	if (unlock && merged && inflight_find(c, rs, rl)) {
		inflight_wait(c);
		return MISS_AGAIN;
	}
	/* The features' say (ext.h): growth in place or headroom, the kind
	 * of region ODP makes. */
	m = (struct mrmgr__miss){ .start = start, .last = last,
				  .access = access, .slot = slot,
				  .gflags = gflags, .rs = rs, .rl = rl,
				  .racc = racc, .as = as, .al = al,
				  .merged = merged, .kind = kind };
	ret = mrmgr__ext_plan_miss(c, &m, out);
	if (ret != MRMGR__PLAN_GO_ON)
		return ret;
	rs = m.rs;
	rl = m.rl;
	racc = m.racc;
	as = m.as;
	al = m.al;
	merged = m.merged;
	kind = m.kind;
	/* Headroom may have widened the span over a reservation. */
	if (unlock && cacheable && inflight_find(c, rs, rl)) {
		inflight_wait(c);
		return MISS_AGAIN;
	}
	/* Watched before it is pinned: a change from now on is reported.
	 * What nothing watches is registered uncached. Evictions are
	 * deregistered with the lock released, with the registration. */
	if (cacheable) {
		int room;

		c->reap_on = unlock;
		room = make_room(c, kind == MRMGR__REGION_PINNED ? rl - rs + 1
								: 0);
		c->reap_on = 0;
		if (!room || mrmgr__mon_watch_begin(c, rs, rl, &watch)) {
			cacheable = 0;
			as = rs = start;
			al = rl = last;
			racc = access;
			merged = 0;
		}
	}

	if (kind == MRMGR__REGION_VIEW) {
		/* The implicit MR already covers it: no registration at all
		 * (and what the room took is deregistered now). */
		reap_locked(c);
		mr = m.view_mr;
		account_pinned(c, kind, 0, 1);
		goto have_mr;
	}
	/* Counted from now: concurrent misses see the room taken. */
	account_pinned(c, kind, rl - rs + 1, 1);
	if (unlock) {
		if (cacheable) {
			inflight_begin(c, &fl, rs, rl);
			reserved = 1;
		}
		ret = reg_unlocked(c, rs, rl - rs + 1, racc, &mr);
	} else {
		ret = do_reg(c, rs, rl - rs + 1, racc, &mr);
	}
	if (ret == ENOMEM || ret == EAGAIN) {
		c->st.evict_retries++;
		evict_all_idle(c);
		ret = do_reg(c, rs, rl - rs + 1, racc, &mr);
	}
	if (merged && (ret == EFAULT || ret == ENOMEM || ret == EAGAIN)) {
		/* EFAULT: the merged span reaches memory that is no longer
		 * what the cached neighbours registered. ENOMEM/EAGAIN: the
		 * span does not fit even with every idle region evicted, yet
		 * the request alone may. Register just the request. */
		account_pinned(c, kind, rl - rs + 1, -1);
		as = rs = start;
		al = rl = last;
		racc = access;
		merged = 0;
		account_pinned(c, kind, rl - rs + 1, 1);
		ret = do_reg(c, rs, rl - rs + 1, racc, &mr);
	}
	if (reserved) {
		/* Events that came while the lock was free may drop it. */
		if (!mrmgr__mon_quiet(&c->mon_seen))
			apply_events(c);
		inflight_end(c, &fl);
		/* mrmgr_cache_move_pd() meanwhile: registered in the old PD. */
		if (!ret && mr->pd != c->pd)
			fl.dropped = 1;
		if (fl.dropped && cacheable) {
			mrmgr__mon_watch_abort(c, &watch);
			cacheable = 0;
			merged = 0;
		}
	}
	if (ret) {
		account_pinned(c, kind, rl - rs + 1, -1);
		if (cacheable)
			mrmgr__mon_watch_abort(c, &watch);
		c->st.reg_failures++;
		mrmgr__log(ret == EFAULT || ret == EINVAL ? MRMGR_LOG_ERROR
							   : MRMGR_LOG_WARN,
			   "registering [%#llx, +%llu) access %#x on %s: %s",
			   (unsigned long long)rs,
			   (unsigned long long)(rl - rs + 1), racc, c->caps.name,
			   strerror(ret));
		return ret;
	}

have_mr:
	r = region_alloc(c);
	if (!r) {
		account_pinned(c, kind,
			       kind == MRMGR__REGION_VIEW ? 0 : rl - rs + 1, -1);
		if (cacheable)
			mrmgr__mon_watch_abort(c, &watch);
		if (kind != MRMGR__REGION_VIEW &&
		    !mrmgr__cache_dereg(c, mr, "a new MR"))
			c->st.deregistrations++;
		mrmgr__err("out of memory for a region");
		return ENOMEM;
	}
	r->mr = mr;
	r->kind = kind;
	r->flags = 0;
	r->gen = ++c->next_gen;
	/* A stale reader may still look at a recycled region. */
	MRMGR__WRITE_ONCE(r->node.start, rs);
	MRMGR__WRITE_ONCE(r->node.last, rl);
	MRMGR__WRITE_ONCE(r->access, racc);
	r->asked_start = as < start ? as : start;
	r->asked_last = al > last ? al : last;
	/* New: spared by the hand like a hit region, but after a lap it goes
	 * before regions hit since (evict.c). */
	if (!(mrmgr__ref_take(r, slot) & MRMGR__REF_NEW))
		__atomic_fetch_or(mrmgr__ref_word(r, slot), MRMGR__REF_NEW,
				  __ATOMIC_RELAXED);
	mrmgr__ext_region_added(c, r);

	if (cacheable && watch_commit(c, &watch, r)) {
		mrmgr__mon_unwatch(c, r);
		cacheable = 0;
	}
	if (!cacheable) {
		mrmgr__region_set_keys(r);
		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		c->st.uncached++;
		*out = r;
		return 0;
	}
	/* Everything the new region covers goes; its users keep their MRs
	 * (make-before-break) and deregister them at their last put. */
	for (struct mrmgr__itree_node *n =
		     merged ? mrmgr__itree_first_overlap(&c->tree, rs, rl) : NULL;
	     n;) {
		if (!mrmgr__cache_joins(node_region(n), as, al, rs, rl)) {
			/* Overlapped only in its headroom: stays. */
			n = mrmgr__itree_next_overlap(n, rs, rl);
			continue;
		}
		if (!region_detach(c, node_region(n)))
			c->st.make_before_break++;
		c->st.merges++;
		n = mrmgr__itree_first_overlap(&c->tree, rs, rl);
	}
	mrmgr__evict_age(c);
	region_publish(c, r);
	*out = r;
	return 0;
}

/* ------------------------------------------------------------ invalidation */

uint64_t mrmgr__cache_invalidate_locked(struct mrmgr_cache *c, uint64_t start,
					uint64_t last)
{
	struct mrmgr__itree_node *n;
	uint64_t count = 0;

	inflight_drop(c, start, last);
	while ((n = mrmgr__itree_first_overlap(&c->tree, start, last))) {
		struct mrmgr_region *r = node_region(n);

		mrmgr__ext_region_invalidated(c, r);
		mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_INVALIDATED);
		region_detach(c, r);
		c->st.invalidations++;
		count++;
	}
	return count;
}

/* Apply the memory events that arrived since the last time; lock held. */
static void apply_events(struct mrmgr_cache *c)
{
	uint64_t s, l;
	int r;

	mrmgr__mon_drain_begin(&c->mon);
	while ((r = mrmgr__mon_drain_next(&c->mon, &s, &l)) > 0)
		c->mon.invalidations += mrmgr__cache_invalidate_locked(c, s, l);
	if (r < 0) /* fell behind the queue: anything may have changed */
		c->mon.invalidations +=
			mrmgr__cache_invalidate_locked(c, 0, UINT64_MAX);
	mrmgr__mon_drain_end(&c->mon, &c->mon_seen);
}

/* ------------------------------------------------------------ public */

static int check_range(const char *fn, const void *addr, size_t length,
		       uint64_t page_mask, uint64_t *start, uint64_t *last)
{
	uintptr_t a = (uintptr_t)addr;

	if (!addr || !length) {
		mrmgr__err("%s: %s", fn, !addr ? "NULL address" : "zero length");
		return EINVAL;
	}
	if (a + (length - 1) < a || ((a + (length - 1)) | page_mask) < a) {
		mrmgr__err("%s: range %p + %zu overflows", fn, addr, length);
		return EINVAL;
	}
	*start = a & ~page_mask;
	*last = (a + (length - 1)) | page_mask;
	return 0;
}

static int check_access(const char *fn, unsigned int access)
{
	if (access & ~(unsigned int)KNOWN_ACCESS) {
		mrmgr__err("%s: unsupported access bits %#x", fn,
			   access & ~(unsigned int)KNOWN_ACCESS);
		return EINVAL;
	}
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		mrmgr__err("%s: REMOTE_WRITE and REMOTE_ATOMIC need "
			   "LOCAL_WRITE (access %#x)", fn, access);
		return EINVAL;
	}
	return 0;
}

/* The body of mrmgr_get() and mrmgr_get_ex(). */
static int get(struct mrmgr_cache *c, void *addr, size_t length,
	       unsigned int access, struct mrmgr_region **region)
{
	uint64_t start, last;
	unsigned int slot;
	struct mrmgr_region *r;
	int ret;

	if (!c || !region) {
		mrmgr__err("mrmgr_get: NULL %s", !c ? "cache" : "region pointer");
		return EINVAL;
	}
	ret = check_range("mrmgr_get", addr, length,
			  ((uint64_t)1 << c->page_shift) - 1, &start, &last);
	if (!ret)
		ret = check_access("mrmgr_get", access);
	if (ret)
		return ret;

	slot = mrmgr__thread_slot() & (c->nstripes - 1);
	if (mrmgr__unlikely(c->flags & MRMGR__CACHE_EXT_GET))
		return mrmgr__ext_get(c, start, last, access, slot, region);
	if (mrmgr__likely(!(c->flags & MRMGR_CACHE_DISABLE)) &&
	    mrmgr__likely(mrmgr__mon_quiet(&c->mon_seen))) {
		r = try_hit(c, start, last, access, slot);
		if (r) {
			*region = r;
			return 0;
		}
	}

	pthread_mutex_lock(&c->lock);
	ret = mrmgr__cache_get_locked(c, start, last, access, slot,
				      MRMGR__GET_MAY_UNLOCK, &r);
	pthread_mutex_unlock(&c->lock);
	if (!ret)
		*region = r;
	return ret;
}

int mrmgr__cache_get_locked(struct mrmgr_cache *c, uint64_t start,
			    uint64_t last, unsigned int access,
			    unsigned int slot, unsigned int gflags,
			    struct mrmgr_region **out)
{
	struct mrmgr_region *r;
	int ret;

	for (int again = 0;; again++) {
		/* Reported memory events first: nothing they name may be
		 * found. */
		if (!mrmgr__mon_quiet(&c->mon_seen))
			apply_events(c);
		r = (c->flags & MRMGR_CACHE_DISABLE)
			    ? NULL
			    : lookup_locked(c, start, last, access);
		if (r) {
			/* Another thread registered it meanwhile. */
			mark_used(r, slot, mrmgr__ref_take(r, slot));
			c->st.hits++;
			if (again) /* it waited for another's registration */
				c->st.misses--;
			*out = r;
			return 0;
		}
		if (!again)
			c->st.misses++;
		ret = miss(c, start, last, access, slot, gflags, out);
		if (ret != MISS_AGAIN)
			return ret;
	}
}

/*
 * The hit path of mrmgr_get(), inline and in one try: the index, then a
 * reference on the thread's own word. NULL: get() does it all properly
 * (arguments and their errors, retries, the tree, the slow path). No
 * lock, no call, no write but to the thread's reference word and hit
 * counter. Whatever get() checks before it may hit must be checked here
 * too. Kept small on purpose: every instruction here is paid by every
 * hit (bench/callgrind.sh counts them).
 */
static inline __attribute__((always_inline)) struct mrmgr_region *
fast_hit(struct mrmgr_cache *c, uintptr_t a, size_t length,
	 unsigned int access, struct mrmgr_region **undo)
{
	uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
	const struct mrmgr__lk_table *t =
		__atomic_load_n(&c->lk, __ATOMIC_ACQUIRE);
	uint64_t end = (uint64_t)a + (length - 1);
	struct mrmgr_region *r;
	uintptr_t words;
	uint64_t *w, old;

	/*
	 * Plausible arguments: a length that neither is zero nor wraps
	 * (end < a catches both; a NULL address needs no test of its own:
	 * page 0 is never mapped, so no region covers it and the lookup
	 * misses, leaving get() to refuse it), known access bits (of which
	 * REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE: access values
	 * 2, 6, 8, 10, 12 and 14 of the low four bits are bad); an index
	 * (a cache with MRMGR_CACHE_DISABLE never has one: nothing is
	 * cached); no tree change under way; no feature to call after a
	 * hit or to answer the get (ext.h: MRMGR__CACHE_AFTER_GET,
	 * MRMGR__CACHE_EXT_GET); no
	 * memory event pending (get_locked() applies them first).
	 */
	_Static_assert(MRMGR__CACHE_AFTER_GET == UINT64_C(1) << 63 &&
			       MRMGR__CACHE_EXT_GET == UINT64_C(1) << 62,
		       "the top two bits of flags");
	if (mrmgr__unlikely(end < a) ||
	    mrmgr__unlikely(access & ~(unsigned int)KNOWN_ACCESS) ||
	    mrmgr__unlikely((0x55445544u >> (access & 31)) & 1) ||
	    mrmgr__unlikely(!t) || mrmgr__unlikely(seq & 1) ||
	    mrmgr__unlikely(c->flags >> 62) ||
	    mrmgr__unlikely(!mrmgr__mon_quiet(&c->mon_seen)))
		return NULL;
	r = mrmgr__lookup_fast(t, a, a >> c->page_shift, end >> c->page_shift,
			       (access | access >> 15) & MRMGR__LK_TAG_ACCESS);
	if (mrmgr__unlikely(!r))
		return NULL;
	words = mrmgr__tls_words;
	if (mrmgr__unlikely(!words))
		return NULL; /* the thread's first get: the slow path */
	/* try_hit()'s protocol, on the thread's word. */
	w = mrmgr__ref_word_at(r, words);
	old = __atomic_fetch_add(w, MRMGR__REF_ONE, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (mrmgr__likely(!(old & MRMGR__REF_DEAD)) &&
	    mrmgr__likely(__atomic_load_n(&c->seq, __ATOMIC_RELAXED) == seq)) {
		if (mrmgr__unlikely(!(old & MRMGR__REF_USED)))
			mrmgr__ref_mark_used(w);
		mrmgr__count_hit(r, words);
		return r;
	}
	/* No call here (it would cost the hit a stack frame): the caller
	 * finishes the put. */
	if (__atomic_fetch_sub(w, MRMGR__REF_ONE, __ATOMIC_SEQ_CST) &
	    MRMGR__REF_DEAD)
		*undo = r;
	return NULL;
}

/* mrmgr_get() when the inline hit path did not answer. */
static __attribute__((noinline)) int get_slow(struct mrmgr_cache *c,
					      void *addr, size_t length,
					      unsigned int access,
					      mrmgr_region_t **region,
					      struct mrmgr_region *undo)
{
	int ret;

	if (undo)
		mrmgr__cache_put_slow(c, undo);
	ret = get(c, addr, length, access, region);
	if (mrmgr__unlikely(!ret && (c->flags & MRMGR__CACHE_AFTER_GET)))
		mrmgr__ext_after_get(c, *region, addr, length, access, 0);
	return ret;
}

MRMGR_EXPORT int mrmgr_get(mrmgr_cache_t *c, void *addr, size_t length,
			   unsigned int access, mrmgr_region_t **region)
{
	struct mrmgr_region *undo = NULL;

	if (mrmgr__likely(c != NULL && region != NULL)) {
		struct mrmgr_region *r = fast_hit(c, (uintptr_t)addr, length,
						  access, &undo);

		if (mrmgr__likely(r != NULL)) {
			*region = r;
			return 0;
		}
	}
	return get_slow(c, addr, length, access, region, undo);
}

MRMGR_EXPORT int mrmgr_get_ex(mrmgr_cache_t *c, void *addr, size_t length,
			      unsigned int access, uint64_t flags,
			      mrmgr_region_t **region)
{
	const uint64_t known = MRMGR_GET_PREFETCH | MRMGR_GET_NO_PREFETCH;
	int ret;

	if ((flags & ~known) || (flags & known) == known) {
		mrmgr__err("mrmgr_get_ex: bad flags %#llx",
			   (unsigned long long)flags);
		return EINVAL;
	}
	ret = get(c, addr, length, access, region);
	if (!ret)
		mrmgr__ext_after_get(c, *region, addr, length, access, flags);
	return ret;
}

/* mrmgr_put() on a region no longer live: perhaps the last user. */
static __attribute__((noinline)) void put_slow(struct mrmgr_region *r)
{
	mrmgr__cache_put_slow(r->cache, r);
}

/* mrmgr_put() from a thread that has no stripe yet. */
static __attribute__((noinline)) void put_first(struct mrmgr_region *r)
{
	if (__atomic_fetch_sub(mrmgr__my_ref_word(r), MRMGR__REF_ONE,
			       __ATOMIC_SEQ_CST) &
	    MRMGR__REF_DEAD)
		put_slow(r);
}

MRMGR_EXPORT void mrmgr_put(mrmgr_region_t *region)
{
	uintptr_t words = mrmgr__tls_words;

	if (!region)
		return;
	if (mrmgr__unlikely(__atomic_load_n(&mrmgr__check_puts, __ATOMIC_RELAXED)) &&
	    mrmgr__put_checked(region))
		return;
	if (mrmgr__unlikely(!words)) {
		put_first(region);
		return;
	}
	/* The thread's reference word, which get wrote: nothing else of the
	 * region or the cache is read unless the region is no longer live. */
	if (mrmgr__unlikely(__atomic_fetch_sub(mrmgr__ref_word_at(region, words),
					       MRMGR__REF_ONE,
					       __ATOMIC_SEQ_CST) &
			    MRMGR__REF_DEAD))
		put_slow(region);
}

/* A put found the region not live: see whether that was its last user. */
void mrmgr__cache_put_slow(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	pthread_mutex_lock(&c->lock);
	/* Under the lock the state is stable; FREE or a recycled LIVE region
	 * means someone else already released it (a put after that was
	 * one too many: check.c). */
	if (mrmgr__region_state(r) == MRMGR__REGION_DETACHED) {
		if (mrmgr__region_refs_checked(c, r, "at its last put") == 0)
			region_release(c, r);
	} else if (mrmgr__region_state(r) == MRMGR__REGION_FREE) {
		(void)mrmgr__region_refs_checked(c, r, "after its release");
	}
	pthread_mutex_unlock(&c->lock);
}

MRMGR_EXPORT int mrmgr_invalidate(mrmgr_cache_t *c, void *addr, size_t length)
{
	uint64_t start, last;
	int ret;

	if (!c) {
		mrmgr__err("mrmgr_invalidate: NULL cache");
		return EINVAL;
	}
	ret = check_range("mrmgr_invalidate", addr, length,
			  ((uint64_t)1 << c->page_shift) - 1, &start, &last);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lock);
	mrmgr__cache_invalidate_locked(c, start, last);
	pthread_mutex_unlock(&c->lock);
	return 0;
}


int mrmgr__cache_create(struct ibv_pd *pd, const struct mrmgr_cache_attr *attr,
			const struct mrmgr__ext *const *exts,
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
	c->caps = caps;
	c->cfg = cfg;
	c->exts = exts;
	c->lru.prev = c->lru.next = &c->lru;
	c->held.prev = c->held.next = &c->held;
	c->inflight.prev = c->inflight.next = &c->inflight;
	mrmgr__itree_init(&c->tree);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->inflight_done, NULL);
	ret = mrmgr__ext_init(c);
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
	mrmgr__mon_cache_init(c);
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
		if (mrmgr__region_refs_checked(c, lru_region(l), "idle") != 0)
			n++;
	for (struct mrmgr__lru_link *l = c->held.next; l != &c->held; l = l->next)
		if (mrmgr__region_refs_checked(c, lru_region(l), "idle") != 0)
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
	reap_locked(c); /* empty: every miss drains what it retired */
	unpark_all(c); /* idle, as checked above */
	while (c->lru.next != &c->lru) {
		struct mrmgr_region *r = lru_region(c->lru.next);

		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		tree_remove(c, r);
		mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_DESTROYED);
		region_release(c, r);
	}
	mrmgr__ext_fini(c);
	mrmgr__cache_dereg_retry(c, 1);
	pthread_mutex_unlock(&c->lock);
	mrmgr__mon_cache_fini(c);
	mrmgr__lookup_fini(c);
	/* The regions' memory is their slabs'; the features' is theirs. */
	mrmgr__ext_free(c);
	mrmgr__region_slabs_free(&c->rslabs);
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

/* ------------------------------------------------ for grow.c and buf.c */

int mrmgr__cache_quiesce(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	/*
	 * region_try_evict()'s protocol: once the stripes add up to zero
	 * after the state store, every later hit sees the region not live
	 * and backs off, so nobody can be using its MR, range or access
	 * while grow.c changes them out of the tree. It goes back in (or is
	 * released) before the lock is dropped.
	 */
	mrmgr__region_set_state(r, MRMGR__REGION_EVICTING);
	if (mrmgr__region_refs_checked(c, r, "growing it") != 0) {
		mrmgr__region_set_state(r, MRMGR__REGION_LIVE);
		return 0;
	}
	/* It keeps its watch: the memory under its MR stays reported until
	 * it is published again or released. */
	tree_take(c, r);
	return 1;
}

void mrmgr__cache_publish(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__watch_tx tx;

	/*
	 * grow.c may have changed the range: watch it as it is now before
	 * the old watch goes, so the pages under the MR are never
	 * unwatched. What cannot be watched leaves the cache, released at
	 * its last put.
	 */
	if (mrmgr__mon_watch_begin(c, mrmgr__region_start(r), r->node.last,
				   &tx)) {
		mrmgr__mon_unwatch(c, r);
		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		c->st.uncached++;
		if (mrmgr__region_refs_checked(c, r, "uncaching it") == 0)
			region_release(c, r);
		return;
	}
	mrmgr__mon_unwatch(c, r);
	if (mrmgr__mon_watch_commit(c, &tx, r)) {
		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		c->st.uncached++;
		if (mrmgr__region_refs(r, c->nstripes) == 0)
			region_release(c, r);
		return;
	}
	region_publish(c, r);
}

int mrmgr__cache_detach(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	return region_detach(c, r);
}

void mrmgr__cache_release(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	mrmgr__region_mark_gone(r, MRMGR_REGION_GONE_REPLACED); /* grow.c */
	region_release(c, r);
}

void mrmgr__cache_unref_locked(struct mrmgr_cache *c, struct mrmgr_region *r,
			       unsigned int slot)
{
	mrmgr__ref_drop(r, slot);
	if (mrmgr__region_state(r) == MRMGR__REGION_DETACHED &&
	    mrmgr__region_refs_checked(c, r, "at its last put") == 0)
		region_release(c, r);
}

int mrmgr__cache_make_room(struct mrmgr_cache *c, uint64_t regions,
			   uint64_t bytes)
{
	return make_room_for(c, regions, bytes);
}

void mrmgr__cache_each_cached(struct mrmgr_cache *c,
			      void (*fn)(struct mrmgr_cache *c,
					 struct mrmgr_region *r, void *arg),
			      void *arg)
{
	struct mrmgr__lru_link todo;

	unpark_all(c);
	c->age_hand = NULL; /* the list moves aside */
	if (c->lru.next == &c->lru)
		return;
	/* Move the list aside; each region rejoins the cache's list before
	 * fn sees it, so fn finds it linked as usual, and regions fn
	 * publishes are not visited again. */
	todo.next = c->lru.next;
	todo.prev = c->lru.prev;
	todo.next->prev = &todo;
	todo.prev->next = &todo;
	c->lru.next = c->lru.prev = &c->lru;
	while (todo.next != &todo) {
		struct mrmgr_region *r = lru_region(todo.next);

		lru_unlink(r);
		lru_append(c, r);
		fn(c, r, arg);
	}
}

int mrmgr__cache_check_access(const char *fn, unsigned int access)
{
	return check_access(fn, access);
}

int mrmgr__cache_check_request(const char *fn, const struct mrmgr_cache *c,
			       const void *addr, size_t length,
			       unsigned int access, uint64_t *start,
			       uint64_t *last)
{
	int ret = check_range(fn, addr, length,
			      ((uint64_t)1 << c->page_shift) - 1, start, last);

	return ret ? ret : check_access(fn, access);
}

struct mrmgr_region *mrmgr__cache_try_hit(struct mrmgr_cache *c, uint64_t start,
					  uint64_t last, unsigned int access,
					  unsigned int slot)
{
	return try_hit(c, start, last, access, slot);
}

void mrmgr__cache_evict_all_idle(struct mrmgr_cache *c)
{
	evict_all_idle(c);
}

void mrmgr__cache_fork_child(struct mrmgr_cache *c)
{
	/* Their threads do not exist here; nobody waits for them either. */
	c->inflight.prev = c->inflight.next = &c->inflight;
	c->reap = NULL;
	c->reap_on = 0;
	c->age_hand = NULL;
	pthread_cond_init(&c->inflight_done, NULL);
}
