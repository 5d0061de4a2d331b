/*
 * The cache object. Laid out by who writes what: the first line is read by
 * every hit and written only when the tree changes; the writer's state sits
 * behind the lock on lines of its own; per-slot hit counters sit on lines
 * of their own so hits never share a written line.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__CACHE_H
#define MRMGR__CACHE_H

#include <pthread.h>
#include <stdint.h>

#include <mrmgr/mrmgr.h>

#include "backend.h"
#include "compiler.h"
#include "itree.h"
#include "monitor.h"
#include "region.h"

/* Per-slot counters written by the hit path. */
struct mrmgr__slot_stats {
	_Alignas(MRMGR__CACHELINE) uint64_t hits;
};

/* Effective settings after attr and environment. */
struct mrmgr__cache_config {
	uint64_t max_regions;
	uint64_t max_bytes;
	uint64_t flags; /* enum mrmgr_cache_flags */
	uint32_t monitor; /* enum mrmgr_monitor_mode */
};

struct mrmgr_cache {
	/* Read by hits. */
	_Alignas(MRMGR__CACHELINE) uint64_t seq; /* odd while the tree changes */
	struct mrmgr__itree tree;
	unsigned int nstripes;                   /* power of two */
	unsigned int page_shift;
	uint64_t flags;
	uint64_t mon_seen;                       /* event word last drained */

	/* Writer side: everything below is under lock. */
	_Alignas(MRMGR__CACHELINE) pthread_mutex_t lock;
	struct ibv_pd *pd;
	const struct mrmgr__backend *be;
	struct mrmgr__dev_caps caps;
	struct mrmgr__cache_config cfg;
	size_t region_size;              /* header + stripes */
	struct mrmgr__lru_link lru;      /* head: lru.next is the oldest */
	struct mrmgr_region *free_list;  /* type-stable spare regions */
	struct mrmgr_region **all;       /* every region ever made, to free */
	size_t nall, all_cap;
	uint64_t nregions;               /* registered: cached or held */
	uint64_t ncached;                /* in the tree */
	uint64_t pinned_bytes;
	uint64_t next_gen;
	struct mrmgr_stats st;           /* slow-path counters */
	struct mrmgr__mon_cache mon;     /* memory events (monitor.h) */

	struct mrmgr__slot_stats *slots; /* nstripes of them */
};

/* A put found its region not live: release it if that was the last user. */
void mrmgr__cache_put_slow(struct mrmgr_cache *c, struct mrmgr_region *r);

/* Regions callers hold now; O(n), call with the lock held. */
uint64_t mrmgr__cache_regions_in_use(struct mrmgr_cache *c);

/* Detach every cached region overlapping [start, last]; lock held.
 * Returns how many. */
uint64_t mrmgr__cache_invalidate_locked(struct mrmgr_cache *c, uint64_t start,
					uint64_t last);

#endif /* MRMGR__CACHE_H */
