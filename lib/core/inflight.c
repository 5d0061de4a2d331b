/*
 * Registrations under way with the cache lock released (miss.c): the
 * ring of reservations other misses wait on and invalidations drop
 * (cache.h, struct mrmgr__inflight).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <pthread.h>

#include "cache.h"

void mrmgr__inflight_begin(struct mrmgr_cache *c, struct mrmgr__inflight *f,
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

void mrmgr__inflight_end(struct mrmgr_cache *c, struct mrmgr__inflight *f)
{
	f->prev->next = f->next;
	f->next->prev = f->prev;
	/* Waiters count themselves under the lock we hold: with none,
	 * no broadcast (most misses end with nobody waiting). */
	if (c->inflight_waiters)
		pthread_cond_broadcast(&c->inflight_done);
}

/* Lock held; returns with it held, after some registration ended. */
void mrmgr__inflight_wait(struct mrmgr_cache *c)
{
	c->inflight_waiters++;
	pthread_cond_wait(&c->inflight_done, &c->lock);
	c->inflight_waiters--;
}

/* [start, last] is invalidated: registrations under way over it are not
 * cached. */
void mrmgr__cache_inflight_drop(struct mrmgr_cache *c, uint64_t start,
				uint64_t last)
{
	for (struct mrmgr__inflight *f = c->inflight.next; f != &c->inflight;
	     f = f->next)
		if (f->start <= last && start <= f->last)
			f->dropped = 1;
}
