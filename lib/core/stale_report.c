/*
 * The stale check's report (stale.c finds the stale hit): the first at
 * error level, in three lines (what was found, the region's history, the
 * monitor's last events); later ones at debug level.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdio.h>
#include <time.h>

#include "cache.h"
#include "log.h"
#include "monitor.h"
#include "stale_rec.h"

#define RECENT_EVENTS 8

static double since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t->tv_sec) +
	       (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

/* The monitor's last events, as text. */
static void recent_events(char *buf, size_t len)
{
	uint64_t tail = mrmgr__mon_queue_tail(), s, l;
	size_t at = 0;
	int n = 0;

	buf[0] = 0;
	for (uint64_t i = tail; i > 0 && n < RECENT_EVENTS && at < len; i--) {
		if (!mrmgr__mon_queue_read(i - 1, &s, &l))
			break;
		at += (size_t)snprintf(buf + at, len - at, "%s#%llu [%#llx, +%llu)",
				       n ? ", " : "", (unsigned long long)(i - 1),
				       (unsigned long long)s,
				       (unsigned long long)(l - s + 1));
		n++;
	}
	if (!n)
		snprintf(buf, len, "none");
}

void mrmgr__stale_report(struct mrmgr_cache *c, const struct rec *rc,
			 const struct mrmgr_region *r, uint64_t start,
			 uint64_t last, uint64_t bad, uint64_t was, uint64_t now,
			 const char *how)
{
	struct mrmgr__stale *s = c->stale;
	char events[8 * 48], inval[96];

	if (s->stale_hits > 1) {
		mrmgr__dbg("stale hit #%llu at %#llx in region %p [%#llx, +%llu) "
			   "of cache %p (%s): served a fresh registration",
			   (unsigned long long)s->stale_hits,
			   (unsigned long long)bad, (const void *)r,
			   (unsigned long long)rc->start,
			   (unsigned long long)(rc->last - rc->start + 1),
			   (void *)c, how);
		return;
	}
	recent_events(events, sizeof(events));
	if (s->invals)
		snprintf(inval, sizeof(inval), "%.6f s ago, of [%#llx, +%llu)",
			 since(&s->inval_at), (unsigned long long)s->inval_start,
			 (unsigned long long)(s->inval_last - s->inval_start + 1));
	else
		snprintf(inval, sizeof(inval), "never");
	/* Three lines: one is at most 512 bytes (log.c). */
	mrmgr__err("MRMGR_CHECK=stale: STALE HIT at %#llx: get [%#llx, +%llu) "
		   "found region %p [%#llx, +%llu) of cache %p, whose page at "
		   "%#llx is not the one it registered (%s %#llx at "
		   "registration, %#llx now): an RDMA access through it would "
		   "reach memory the program no longer has there",
		   (unsigned long long)bad, (unsigned long long)start,
		   (unsigned long long)(last - start + 1), (const void *)r,
		   (unsigned long long)rc->start,
		   (unsigned long long)(rc->last - rc->start + 1), (void *)c,
		   (unsigned long long)bad, how, (unsigned long long)was,
		   (unsigned long long)now);
	mrmgr__err("MRMGR_CHECK=stale: the region's history: registered "
		   "%.6f s ago (registration #%llu), got %llu times, this get "
		   "included; the monitor (mode %s) queued %s event over it "
		   "since; the cache's last invalidation: %s",
		   since(&rc->born), (unsigned long long)rc->gen,
		   (unsigned long long)rc->gets, mrmgr__mon_mode_name(c->mon.mode),
		   mrmgr__mon_queue_saw(rc->queue_at, rc->start, rc->last)
			   ? "an" : "no",
		   inval);
	mrmgr__err("MRMGR_CHECK=stale: the monitor's last events: %s. The "
		   "region is invalidated and the get served with a fresh "
		   "registration; stale hits are counted in "
		   "mrmgr_stats.stale_hits, later ones logged at debug level",
		   events);
}
