/*
 * Between the stale check (stale.c) and its report (stale_report.c):
 * what is recorded of a region at registration, and the check's state.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__STALE_REC_H
#define MRMGR__STALE_REC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct mrmgr_cache;
struct mrmgr_region;

/* One piece of a mapping over a recorded range. */
struct piece {
	uint64_t start, end; /* [start, end) within the range */
	uint64_t inode, dev, off; /* off: the file offset at start */
	uint32_t kind;            /* MRMGR__VMA_F_ANON | _SHARED */
};

struct rec {
	struct rec *next;
	const struct mrmgr_region *r;
	uint64_t gen, start, last;
	uint64_t *pm;       /* identity of each page at registration */
	struct piece *map;  /* without page frames: the mappings */
	size_t nmap;
	struct timespec born;
	uint64_t queue_at;  /* the monitor's queue when it was recorded */
	uint64_t gets;      /* verified gets */
};

struct mrmgr__stale {
	int fd;        /* /proc/self/pagemap of pid */
	pid_t pid;
	int pfns;      /* page frames visible */
	uint64_t mask; /* what of an entry is the identity */
	struct rec **bucket;
	size_t nbuckets, nrecs;
	uint64_t checks, stale_hits, unrecorded;
	struct timespec inval_at; /* the cache's last invalidation */
	uint64_t inval_start, inval_last, invals;
};

/* r, found for [start, last], has at bad not the page it registered (was
 * at registration, now now; how: what was compared): say so. */
void mrmgr__stale_report(struct mrmgr_cache *c, const struct rec *rc,
			 const struct mrmgr_region *r, uint64_t start,
			 uint64_t last, uint64_t bad, uint64_t was, uint64_t now,
			 const char *how);

#endif /* MRMGR__STALE_REC_H */
