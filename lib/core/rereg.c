/*
 * An in-place re-registration of an idle region out of the tree, as the
 * core sees it (core.h, mrmgr__core_rereg()): the watch of a new range,
 * the device's call, and what a success changes (range, access,
 * generation, keys, accounting). Whether to try and what each answer
 * means for the feature (the man page's contract, the per-device
 * verdict) is grow.c's.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <string.h>

#include "cache.h"
#include "core.h"
#include "log.h"

void (*mrmgr__rereg_test_window)(uint64_t s, uint64_t l);
int mrmgr__rereg_test_no_watch;

int mrmgr__core_rereg(struct mrmgr_cache *c, struct mrmgr_region *r,
		      int flags, struct ibv_pd *pd, uint64_t start,
		      uint64_t len, unsigned int access, int *err)
{
	struct ibv_mr *mr = r->mr;
	uint64_t old_len = mrmgr__region_len(r);
	int trans = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
	int watch = trans && !mrmgr__rereg_test_no_watch;
	struct mrmgr__watch_tx tx;
	int code;

	*err = 0;
	/* A new translation pins the new range: watch it first, as a miss
	 * does, so a change to it from now on is reported. Unwatchable: no
	 * in-place growth; the merge path registers it uncached. A failed
	 * rereg (EFAULT where part of the range went away) aborts this
	 * watch, and the caller's fresh registration takes a watch_begin()
	 * of its own: nothing classified here is trusted after a failure. */
	if (watch && mrmgr__mon_watch_begin(c, start, start + len - 1, &tx))
		return MRMGR__REREG_UNWATCHED;
	c->st.rereg_attempts++;
	code = mrmgr__dev_rereg_mr(c->ops, mr, flags,
				   (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd,
				   trans ? (void *)(uintptr_t)start : mr->addr,
				   trans ? (size_t)len : mr->length,
				   (flags & IBV_REREG_MR_CHANGE_ACCESS) ? (int)access
									: 0,
				   err);
	mrmgr__dbg("rereg [%#llx, +%llu) flags %#x -> [%#llx, +%llu) access "
		   "%#x: %d (%s)", (unsigned long long)mrmgr__region_start(r),
		   (unsigned long long)old_len, flags, (unsigned long long)start,
		   (unsigned long long)len, access, code,
		   code ? strerror(*err) : "ok");
	if (code != 0 && code != IBV_REREG_MR_ERR_DO_FORK_OLD) {
		/* The new translation is not in force: the old watch stays. */
		if (watch)
			mrmgr__mon_watch_abort(c, &tx);
		return code;
	}
	if (trans) {
		/* The new translation is in force: the region takes the new
		 * watch. Refused: a change was under way; the publish that
		 * follows must not cache it either (its own window opens
		 * after the change, so only this mark tells it). */
		if (watch && mrmgr__rereg_test_window)
			mrmgr__rereg_test_window(start, start + len - 1);
		if (watch) {
			mrmgr__mon_unwatch(c, r);
			if (mrmgr__mon_watch_commit(c, &tx, r))
				r->watch.dirty = 1;
		}
		/* One registration still, of another size. */
		mrmgr__core_account_reg(c, MRMGR__REGION_PINNED, old_len, -1);
		mrmgr__core_account_reg(c, MRMGR__REGION_PINNED, len, 1);
		c->st.pages_registered += len >> c->page_shift;
		/* Out of the tree: only stale readers look, and they fail
		 * their sequence check. */
		MRMGR__WRITE_ONCE(r->node.start, start);
		MRMGR__WRITE_ONCE(r->node.last, start + len - 1);
	}
	MRMGR__WRITE_ONCE(r->access, access);
	r->gen = ++c->next_gen;
	mrmgr__region_set_keys(r); /* the keys may have changed */
	return code;
}
