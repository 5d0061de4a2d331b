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
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define HAVE_SINGLE_THREADED 1
#endif
#endif

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
	first = mrmgr__itree_first_overlap(mrmgr__cache_tree(c), qs, ql);
	if (!first)
		return 0;
	for (struct mrmgr__itree_node *n =
		     mrmgr__itree_first_overlap(mrmgr__cache_tree(c), s, l);
	     n && !growth; n = mrmgr__itree_next_overlap(n, s, l))
		growth = mrmgr__core_joins(mrmgr__node_region(n), s, l, s, l);
	do {
		qs = s ? s - 1 : 0;
		ql = l != UINT64_MAX ? l + 1 : l;
		grown = 0;
		for (struct mrmgr__itree_node *n =
			     first ? first
				   : mrmgr__itree_first_overlap(mrmgr__cache_tree(c), qs, ql);
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
	int ret = mrmgr__kind_reg(c->kind, c->kind_ctx, c->ops,
				 pd ? pd : c->pd, start, len,
				 (int)(access | c->reg_access), mr);

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

void mrmgr__core_dereg_extra(struct mrmgr_cache *c, struct ibv_mr *mr,
			     uint64_t len, const char *what)
{
	if (!mrmgr__core_dereg(c, mr, what))
		c->st.deregistrations++;
	mrmgr__core_account_reg(c, MRMGR__REGION_PINNED, len, -1);
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
 *
 * While only one thread has ever taken this cache's lock, nobody could go
 * ahead meanwhile: the lock is kept, as on the paths that must keep it
 * (a lock pair, the reservation and its end less per miss: about 10% of
 * a zero-cost miss in a process with threads, where each lock round is
 * a bus-locked instruction and more). That is the usual MPI process: one
 * thread (the progress thread, or the only one calling MPI) gets and
 * puts, while others compute, allocate and free; their memory calls
 * reach the cache as events, lock-free, and its hits and puts are
 * lock-free too. The first time another thread takes the lock (a miss,
 * a put of a region's last user, an invalidation, a drain of events,
 * the statistics), the cache counts two lockers for good, and from then
 * on every miss releases the lock around its registration. That thread
 * waits, that once, for the registration under way when it came. A
 * process with one thread (glibc's __libc_single_threaded, cleared at
 * the first pthread_create(); libcs without it always ask the cache)
 * keeps the lock without asking.
 */
static inline int one_thread(void)
{
#ifdef HAVE_SINGLE_THREADED
	return __libc_single_threaded;
#else
	return 0;
#endif
}

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
	ret = mrmgr__kind_reg(c->kind, c->kind_ctx, c->ops, pd, start, len,
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
 * One miss, as the pipeline below carries it from stage to stage: what
 * the features see and shape (m: request, span, kind), and the core's
 * own (where it registers, whether the result is cached, the watch and
 * the reservation it holds, the MR once registered).
 */
struct miss_run {
	struct mrmgr__miss m;
	struct ibv_pd *pd;      /* NULL: the cache's PD, read when registering */
	int cacheable;          /* else handed out uncached (DETACHED) */
	int unlock;             /* registers with the lock released */
	int reserved;           /* fl is linked (inflight.c) */
	struct ibv_mr *mr;
	struct mrmgr__watch_tx watch; /* begun when cacheable after reserve */
	struct mrmgr__inflight fl;
};

/* miss_plan(): it waited for another registration; look again. */
#define PLAN_WAITED (-2)

static uint64_t span_len(const struct miss_run *x)
{
	return x->m.rl - x->m.rs + 1;
}

/* The span falls back to the request alone (nothing merged). */
static void span_is_request(struct miss_run *x)
{
	x->m.as = x->m.rs = x->m.start;
	x->m.al = x->m.rl = x->m.last;
	x->m.racc = x->m.access;
	x->m.merged = 0;
}

/* With the lock released, another miss registering over [s, l] is
 * waited for (the caller then looks again): 1 when it waited. Inlined:
 * a miss that keeps the lock asks three times, and the answer is one
 * load. */
static inline __attribute__((always_inline)) int
wait_for_overlap(struct mrmgr_cache *c, const struct miss_run *x, uint64_t s,
		 uint64_t l)
{
	if (!x->unlock || !mrmgr__inflight_find(c, s, l))
		return 0;
	mrmgr__inflight_wait(c);
	return 1;
}

/*
 * Plan: the span (merge over the regions the request overlaps or
 * touches), then the features' say (ext.h: growth in place or headroom,
 * the kind of region ODP makes). MRMGR__PLAN_GO_ON, PLAN_WAITED, or what
 * a feature answered (0 with *out, or an errno).
 */
static int miss_plan(struct mrmgr_cache *c, struct miss_run *x,
		     struct mrmgr_region **out)
{
	struct mrmgr__miss *m = &x->m;
	int ret;

	if (wait_for_overlap(c, x, m->start, m->last))
		return PLAN_WAITED;
	if (x->cacheable && !(c->cfg.flags & MRMGR_CACHE_NO_MERGE) &&
	    !(m->gflags & MRMGR__GET_NO_MERGE)) {
		/* Regions that pin nothing: max_bytes does not bound them. */
		uint64_t limit = c->unpinned ? UINT64_MAX : c->cfg.max_bytes;

		if (c->caps.max_mr_size && c->caps.max_mr_size < limit)
			limit = c->caps.max_mr_size;
		/* Also true for a region inside the request: it is absorbed. */
		m->merged = merge_span(c, &m->rs, &m->rl, &m->racc, limit,
				       &m->as, &m->al);
	}
	if (m->merged && wait_for_overlap(c, x, m->rs, m->rl))
		return PLAN_WAITED;
	/* Most misses concern no feature: not even a call then. */
	ret = mrmgr__ext_wants_plan(c, m) ? mrmgr__ext_plan_miss(c, m, out)
					  : MRMGR__PLAN_GO_ON;
	if (ret != MRMGR__PLAN_GO_ON)
		return ret;
	/* Headroom may have widened the span over a reservation. */
	if (x->cacheable && wait_for_overlap(c, x, m->rs, m->rl))
		return PLAN_WAITED;
	return MRMGR__PLAN_GO_ON;
}
/*
 * Reserve: room within the limits and a watch on the span before it is
 * pinned (a change from now on is reported); what cannot be watched or
 * fit is registered as the request alone, uncached. Then the
 * span counts against the limits, and with the lock to be released the
 * reservation other misses wait on is linked.
 */
static void miss_reserve(struct mrmgr_cache *c, struct miss_run *x)
{
	struct mrmgr__miss *m = &x->m;

	if (x->cacheable) {
		int room;

		room = mrmgr__cache_make_room(
			c, 1, m->kind == MRMGR__REGION_PINNED ? span_len(x) : 0);
		/* The victims: deregistered with the lock released, with the
		 * registration, or now when it keeps the lock. */
		if (!x->unlock)
			mrmgr__cache_reap_locked(c);
		if (!room || mrmgr__mon_watch_begin(c, m->rs, m->rl, &x->watch)) {
			x->cacheable = 0;
			span_is_request(x);
		}
	}
	if (m->kind == MRMGR__REGION_VIEW) {
		/* The implicit MR already covers it: no registration at all
		 * (and what the room took is deregistered now). */
		mrmgr__cache_reap_locked(c);
		mrmgr__core_account_reg(c, m->kind, 0, 1);
		return;
	}
	/* Counted from now: concurrent misses see the room taken. */
	mrmgr__core_account_reg(c, m->kind, span_len(x), 1);
	if (x->unlock && x->cacheable) {
		mrmgr__inflight_begin(c, &x->fl, m->rs, m->rl);
		x->reserved = 1;
	}
}

/* The reservation ends (lock held again): events that came while the
 * lock was free, or a PD move, may have dropped it. */
static void miss_unreserve(struct mrmgr_cache *c, struct miss_run *x, int ret)
{
	if (!x->reserved)
		return;
	if (!mrmgr__mon_quiet(&c->mon_seen))
		mrmgr__cache_apply_events(c);
	mrmgr__inflight_end(c, &x->fl);
	/* mrmgr_cache_move_pd() meanwhile: registered in the old PD. */
	if (!ret && !x->pd && x->mr->pd != c->pd)
		x->fl.dropped = 1;
	if (x->fl.dropped && x->cacheable) {
		mrmgr__mon_watch_abort(c, &x->watch);
		x->cacheable = 0;
		x->m.merged = 0;
	}
}

/*
 * Register the span, retries and accounting inside: once more after
 * evicting every idle region when the device is out of memory, and the
 * request alone when a merged span fails (EFAULT: it reaches memory that
 * is no longer what the cached neighbours registered; ENOMEM/EAGAIN: it
 * does not fit even with every idle region evicted, yet the request alone
 * may). On failure the reservation is undone and the error said.
 */
static int miss_register(struct mrmgr_cache *c, struct miss_run *x)
{
	struct mrmgr__miss *m = &x->m;
	int ret;

	if (m->kind == MRMGR__REGION_VIEW) {
		x->mr = m->view_mr;
		return 0;
	}
	if (x->unlock)
		ret = reg_unlocked(c, x->pd, m->rs, span_len(x), m->racc, &x->mr);
	else
		ret = do_reg(c, x->pd, m->rs, span_len(x), m->racc, &x->mr);
	if (ret == ENOMEM || ret == EAGAIN) {
		c->st.evict_retries++;
		mrmgr__core_evict_all_idle(c);
		ret = do_reg(c, x->pd, m->rs, span_len(x), m->racc, &x->mr);
	}
	if (m->merged && (ret == EFAULT || ret == ENOMEM || ret == EAGAIN)) {
		mrmgr__core_account_reg(c, m->kind, span_len(x), -1);
		span_is_request(x);
		mrmgr__core_account_reg(c, m->kind, span_len(x), 1);
		ret = do_reg(c, x->pd, m->rs, span_len(x), m->racc, &x->mr);
	}
	miss_unreserve(c, x, ret);
	if (!ret)
		return 0;
	mrmgr__core_account_reg(c, m->kind, span_len(x), -1);
	if (x->cacheable)
		mrmgr__mon_watch_abort(c, &x->watch);
	c->st.reg_failures++;
	MRMGR__LOG_IF(ret == EFAULT || ret == EINVAL ? MRMGR_LOG_ERROR
						   : MRMGR_LOG_WARN,
		   "registering [%#llx, +%llu) access %#x on %s: %s",
		   (unsigned long long)m->rs, (unsigned long long)span_len(x),
		   m->racc, c->caps.name, strerror(ret));
	return ret;
}

/*
 * Adopt: a region for the MR, referenced on the caller's slot and marked
 * new; NULL (out of memory) after undoing the registration.
 */
static struct mrmgr_region *miss_adopt(struct mrmgr_cache *c,
				       struct miss_run *x)
{
	const struct mrmgr__miss *m = &x->m;
	struct mrmgr_region *r = mrmgr__cache_alloc_region(c);

	if (!r) {
		mrmgr__core_account_reg(c, m->kind,
			m->kind == MRMGR__REGION_VIEW ? 0 : span_len(x), -1);
		if (x->cacheable)
			mrmgr__mon_watch_abort(c, &x->watch);
		if (m->kind != MRMGR__REGION_VIEW &&
		    !mrmgr__core_dereg(c, x->mr, "a new MR"))
			c->st.deregistrations++;
		mrmgr__err("out of memory for a region");
		return NULL;
	}
	r->mr = x->mr;
	r->kind = m->kind;
	r->flags = 0;
	r->gen = ++c->next_gen;
	/* A stale reader may still look at a recycled region. */
	MRMGR__WRITE_ONCE(r->node.start, m->rs);
	MRMGR__WRITE_ONCE(r->node.last, m->rl);
	MRMGR__WRITE_ONCE(r->access, m->racc);
	r->asked_start = m->as < m->start ? m->as : m->start;
	r->asked_last = m->al > m->last ? m->al : m->last;
	/* Its reference on the caller's slot, marked new (spared by the hand
	 * like a hit region, but after a lap it goes before regions hit
	 * since: evict.c), is taken when it is installed: with the pass
	 * that makes it live when cached, in one read-modify-write. */
	mrmgr__ext_region_added(c, r);
	return r;
}

/*
 * Install: the watch's last step, then either hand the region out
 * uncached, or detach everything it covers (its users keep their MRs,
 * make-before-break, and deregister them at their last put) and publish
 * it.
 */
static void miss_install(struct mrmgr_cache *c, struct miss_run *x,
			 struct mrmgr_region *r)
{
	const struct mrmgr__miss *m = &x->m;

	if (x->cacheable && watch_commit(c, &x->watch, r)) {
		mrmgr__mon_unwatch(c, r);
		x->cacheable = 0;
	}
	if (!x->cacheable) {
		mrmgr__region_ref_new(r, m->slot);
		mrmgr__region_set_keys(r);
		mrmgr__region_set_state(r, MRMGR__REGION_DETACHED);
		c->st.uncached++;
		return;
	}
	for (struct mrmgr__itree_node *n =
		     m->merged ? mrmgr__itree_first_overlap(mrmgr__cache_tree(c), m->rs, m->rl)
			       : NULL;
	     n;) {
		if (!mrmgr__core_joins(mrmgr__node_region(n), m->as, m->al,
				       m->rs, m->rl)) {
			/* Overlapped only in its headroom: stays. */
			n = mrmgr__itree_next_overlap(n, m->rs, m->rl);
			continue;
		}
		if (!mrmgr__core_detach(c, mrmgr__node_region(n)))
			c->st.make_before_break++;
		c->st.merges++;
		n = mrmgr__itree_first_overlap(mrmgr__cache_tree(c), m->rs, m->rl);
	}
	mrmgr__evict_age(c);
	mrmgr__cache_publish_new(c, r, m->slot);
}

/*
 * Register [start, last] for a get that missed; called with the lock
 * (which it may drop and take again: MRMGR__GET_MAY_UNLOCK). gflags: enum
 * mrmgr__get_flags. MRMGR__MISS_AGAIN: it waited for another
 * registration; the caller looks again. A pipeline over one record:
 * plan, reserve, register, adopt, install.
 */
int mrmgr__cache_miss(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		      uint64_t last, unsigned int access, unsigned int slot,
		      unsigned int gflags, struct mrmgr_region **out)
{
	struct miss_run x; /* the watch and the reservation: set when used */
	struct mrmgr_region *r;
	int ret;

	x.m = (struct mrmgr__miss){ .start = start, .last = last,
				    .access = access, .slot = slot,
				    .gflags = gflags, .rs = start, .rl = last,
				    .racc = access, .as = start, .al = last,
				    .kind = MRMGR__REGION_PINNED };
	x.pd = pd;
	x.cacheable = !(c->cfg.flags & MRMGR_CACHE_DISABLE);
	x.unlock = (gflags & MRMGR__GET_MAY_UNLOCK) &&
		   !(c->flags & MRMGR__CACHE_EXT_GET) &&
		   c->lockers == MRMGR__LOCKER_MANY && !one_thread();
	x.reserved = 0;
	x.mr = NULL;

	ret = miss_plan(c, &x, out);
	if (ret != MRMGR__PLAN_GO_ON)
		return ret == PLAN_WAITED ? MRMGR__MISS_AGAIN : ret;
	miss_reserve(c, &x);
	ret = miss_register(c, &x);
	if (ret)
		return ret;
	r = miss_adopt(c, &x);
	if (!r)
		return ENOMEM;
	miss_install(c, &x, r);
	*out = r;
	return 0;
}
