/*
 * Growth, access upgrades and PD moves: changing what a cached region
 * registers.
 *
 * Two ways to change a registration:
 *   - in place, with ibv_rereg_mr(): only for a region nobody holds (an
 *     in-use MR is never rereg'd under its users: the device revokes it
 *     during the call), taken out of hit reach first (the core's quiesce:
 *     the eviction protocol, then out of the tree), changed, put back;
 *   - make-before-break: register the new range, publish it to new gets,
 *     and leave the old MR to its holders, who deregister it at their last
 *     put (the core's merge path, miss.c, does exactly that).
 *
 * The man page's error contract, as rdma-core 44 implements it:
 *   0                                   done; the keys may have changed
 *   IBV_REREG_MR_ERR_INPUT              old MR valid, unchanged
 *   IBV_REREG_MR_ERR_DONT_FORK_NEW      old MR valid, unchanged
 *   IBV_REREG_MR_ERR_DO_FORK_OLD        new MR valid: adopted, fork state
 *                                       of the old range logged
 *   IBV_REREG_MR_ERR_CMD                the MR must not be used: dereg it
 *   IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW  likewise
 * and EOPNOTSUPP/ENOSYS in errno (rxe, siw: -4 with EOPNOTSUPP) mean the
 * device cannot rereg at all: remembered per device, so the fallback is
 * taken at once from then on. Whether a device can is probed once, at the
 * first cache creation on it, with a scratch one-page MR.
 *
 * Never rereg'd in place: regions whose MR is shared (a translation rereg
 * would make it private) or backed by peer memory or dma-buf.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache.h"
#include "monitor.h"
#include "grow.h"
#include "log.h"
#include "share.h"

#define REREG_TRANS IBV_REREG_MR_CHANGE_TRANSLATION
#define REREG_PD IBV_REREG_MR_CHANGE_PD
#define REREG_ACCESS IBV_REREG_MR_CHANGE_ACCESS

enum rereg_outcome {
	REREG_DONE, /* the region has its new translation/access/PD */
	REREG_KEPT, /* old MR valid and unchanged */
	REREG_LOST, /* the MR must not be used: release (dereg) the region */
};

/* Why a region is not rereg'd in place. */
enum blocker {
	BLOCK_NONE = 0,
	BLOCK_POLICY,      /* MRMGR_CACHE_NO_REREG */
	BLOCK_UNSUPPORTED, /* the device cannot */
	BLOCK_SHARED,      /* shared, peer memory or dma-buf MR */
};

static inline struct mrmgr_region *node_region(const struct mrmgr__itree_node *n)
{
	return mrmgr__container_of(n, struct mrmgr_region, node);
}

/* ------------------------------------------------ per-device verdicts */

/* What the device said is kept in the seam's learnt-capability table
 * (device.h), so only the first cache on a device probes. */
static int verdict_find(const struct mrmgr_cache *c)
{
	int v;

	if (!mrmgr__dev_learnt(c->ops, c->caps.name, MRMGR__LEARN_REREG, &v))
		v = MRMGR__REREG_UNKNOWN;
	return v;
}

static void verdict_store(const struct mrmgr_cache *c, int v)
{
	mrmgr__dev_learn(c->ops, c->caps.name, MRMGR__LEARN_REREG, v);
}

static int unsupported_errno(int err)
{
	return mrmgr__dev_unsupported(err) != MRMGR__UNSUP_NO;
}

/*
 * A failed rereg whose errno says the device cannot rereg at all: remember
 * it for the device and count the fallback. Returns 0 for any other errno.
 */
static int note_unsupported(struct mrmgr_cache *c, int err)
{
	if (!unsupported_errno(err))
		return 0;
	if (c->rereg != MRMGR__REREG_NO)
		mrmgr__info("%s cannot re-register (%s): growth and access "
			    "upgrades register anew from now on",
			    c->caps.name, strerror(err));
	c->rereg = MRMGR__REREG_NO;
	verdict_store(c, MRMGR__REREG_NO);
	c->st.rereg_fallback_unsupported++;
	return 1;
}

/*
 * Ask the device with a scratch one-page MR: an access "change" to the
 * access it has is the cheapest rereg there is, and harmless where it
 * works. Returns the verdict, or UNKNOWN when the probe could not run
 * (then the next cache creation, or the first growth, asks again).
 */
static int probe(struct mrmgr_cache *c)
{
	size_t page = (size_t)1 << c->page_shift;
	struct ibv_mr *mr = NULL;
	int err = 0, code, v;
	void *p = mmap(NULL, page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return MRMGR__REREG_UNKNOWN;
	*(volatile char *)p = 0;
	if (mrmgr__dev_reg_mr(c->ops, c->pd, p, page, IBV_ACCESS_LOCAL_WRITE,
			      &mr)) {
		munmap(p, page);
		return MRMGR__REREG_UNKNOWN;
	}
	c->st.rereg_probes++;
	code = mrmgr__dev_rereg_mr(c->ops, mr, REREG_ACCESS, c->pd, p, page,
				   IBV_ACCESS_LOCAL_WRITE, &err);
	if (code == 0) {
		v = MRMGR__REREG_YES;
	} else if (unsupported_errno(err)) {
		v = MRMGR__REREG_NO;
	} else {
		/* A failure that is not "unsupported": do not trust rereg on
		 * this cache, but do not brand the device either. */
		mrmgr__warn("%s: probing ibv_rereg_mr failed (%d, %s); this "
			    "cache will not use it", c->caps.name, code,
			    strerror(err));
		v = MRMGR__REREG_UNKNOWN;
	}
	/* The man page: dereg even after a failed rereg. */
	(void)mrmgr__core_dereg(c, mr, "the rereg probe's MR");
	munmap(p, page);
	mrmgr__info("%s: ibv_rereg_mr %s", c->caps.name,
		    v == MRMGR__REREG_YES ? "works" : "is not usable");
	if (v == MRMGR__REREG_UNKNOWN)
		return MRMGR__REREG_NO; /* this cache only: not stored */
	verdict_store(c, v);
	return v;
}

void mrmgr__grow_init(struct mrmgr_cache *c)
{
	c->rereg = MRMGR__REREG_NO;
	if (!c->ops->rereg_mr ||
	    (c->cfg.flags & (MRMGR_CACHE_NO_REREG | MRMGR_CACHE_DISABLE)))
		return;
	c->rereg = verdict_find(c);
	if (c->rereg == MRMGR__REREG_UNKNOWN)
		c->rereg = probe(c);
}

/* Can the device rereg? Probes again if creation could not. */
static int device_can_rereg(struct mrmgr_cache *c)
{
	if (c->rereg == MRMGR__REREG_UNKNOWN)
		c->rereg = probe(c);
	return c->rereg == MRMGR__REREG_YES;
}

static int blocker(struct mrmgr_cache *c, const struct mrmgr_region *r)
{
	if (c->cfg.flags & (MRMGR_CACHE_NO_REREG | MRMGR_CACHE_DISABLE))
		return BLOCK_POLICY;

	if (!device_can_rereg(c))
		return BLOCK_UNSUPPORTED;
	if (r->flags & (MRMGR__REGION_SHARED | MRMGR__REGION_PEER))
		return BLOCK_SHARED;
	/* An implicit-ODP view has no MR of its own to rereg, and mlx5 never
	 * keeps keys on a translation rereg of an ODP MR: both take
	 * make-before-break, which for ODP costs no pinning anyway. */
	if (r->kind != MRMGR__REGION_PINNED)
		return BLOCK_SHARED;
	return BLOCK_NONE;
}

static void count_blocker(struct mrmgr_cache *c, int b)
{
	if (b == BLOCK_UNSUPPORTED)
		c->st.rereg_fallback_unsupported++;
	else if (b == BLOCK_SHARED)
		c->st.rereg_fallback_shared++;
}

/* ------------------------------------------------ the rereg contract */

/* The rereg flags that take r to [start, last], access, pd; 0: nothing. */
static int rereg_flags(const struct mrmgr_region *r, uint64_t start,
		       uint64_t last, unsigned int access, struct ibv_pd *pd)
{
	int f = 0;

	if (start != r->node.start || last != r->node.last)
		f |= REREG_TRANS;
	if (access != r->access) {
		f |= REREG_ACCESS;
		/* Pages pinned for reading must be pinned again for stores. */
		if ((access & IBV_ACCESS_LOCAL_WRITE) &&
		    !(r->access & IBV_ACCESS_LOCAL_WRITE))
			f |= REREG_TRANS;
	}
	if (pd != r->mr->pd)
		f |= REREG_PD;
	return f;
}

/*
 * Rereg an idle region that is out of the tree, and apply the contract.
 * On REREG_DONE the region's range, access, generation and the cache's
 * accounting are updated; on REREG_LOST the caller releases the region
 * (which deregisters the MR, as the man page requires).
 */
static int rereg(struct mrmgr_cache *c, struct mrmgr_region *r, int flags,
		 struct ibv_pd *pd, uint64_t start, uint64_t len,
		 unsigned int access)
{
	struct ibv_mr *mr = r->mr;
	uint64_t old_len = mrmgr__region_len(r);
	int trans = flags & REREG_TRANS;
	int err = 0, code;
	struct mrmgr__watch_tx tx;

	/* A new translation pins the new range: watch it first, as a miss
	 * does, so a change to it from now on is reported. Unwatchable: no
	 * in-place growth; the merge path registers it uncached. A failed
	 * rereg (EFAULT where part of the range went away) aborts this
	 * watch, and the caller's fresh registration takes a watch_begin()
	 * of its own: nothing classified here is trusted after a failure. */
	if (trans && mrmgr__mon_watch_begin(c, start, start + len - 1, &tx))
		return REREG_KEPT;
	c->st.rereg_attempts++;
	code = mrmgr__dev_rereg_mr(c->ops, mr, flags,
				   (flags & REREG_PD) ? pd : mr->pd,
				   trans ? (void *)(uintptr_t)start : mr->addr,
				   trans ? (size_t)len : mr->length,
				   (flags & REREG_ACCESS) ? (int)access : 0, &err);
	mrmgr__dbg("rereg [%#llx, +%llu) flags %#x -> [%#llx, +%llu) access "
		   "%#x: %d (%s)", (unsigned long long)mrmgr__region_start(r),
		   (unsigned long long)old_len, flags, (unsigned long long)start,
		   (unsigned long long)len, access, code,
		   code ? strerror(err) : "ok");
	if (trans) {
		/* The new translation is in force only on these two codes:
		 * the region then takes the new watch, else drops it. */
		if (code == 0 || code == IBV_REREG_MR_ERR_DO_FORK_OLD) {
			mrmgr__mon_unwatch(c, r);
			/* Refused: a change was under way; the publish that
			 * follows must not cache it either. */
			if (mrmgr__mon_watch_commit(c, &tx, r))
				r->watch.dirty = 1;
		} else {
			mrmgr__mon_watch_abort(c, &tx);
		}
	}
	switch (code) {
	case 0:
	case IBV_REREG_MR_ERR_DO_FORK_OLD:
		if (code) {
			c->st.rereg_fork_errors++;
			mrmgr__warn("rereg of [%#llx, +%llu): the old range's "
				    "fork state could not be restored (%s); "
				    "the new registration is in use",
				    (unsigned long long)mrmgr__region_start(r),
				    (unsigned long long)old_len, strerror(err));
		}
		c->st.rereg_successes++;
		if (trans) {
			/* One registration still, of another size. */
			mrmgr__core_account_reg(c, MRMGR__REGION_PINNED,
						old_len, -1);
			mrmgr__core_account_reg(c, MRMGR__REGION_PINNED, len,
						1);
			c->st.pages_registered += len >> c->page_shift;
			/* Out of the tree: only stale readers look, and they
			 * fail their sequence check. */
			MRMGR__WRITE_ONCE(r->node.start, start);
			MRMGR__WRITE_ONCE(r->node.last, start + len - 1);
		}
		MRMGR__WRITE_ONCE(r->access, access);
		r->gen = ++c->next_gen;
		mrmgr__region_set_keys(r); /* the keys may have changed */
		return REREG_DONE;
	case IBV_REREG_MR_ERR_INPUT:
	case IBV_REREG_MR_ERR_DONT_FORK_NEW:
		if (!note_unsupported(c, err)) {
			c->st.rereg_fallback_input++;
			mrmgr__info("rereg refused (%d, %s): the old MR stays "
				    "valid; registering anew", code,
				    strerror(err));
		}
		return REREG_KEPT;
	default:
		if (!note_unsupported(c, err)) {
			/* Handled (the next step registers anew), and under a
			 * tight memlock budget it can happen at every growth:
			 * said once per process, the rest at debug level and
			 * in the stats (rereg_fallback_cmd). */
			static int warned;
			int first = !__atomic_exchange_n(&warned, 1,
							 __ATOMIC_RELAXED);

			c->st.rereg_fallback_cmd++;
			mrmgr__log(first ? MRMGR_LOG_WARN : MRMGR_LOG_DEBUG,
				   "rereg failed (%d, %s): the MR is dropped "
				   "and registered anew%s", code, strerror(err),
				   first ? " (said once; counted in "
					   "rereg_fallback_cmd)" : "");
		}
		return REREG_LOST;
	}
}

/* ------------------------------------------------ growth on a miss */

int mrmgr__grow_miss(struct mrmgr_cache *c, uint64_t start, uint64_t last,
		     unsigned int slot, uint64_t *rs,
		     uint64_t *rl, unsigned int *racc, uint64_t as,
		     uint64_t al, struct mrmgr_region **out)
{
	struct mrmgr_region *r = NULL;
	uint64_t hs = UINT64_MAX, hl = 0, n = 0, old_len, new_len;
	int growth = 0, b, res, flags;

	for (struct mrmgr__itree_node *node =
		     mrmgr__itree_first_overlap(&c->tree, *rs, *rl);
	     node; node = mrmgr__itree_next_overlap(node, *rs, *rl)) {
		if (!mrmgr__core_joins(node_region(node), as, al, *rs, *rl))
			continue; /* only its headroom: stays apart */
		r = node_region(node);
		n++;
		hs = node->start < hs ? node->start : hs;
		hl = node->last > hl ? node->last : hl;
		/* Growth: the request overlaps a region and reaches past it
		 * (merely touching it is a merge, not growth). */
		if (start <= node->last && last >= node->start &&
		    (start < node->start || last > node->last))
			growth = 1;
	}
	if (!n)
		return MRMGR__GROW_PASS;
	if (growth) {
		c->st.grows++;
		mrmgr__headroom_widen(c, hs, hl, rs, rl);
	}
	if (n != 1)
		return MRMGR__GROW_PASS; /* several regions: merge them */

	b = blocker(c, r);
	if (b) {
		count_blocker(c, b);
		/* No rereg: dereg + reg. An idle region goes first, so old
		 * and new are never pinned together (nobody needs the old
		 * one); a held or shared one is left to the merge path. */
		if (b != BLOCK_SHARED && mrmgr__core_quiesce(c, r)) {
			mrmgr__core_release(c, r);
			c->st.merges++; /* absorbed by what is registered next */
		}
		return MRMGR__GROW_PASS;
	}
	if (!mrmgr__core_quiesce(c, r)) {
		/* Held: make-before-break (the caller's merge path). */
		c->st.rereg_fallback_in_use++;
		return MRMGR__GROW_PASS;
	}
	old_len = mrmgr__region_len(r);
	new_len = *rl - *rs + 1;
	if (new_len > old_len && !mrmgr__core_make_room(c, 0, new_len - old_len)) {
		mrmgr__core_publish(c, r);
		return MRMGR__GROW_PASS;
	}
	flags = rereg_flags(r, *rs, *rl, *racc, c->pd);
	/* Nothing to change (cannot happen after a true miss): a hit. */
	res = flags ? rereg(c, r, flags, c->pd, *rs, new_len, *racc) : REREG_DONE;
	if (res == REREG_DONE) {
		r->asked_start = as < start ? as : start;
		r->asked_last = al > last ? al : last;
		/* Used, as a new region is (evict.c). */
		if (!(mrmgr__ref_take(r, slot) & MRMGR__REF_USED))
			mrmgr__ref_mark_used(mrmgr__ref_word(r, slot));
		mrmgr__core_publish(c, r);
		*out = r;
		return 0;
	}
	if (res == REREG_KEPT) {
		mrmgr__core_publish(c, r); /* the merge path replaces it */
	} else {
		mrmgr__core_release(c, r);
		c->st.merges++;
	}
	return MRMGR__GROW_PASS;
}

/* ------------------------------------------------ a held region */

int mrmgr__grow_held(struct mrmgr_cache *c, struct mrmgr_region **rp,
		     unsigned int slot, uint64_t start, uint64_t len,
		     unsigned int access)
{
	struct mrmgr_region *r = *rp, *old = NULL, *nr = NULL;
	uint64_t last = start + len - 1;
	int was_live = 0, mbb = 0, ret;

	*rp = NULL;
	if (r) {
		int idle;

		if (start < r->node.start || last > r->node.last)
			c->st.grows++;
		was_live = mrmgr__region_state(r) == MRMGR__REGION_LIVE;
		mrmgr__ref_drop(r, slot);
		if (was_live)
			idle = mrmgr__core_quiesce(c, r);
		else /* detached: out of the tree; ours alone without holders */
			idle = mrmgr__region_refs(r, c->nstripes) == 0;
		if (!idle) {
			/* Others hold it: they keep it until their last put. */
			if (was_live)
				mrmgr__core_detach(c, r);
			c->st.rereg_fallback_in_use++;
			mbb = 1;
			r = NULL;
		}
	}
	if (r) {
		/* Idle and out of the tree. */
		int flags = rereg_flags(r, start, last, access, c->pd);
		int b = flags ? blocker(c, r) : BLOCK_NONE;
		uint64_t old_len = mrmgr__region_len(r);
		int res = REREG_DONE;

		if (b) {
			count_blocker(c, b);
			/* dereg + reg, the old one first (nobody holds it);
			 * a shared one waits for its replacement. */
			res = b == BLOCK_SHARED ? REREG_KEPT : REREG_LOST;
		} else if (flags) {
			res = len > old_len &&
				      !mrmgr__core_make_room(c, 0, len - old_len)
				      ? REREG_KEPT
				      : rereg(c, r, flags, c->pd, start, len, access);
		}
		if (res == REREG_DONE) {
			r->asked_start = start;
			r->asked_last = last;
			mrmgr__ref_take(r, slot);
			/* Back in the cache; one that was handed out uncached
			 * goes in only if the limits allow it now. */
			if (was_live || mrmgr__core_make_room(c, 0, 0))
				mrmgr__core_publish(c, r);
			*rp = r;
			return 0;
		}
		if (res == REREG_LOST) {
			mrmgr__core_release(c, r);
			r = NULL;
		}
		old = r; /* valid: released once the new one is in */
	}
	ret = mrmgr__core_get_locked(c, start, last, access, slot,
				      MRMGR__GET_NO_GROW | MRMGR__GET_NO_MERGE,
				      &nr);
	if ((ret == ENOMEM || ret == EAGAIN) && old) {
		/* Old and new do not fit together: break before make. */
		mrmgr__core_release(c, old);
		old = NULL;
		ret = mrmgr__core_get_locked(c, start, last, access, slot,
					      MRMGR__GET_NO_GROW |
						      MRMGR__GET_NO_MERGE,
					      &nr);
	}
	if (old)
		mrmgr__core_release(c, old);
	if (ret)
		return ret;
	c->st.make_before_break += (uint64_t)mbb;
	*rp = nr;
	return 0;
}

/* ------------------------------------------------ PD move */

static void move_one(struct mrmgr_cache *c, struct mrmgr_region *r, void *arg)
{
	struct ibv_pd *pd = arg;
	int b;

	/* Buffers' regions move with their buffers, next. */
	if (r->mr->pd == pd || (r->flags & MRMGR__REGION_BUFFER))
		return;
	if (!mrmgr__core_quiesce(c, r)) {
		/* Held: its holders keep the old-PD MR until their last put;
		 * the next get registers in the new PD. */
		mrmgr__core_detach(c, r);
		c->st.rereg_fallback_in_use++;
		c->st.make_before_break++;
		return;
	}
	b = blocker(c, r);
	if (!b && rereg(c, r, REREG_PD, pd, mrmgr__region_start(r),
			mrmgr__region_len(r), r->access) == REREG_DONE) {
		mrmgr__core_publish(c, r);
		return;
	}
	count_blocker(c, b);
	/* Kept or lost, it is idle: drop it; the next get registers anew. */
	mrmgr__core_release(c, r);
}

MRMGR_EXPORT int mrmgr_cache_move_pd(mrmgr_cache_t *c, struct ibv_pd *pd)
{
	int ret;

	if (!c || !pd) {
		mrmgr__err("mrmgr_cache_move_pd: NULL %s",
			   !c ? "cache" : "protection domain");
		return EINVAL;
	}
	if (c->flags & MRMGR__CACHE_MULTI_PD) {
		mrmgr__err("mrmgr_cache_move_pd: a multi-PD cache cannot move");
		return EINVAL;
	}
	mrmgr__core_lock(c);
	if (pd->context != c->pd->context) {
		mrmgr__core_unlock(c);
		mrmgr__err("mrmgr_cache_move_pd: the PD is of another device");
		return EINVAL;
	}
	if (pd == c->pd) {
		mrmgr__core_unlock(c);
		return 0;
	}
	/* From here on misses register in the new PD. */
	c->pd = pd;
	mrmgr__core_each_cached(c, move_one, pd);
	ret = mrmgr__buf_follow_pd(c);
	mrmgr__core_unlock(c);
	return ret;
}

/* ------------------------------------------------------------ hooks */

static int grow_init(struct mrmgr_cache *c)
{
	mrmgr__grow_init(c);
	return 0;
}

/* Growth and access upgrades: rereg the one region absorbed in place, or
 * widen the span by the headroom policy. */
static int grow_plan_miss(struct mrmgr_cache *c, struct mrmgr__miss *m,
			  struct mrmgr_region **out)
{
	if (!m->merged || (m->gflags & MRMGR__GET_NO_GROW))
		return MRMGR__PLAN_GO_ON;
	return mrmgr__grow_miss(c, m->start, m->last, m->slot, &m->rs, &m->rl,
				&m->racc, m->as, m->al, out);
}

const struct mrmgr__ext mrmgr__ext_grow = {
	.name = "grow",
	.init = grow_init,
	.plan_miss = grow_plan_miss,
};
