/*
 * The miss: widen the request over the regions it overlaps (merge), let
 * the features plan it (ext.h: growth in place, headroom, ODP's kind),
 * make room, register (with the lock released when it may), publish.
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
	uint64_t qs = s ? s - 1 : 0, ql = l != UINT64_MAX ? l + 1 : l;
	struct mrmgr__itree_node *first;

	/* The usual miss: nothing overlaps or touches the request. The
	 * index's chains near it say so in a few cache lines; else one walk
	 * down the tree does. */
	if (mrmgr__lookup_near(c, qs, ql) == MRMGR__LK_NONE)
		return 0;
	first = mrmgr__itree_first_overlap(&c->tree, qs, ql);
	if (!first)
		return 0;
	for (struct mrmgr__itree_node *n =
		     mrmgr__itree_first_overlap(&c->tree, s, l);
	     n && !growth; n = mrmgr__itree_next_overlap(n, s, l))
		growth = mrmgr__core_joins(mrmgr__node_region(n), s, l, s, l);
	do {
		qs = s ? s - 1 : 0;
		ql = l != UINT64_MAX ? l + 1 : l;
		grown = 0;
		for (struct mrmgr__itree_node *n =
			     first ? first
				   : mrmgr__itree_first_overlap(&c->tree, qs, ql);
		     n; n = mrmgr__itree_next_overlap(n, qs, ql)) {
			struct mrmgr_region *r = mrmgr__node_region(n);

			if (n->last < s || n->start > l) {
				if (growth || n->last - n->start > 2 * req + 1)
					continue; /* touches: stays apart */
			} else if (!mrmgr__core_joins(r, as, al, s, l)) {
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
			acc |= mrmgr__node_region(n)->access;
			joined = 1;
		}
		first = NULL;
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

int mrmgr__core_joins(const struct mrmgr_region *r, uint64_t as, uint64_t al,
		      uint64_t s, uint64_t l)
{
	return (r->asked_start <= al && as <= r->asked_last) ||
	       (r->node.start >= s && r->node.last <= l);
}

static int do_reg(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		  uint64_t len, unsigned int access, struct ibv_mr **mr)
{
	int ret = mrmgr__dev_reg_mr(c->ops, pd ? pd : c->pd,
				    (void *)(uintptr_t)start,
				    len, (int)(access | c->reg_access), mr);

	mrmgr__core_reg_done(c, start, len, access, ret);
	return ret;
}

int mrmgr__core_reg_extra(struct mrmgr_cache *c, struct ibv_pd *pd,
			  uint64_t start, uint64_t len, unsigned int access,
			  struct ibv_mr **mr)
{
	int ret;

	/* Room for one more MR; when everything is in use the MR is made
	 * anyway (the region is held: there is nothing to hand out
	 * uncached instead) and the device has the last word. */
	(void)mrmgr__core_make_room(c, 1, len);
	ret = do_reg(c, pd, start, len, access, mr);
	if (ret == ENOMEM || ret == EAGAIN) {
		c->st.evict_retries++;
		mrmgr__core_evict_all_idle(c);
		ret = do_reg(c, pd, start, len, access, mr);
	}
	if (ret) {
		c->st.reg_failures++;
		return ret;
	}
	mrmgr__core_account_reg(c, MRMGR__REGION_PINNED, len, 1);
	return 0;
}

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

/*
 * Register [start, +len) with the lock released; deregister the regions
 * make_room() retired first. Lock held on entry and on return.
 */
static int reg_unlocked(struct mrmgr_cache *c, struct ibv_pd *pd,
			uint64_t start, uint64_t len, unsigned int access,
			struct ibv_mr **mr)
{
	struct mrmgr_region *reap = c->reap;
	int extra = (int)c->reg_access;
	uint64_t n = 0;
	int ret;

	if (!pd)
		pd = c->pd; /* read under the lock: mrmgr_cache_move_pd() */
	c->reap = NULL;
	pthread_mutex_unlock(&c->lock);
	if (reap)
		n = mrmgr__cache_reap_dereg(c, reap);
	ret = mrmgr__dev_reg_mr(c->ops, pd, (void *)(uintptr_t)start, len,
				(int)access | extra, mr);
	pthread_mutex_lock(&c->lock);
	if (reap)
		mrmgr__cache_reap_recycle(c, reap, n);
	mrmgr__core_reg_done(c, start, len, access, ret);
	return ret;
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
 * mrmgr__get_flags. MRMGR__MISS_AGAIN: it waited for another registration; the
 * caller looks again.
 */
int mrmgr__cache_miss(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		      uint64_t last, unsigned int access, unsigned int slot,
		      unsigned int gflags, struct mrmgr_region **out)
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
	if (unlock && mrmgr__inflight_find(c, start, last)) {
		mrmgr__inflight_wait(c);
		return MRMGR__MISS_AGAIN;
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
	if (unlock && merged && mrmgr__inflight_find(c, rs, rl)) {
		mrmgr__inflight_wait(c);
		return MRMGR__MISS_AGAIN;
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
	if (unlock && cacheable && mrmgr__inflight_find(c, rs, rl)) {
		mrmgr__inflight_wait(c);
		return MRMGR__MISS_AGAIN;
	}
	/* Watched before it is pinned: a change from now on is reported.
	 * What nothing watches is registered uncached. Evictions are
	 * deregistered with the lock released, with the registration. */
	if (cacheable) {
		int room;

		c->reap_on = unlock;
		room = mrmgr__core_make_room(
			c, 1, kind == MRMGR__REGION_PINNED ? rl - rs + 1 : 0);
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
		mrmgr__cache_reap_locked(c);
		mr = m.view_mr;
		mrmgr__core_account_reg(c, kind, 0, 1);
		goto have_mr;
	}
	/* Counted from now: concurrent misses see the room taken. */
	mrmgr__core_account_reg(c, kind, rl - rs + 1, 1);
	if (unlock) {
		if (cacheable) {
			mrmgr__inflight_begin(c, &fl, rs, rl);
			reserved = 1;
		}
		ret = reg_unlocked(c, pd, rs, rl - rs + 1, racc, &mr);
	} else {
		ret = do_reg(c, pd, rs, rl - rs + 1, racc, &mr);
	}
	if (ret == ENOMEM || ret == EAGAIN) {
		c->st.evict_retries++;
		mrmgr__core_evict_all_idle(c);
		ret = do_reg(c, pd, rs, rl - rs + 1, racc, &mr);
	}
	if (merged && (ret == EFAULT || ret == ENOMEM || ret == EAGAIN)) {
		/* EFAULT: the merged span reaches memory that is no longer
		 * what the cached neighbours registered. ENOMEM/EAGAIN: the
		 * span does not fit even with every idle region evicted, yet
		 * the request alone may. Register just the request. */
		mrmgr__core_account_reg(c, kind, rl - rs + 1, -1);
		as = rs = start;
		al = rl = last;
		racc = access;
		merged = 0;
		mrmgr__core_account_reg(c, kind, rl - rs + 1, 1);
		ret = do_reg(c, pd, rs, rl - rs + 1, racc, &mr);
	}
	if (reserved) {
		/* Events that came while the lock was free may drop it. */
		if (!mrmgr__mon_quiet(&c->mon_seen))
			mrmgr__cache_apply_events(c);
		mrmgr__inflight_end(c, &fl);
		/* mrmgr_cache_move_pd() meanwhile: registered in the old PD. */
		if (!ret && !pd && mr->pd != c->pd)
			fl.dropped = 1;
		if (fl.dropped && cacheable) {
			mrmgr__mon_watch_abort(c, &watch);
			cacheable = 0;
			merged = 0;
		}
	}
	if (ret) {
		mrmgr__core_account_reg(c, kind, rl - rs + 1, -1);
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
	r = mrmgr__cache_alloc_region(c);
	if (!r) {
		mrmgr__core_account_reg(c, kind,
			       kind == MRMGR__REGION_VIEW ? 0 : rl - rs + 1, -1);
		if (cacheable)
			mrmgr__mon_watch_abort(c, &watch);
		if (kind != MRMGR__REGION_VIEW &&
		    !mrmgr__core_dereg(c, mr, "a new MR"))
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
	{
		/* The reference and the mark in one locked add: only the
		 * lock's holder sets or clears NEW, so the load tells whether
		 * adding it sets the bit (no carry); stale readers of a
		 * recycled region change only the count. */
		uint64_t *w = mrmgr__ref_word(r, slot);
		uint64_t add = MRMGR__REF_ONE;

		if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & MRMGR__REF_NEW))
			add += MRMGR__REF_NEW;
		__atomic_fetch_add(w, add, __ATOMIC_SEQ_CST);
	}
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
		if (!mrmgr__core_joins(mrmgr__node_region(n), as, al, rs, rl)) {
			/* Overlapped only in its headroom: stays. */
			n = mrmgr__itree_next_overlap(n, rs, rl);
			continue;
		}
		if (!mrmgr__core_detach(c, mrmgr__node_region(n)))
			c->st.make_before_break++;
		c->st.merges++;
		n = mrmgr__itree_first_overlap(&c->tree, rs, rl);
	}
	mrmgr__evict_age(c);
	mrmgr__cache_publish_region(c, r);
	*out = r;
	return 0;
}
