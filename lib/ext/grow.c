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

#include "core.h"
#include "device.h"
#include "ext.h"
#include "ids.h"
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

/* The feature's state (core.h): the cache's verdict, enum
 * mrmgr__rereg_verdict. */
static int *verdict_of(const struct mrmgr_cache *c)
{
	return mrmgr__core_priv(c, &mrmgr__ext_grow);
}

/* ------------------------------------------------ per-device verdicts */

/* What the device said is kept in the seam's learnt-capability table
 * (device.h), so only the first cache on a device probes. */
static int verdict_find(const struct mrmgr_cache *c)
{
	const struct mrmgr__core_view *cv = mrmgr__core_view(c);
	int v;

	if (!mrmgr__dev_learnt(cv->ops, cv->caps->name, MRMGR__LEARN_REREG, &v))
		v = MRMGR__REREG_UNKNOWN;
	return v;
}

static void verdict_store(const struct mrmgr_cache *c, int v)
{
	const struct mrmgr__core_view *cv = mrmgr__core_view(c);

	mrmgr__dev_learn(cv->ops, cv->caps->name, MRMGR__LEARN_REREG, v);
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
	if (*verdict_of(c) != MRMGR__REREG_NO)
		mrmgr__info("%s cannot re-register (%s): growth and access "
			    "upgrades register anew from now on",
			    mrmgr__core_view(c)->caps->name, strerror(err));
	*verdict_of(c) = MRMGR__REREG_NO;
	verdict_store(c, MRMGR__REREG_NO);
	mrmgr__core_count(c, rereg_fallback_unsupported, 1);
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
	const struct mrmgr__core_view *cv = mrmgr__core_view(c);
	size_t page = (size_t)1 << cv->page_shift;
	struct ibv_mr *mr = NULL;
	int err = 0, code, v;
	void *p = mmap(NULL, page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return MRMGR__REREG_UNKNOWN;
	*(volatile char *)p = 0;
	if (mrmgr__dev_reg_mr(cv->ops, cv->pd, p, page,
			      IBV_ACCESS_LOCAL_WRITE, &mr)) {
		munmap(p, page);
		return MRMGR__REREG_UNKNOWN;
	}
	mrmgr__core_count(c, rereg_probes, 1);
	code = mrmgr__dev_rereg_mr(cv->ops, mr, REREG_ACCESS, cv->pd, p,
				   page, IBV_ACCESS_LOCAL_WRITE, &err);
	if (code == 0) {
		v = MRMGR__REREG_YES;
	} else if (unsupported_errno(err)) {
		v = MRMGR__REREG_NO;
	} else {
		/* A failure that is not "unsupported": do not trust rereg on
		 * this cache, but do not brand the device either. */
		mrmgr__warn("%s: probing ibv_rereg_mr failed (%d, %s); this "
			    "cache will not use it", cv->caps->name, code,
			    strerror(err));
		v = MRMGR__REREG_UNKNOWN;
	}
	/* The man page: dereg even after a failed rereg. */
	(void)mrmgr__core_dereg(c, mr, "the rereg probe's MR");
	munmap(p, page);
	mrmgr__info("%s: ibv_rereg_mr %s", cv->caps->name,
		    v == MRMGR__REREG_YES ? "works" : "is not usable");
	if (v == MRMGR__REREG_UNKNOWN)
		return MRMGR__REREG_NO; /* this cache only: not stored */
	verdict_store(c, v);
	return v;
}

void mrmgr__grow_init(struct mrmgr_cache *c)
{
	*verdict_of(c) = MRMGR__REREG_NO;
	if (!mrmgr__core_view(c)->ops->rereg_mr ||
	    (mrmgr__core_view(c)->cfg_flags &
	     (MRMGR_CACHE_NO_REREG | MRMGR_CACHE_DISABLE)))
		return;
	*verdict_of(c) = verdict_find(c);
	if (*verdict_of(c) == MRMGR__REREG_UNKNOWN)
		*verdict_of(c) = probe(c);
}

/* Can the device rereg? Probes again if creation could not. */
static int device_can_rereg(struct mrmgr_cache *c)
{
	if (*verdict_of(c) == MRMGR__REREG_UNKNOWN)
		*verdict_of(c) = probe(c);
	return *verdict_of(c) == MRMGR__REREG_YES;
}

static int blocker(struct mrmgr_cache *c, const struct mrmgr_region *r)
{
	if (mrmgr__core_view(c)->cfg_flags &
	    (MRMGR_CACHE_NO_REREG | MRMGR_CACHE_DISABLE))
		return BLOCK_POLICY;

	if (!device_can_rereg(c))
		return BLOCK_UNSUPPORTED;
	if (mrmgr__rgn_flags(r) & (MRMGR__REGION_SHARED | MRMGR__REGION_PEER))
		return BLOCK_SHARED;
	/* An implicit-ODP view has no MR of its own to rereg, and mlx5 never
	 * keeps keys on a translation rereg of an ODP MR: both take
	 * make-before-break, which for ODP costs no pinning anyway. */
	if (mrmgr__rgn_kind(r) != MRMGR__REGION_PINNED)
		return BLOCK_SHARED;
	return BLOCK_NONE;
}

static void count_blocker(struct mrmgr_cache *c, int b)
{
	if (b == BLOCK_UNSUPPORTED)
		mrmgr__core_count(c, rereg_fallback_unsupported, 1);
	else if (b == BLOCK_SHARED)
		mrmgr__core_count(c, rereg_fallback_shared, 1);
}

/* ------------------------------------------------ the rereg contract */

/* The rereg flags that take r to [start, last], access, pd; 0: nothing. */
static int rereg_flags(const struct mrmgr_region *r, uint64_t start,
		       uint64_t last, unsigned int access, struct ibv_pd *pd)
{
	int f = 0;

	if (start != mrmgr__rgn_start(r) || last != mrmgr__rgn_last(r))
		f |= REREG_TRANS;
	if (access != mrmgr__rgn_access(r)) {
		f |= REREG_ACCESS;
		/* Pages pinned for reading must be pinned again for stores. */
		if ((access & IBV_ACCESS_LOCAL_WRITE) &&
		    !(mrmgr__rgn_access(r) & IBV_ACCESS_LOCAL_WRITE))
			f |= REREG_TRANS;
	}
	if (pd != mrmgr__rgn_mr(r)->pd)
		f |= REREG_PD;
	return f;
}

/*
 * Rereg an idle region that is out of the tree (the core's
 * mrmgr__core_rereg(): watch, call, and on success the region's range,
 * access, generation and the accounting), and apply the contract. On
 * REREG_LOST the caller releases the region (which deregisters the MR,
 * as the man page requires).
 */
static int rereg(struct mrmgr_cache *c, struct mrmgr_region *r, int flags,
		 struct ibv_pd *pd, uint64_t start, uint64_t len,
		 unsigned int access)
{
	uint64_t old_start = mrmgr__rgn_start(r), old_len = mrmgr__rgn_len(r);
	int err, code;

	code = mrmgr__core_rereg(c, r, flags, pd, start, len, access, &err);
	if (code == MRMGR__REREG_UNWATCHED)
		return REREG_KEPT;
	switch (code) {
	case 0:
	case IBV_REREG_MR_ERR_DO_FORK_OLD:
		if (code) {
			mrmgr__core_count(c, rereg_fork_errors, 1);
			mrmgr__warn("rereg of [%#llx, +%llu): the old range's "
				    "fork state could not be restored (%s); "
				    "the new registration is in use",
				    (unsigned long long)old_start,
				    (unsigned long long)old_len, strerror(err));
		}
		mrmgr__core_count(c, rereg_successes, 1);
		return REREG_DONE;
	case IBV_REREG_MR_ERR_INPUT:
	case IBV_REREG_MR_ERR_DONT_FORK_NEW:
		if (!note_unsupported(c, err)) {
			mrmgr__core_count(c, rereg_fallback_input, 1);
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

			mrmgr__core_count(c, rereg_fallback_cmd, 1);
			MRMGR__LOG_IF(first ? MRMGR_LOG_WARN : MRMGR_LOG_DEBUG,
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
	struct mrmgr_region *r = NULL, *o;
	uint64_t hs = UINT64_MAX, hl = 0, n = 0, old_len, new_len;
	int growth = 0, b, res, flags;

	mrmgr__core_for_each_overlap(c, o, *rs, *rl) {
		uint64_t os = mrmgr__rgn_start(o), ol = mrmgr__rgn_last(o);

		if (!mrmgr__core_joins(o, as, al, *rs, *rl))
			continue; /* only its headroom: stays apart */
		r = o;
		n++;
		hs = os < hs ? os : hs;
		hl = ol > hl ? ol : hl;
		/* Growth: the request overlaps a region and reaches past it
		 * (merely touching it is a merge, not growth). */
		if (start <= ol && last >= os && (start < os || last > ol))
			growth = 1;
	}
	if (!n)
		return MRMGR__GROW_PASS;
	if (growth) {
		mrmgr__core_count(c, grows, 1);
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
			mrmgr__core_count(c, merges, 1); /* absorbed by what is registered next */
		}
		return MRMGR__GROW_PASS;
	}
	if (!mrmgr__core_quiesce(c, r)) {
		/* Held: make-before-break (the caller's merge path). */
		mrmgr__core_count(c, rereg_fallback_in_use, 1);
		return MRMGR__GROW_PASS;
	}
	old_len = mrmgr__rgn_len(r);
	new_len = *rl - *rs + 1;
	if (new_len > old_len && !mrmgr__core_make_room(c, 0, new_len - old_len)) {
		mrmgr__core_publish(c, r);
		return MRMGR__GROW_PASS;
	}
	flags = rereg_flags(r, *rs, *rl, *racc, mrmgr__core_view(c)->pd);
	/* Nothing to change (cannot happen after a true miss): a hit. */
	res = flags ? rereg(c, r, flags, mrmgr__core_view(c)->pd, *rs, new_len,
			    *racc)
		    : REREG_DONE;
	if (res == REREG_DONE) {
		mrmgr__rgn_set_asked(r, as < start ? as : start,
				     al > last ? al : last);
		/* Used, as a new region is (evict.c). */
		mrmgr__rgn_ref_used(r, slot);
		mrmgr__core_publish(c, r);
		*out = r;
		return 0;
	}
	if (res == REREG_KEPT) {
		mrmgr__core_publish(c, r); /* the merge path replaces it */
	} else {
		mrmgr__core_release(c, r);
		mrmgr__core_count(c, merges, 1);
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

		if (start < mrmgr__rgn_start(r) || last > mrmgr__rgn_last(r))
			mrmgr__core_count(c, grows, 1);
		was_live = mrmgr__rgn_live(r);
		mrmgr__rgn_unref(r, slot);
		if (was_live)
			idle = mrmgr__core_quiesce(c, r);
		else /* detached: out of the tree; ours alone without holders */
			idle = mrmgr__rgn_refs(r) == 0;
		if (!idle) {
			/* Others hold it: they keep it until their last put. */
			if (was_live)
				mrmgr__core_detach(c, r);
			mrmgr__core_count(c, rereg_fallback_in_use, 1);
			mbb = 1;
			r = NULL;
		}
	}
	if (r) {
		/* Idle and out of the tree. */
		int flags = rereg_flags(r, start, last, access, mrmgr__core_view(c)->pd);
		int b = flags ? blocker(c, r) : BLOCK_NONE;
		uint64_t old_len = mrmgr__rgn_len(r);
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
				      : rereg(c, r, flags, mrmgr__core_view(c)->pd, start, len, access);
		}
		if (res == REREG_DONE) {
			mrmgr__rgn_set_asked(r, start, last);
			mrmgr__rgn_ref(r, slot);
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
	mrmgr__core_count(c, make_before_break, (uint64_t)mbb);
	*rp = nr;
	return 0;
}

/* ------------------------------------------------ PD move */

static void move_one(struct mrmgr_cache *c, struct mrmgr_region *r, void *arg)
{
	struct ibv_pd *pd = arg;
	int b;

	/* Buffers' regions move with their buffers, next. */
	if (mrmgr__rgn_mr(r)->pd == pd ||
	    (mrmgr__rgn_flags(r) & MRMGR__REGION_BUFFER))
		return;
	if (!mrmgr__core_quiesce(c, r)) {
		/* Held: its holders keep the old-PD MR until their last put;
		 * the next get registers in the new PD. */
		mrmgr__core_detach(c, r);
		mrmgr__core_count(c, rereg_fallback_in_use, 1);
		mrmgr__core_count(c, make_before_break, 1);
		return;
	}
	b = blocker(c, r);
	if (!b && rereg(c, r, REREG_PD, pd, mrmgr__rgn_start(r),
			mrmgr__rgn_len(r), mrmgr__rgn_access(r)) == REREG_DONE) {
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
	if (mrmgr__core_flags(c) & MRMGR__CACHE_MULTI_PD) {
		mrmgr__err("mrmgr_cache_move_pd: a multi-PD cache cannot move");
		return EINVAL;
	}
	mrmgr__core_lock(c);
	if (pd->context != mrmgr__core_view(c)->pd->context) {
		mrmgr__core_unlock(c);
		mrmgr__err("mrmgr_cache_move_pd: the PD is of another device");
		return EINVAL;
	}
	if (pd == mrmgr__core_view(c)->pd) {
		mrmgr__core_unlock(c);
		return 0;
	}
	/* From here on misses register in the new PD. */
	mrmgr__core_set_pd(c, pd);
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
	.id = MRMGR__EXT_ID_GROW,
	.priv_size = sizeof(int),
	.scope = MRMGR__EXT_PLAN_MERGED, /* it grows what a miss absorbs */
	.init = grow_init,
	.plan_miss = grow_plan_miss,
};
