/*
 * Who takes the cache lock: none, one thread, or many (for good). A miss
 * keeps the lock while it registers until a second thread has taken it
 * (miss.c says why); mrmgr__cache_lock() (cache.h) calls this until then.
 * A leaf: every file that takes the lock calls it, and it calls nothing
 * of theirs.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "cache.h"
#include "log.h"

/* A thread other than the one (if any) took the lock. */
void mrmgr__cache_note_locker(struct mrmgr_cache *c)
{
	if (c->lockers == MRMGR__LOCKER_NONE) {
		c->lock_owner = mrmgr__cache_locker();
		c->lockers = MRMGR__LOCKER_ONE;
	} else {
		c->lockers = MRMGR__LOCKER_MANY;
		mrmgr__dbg("cache %p: a second thread took its lock; misses "
			   "register with it released from now on", (void *)c);
	}
}
