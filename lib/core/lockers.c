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

#include <pthread.h>

#include "cache.h"
#include "log.h"

void mrmgr__cache_note_locker(struct mrmgr_cache *c)
{
	pthread_t me = pthread_self();

	if (c->lockers == MRMGR__LOCKER_NONE) {
		c->lock_owner = me;
		c->lockers = MRMGR__LOCKER_ONE;
	} else if (!pthread_equal(c->lock_owner, me)) {
		c->lockers = MRMGR__LOCKER_MANY;
		mrmgr__dbg("cache %p: a second thread took its lock; misses "
			   "register with it released from now on", (void *)c);
	}
}
