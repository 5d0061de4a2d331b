/*
 * The core's side of the memory-event monitor (events.c): a cache
 * subscribes to the monitor's queue at creation, drains it on its slow
 * path (cache.c), and asks the monitor to watch what it is about to
 * cache. The monitor (lib/monitor) knows no cache: these functions hand
 * it the cache's own monitor state (c->mon) and its regions' registry
 * entries (r->watch). All with the cache lock held unless said.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__EVENTS_H
#define MRMGR__EVENTS_H

#include <stdint.h>

#include "monitor.h"

struct mrmgr_cache;
struct mrmgr_region;

/* Subscribe (before the cache is shared), then start the sources its
 * mode relies on (cache.c tracks the cache for fork() in between). */
void mrmgr__mon_cache_init(struct mrmgr_cache *c);
void mrmgr__mon_cache_start(struct mrmgr_cache *c);

/* mrmgr__watch_begin() and the rest (monitor.h) for a region of c. */
int mrmgr__mon_watch_begin(struct mrmgr_cache *c, uint64_t start,
			   uint64_t last, struct mrmgr__watch_tx *tx);
int mrmgr__mon_watch_commit(struct mrmgr_cache *c, struct mrmgr__watch_tx *tx,
			    struct mrmgr_region *r);
void mrmgr__mon_watch_abort(struct mrmgr_cache *c, struct mrmgr__watch_tx *tx);
/* r leaves the tree: its range is no longer watched on its behalf. */
void mrmgr__mon_unwatch(struct mrmgr_cache *c, struct mrmgr_region *r);

/* mrmgr__mon_headroom_ok(): core.h (features ask it). */

/* fork() (fork.c). */
void mrmgr__fork_track(struct mrmgr_cache *c);
void mrmgr__fork_untrack(struct mrmgr_cache *c);

#endif /* MRMGR__EVENTS_H */
