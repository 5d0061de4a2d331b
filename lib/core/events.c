/*
 * The core's side of the memory-event monitor: see events.h. The
 * monitor fills one process-wide queue and keeps the registry of watched
 * ranges; a cache subscribes with its own state (c->mon), drains the
 * queue under its lock (cache.c) and passes its regions' registry
 * entries in. Nothing in lib/monitor calls back here.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "cache.h"
#include "log.h"

static int32_t fork_status_of(const struct mrmgr_cache *c)
{
	/* A device that holds pages with plain references, as pre-5.9
	 * kernels pinned them (the simulated HCA does): a fork leaves the
	 * parent's registrations stale. */
	if (c->caps.cap_flags & MRMGR_DEVICE_CAP_PLAIN_PINS)
		return -1;
	return (int32_t)mrmgr__verbs_fork_status();
}

void mrmgr__mon_cache_init(struct mrmgr_cache *c)
{
	mrmgr__mon_subscribe(&c->mon, &c->mon_seen, c->cfg.monitor,
			     fork_status_of(c));
}

void mrmgr__mon_cache_start(struct mrmgr_cache *c)
{
	mrmgr__mon_start(c->cfg.monitor, !(c->cfg.flags & MRMGR_CACHE_DISABLE));
}

int mrmgr__mon_watch_begin(struct mrmgr_cache *c, uint64_t start,
			   uint64_t last, struct mrmgr__watch_tx *tx)
{
	/* A kind the monitor does not watch (kinds/kind.h) has its own
	 * sources; for the monitor its entries need no watch. */
	if (!mrmgr__kind_monitored(c->kind))
		return 0;
	return mrmgr__watch_begin(&c->mon, start, last, tx);
}

int mrmgr__mon_watch_commit(struct mrmgr_cache *c, struct mrmgr__watch_tx *tx,
			    struct mrmgr_region *r)
{
	if (!mrmgr__kind_monitored(c->kind))
		return 0;
	return mrmgr__watch_commit(&c->mon, tx, &r->watch);
}

void mrmgr__mon_watch_abort(struct mrmgr_cache *c, struct mrmgr__watch_tx *tx)
{
	if (mrmgr__kind_monitored(c->kind))
		mrmgr__watch_abort(tx);
}

void mrmgr__mon_unwatch(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	if (mrmgr__kind_monitored(c->kind))
		mrmgr__watch_end(&r->watch);
}

int mrmgr__mon_headroom_ok(struct mrmgr_cache *c)
{
	/* The mode is set at creation and never changes. */
	return mrmgr__mon_headroom_ok_mode(c->mon.mode);
}

MRMGR_EXPORT int mrmgr_cache_query_monitor(mrmgr_cache_t *c,
					   struct mrmgr_monitor_info *info,
					   size_t size)
{
	struct mrmgr_monitor_info m;

	if (!c || !info || !size) {
		mrmgr__err("mrmgr_cache_query_monitor: %s",
			   !c ? "NULL cache" : !info ? "NULL info" : "size 0");
		return EINVAL;
	}
	memset(&m, 0, sizeof(m));
	mrmgr__cache_lock(c);
	mrmgr__mon_info_cache(&c->mon, &m);
	pthread_mutex_unlock(&c->lock);
	mrmgr__mon_info(&m);
	memcpy(info, &m, size < sizeof(m) ? size : sizeof(m));
	return 0;
}
