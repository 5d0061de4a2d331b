/*
 * The stale check (MRMGR_CHECK=stale, MRMGR_CACHE_CHECK_STALE): every
 * get verifies that the pages mapped under the request are the pages
 * its region registered. stale.c says how, and what it cannot see.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__STALE_H
#define MRMGR__STALE_H

#include <stdint.h>

#include "ext.h"

struct mrmgr_cache;
struct mrmgr_region;

/* mrmgr__ext_stale and mrmgr__stale_wanted(): ext.h (the assembler's). */

/*
 * get() found r for [start, last] with access, referenced on slot, no
 * lock held: verify it. 0 with *out = r (or, when r was stale, a fresh
 * registration: r is reported, invalidated and put); or the fresh get's
 * errno, with nothing held.
 */
int mrmgr__stale_get(struct mrmgr_cache *c, uint64_t start, uint64_t last,
		     unsigned int access, unsigned int slot,
		     struct mrmgr_region *r, struct mrmgr_region **out);

/* Tests: read pagemap as a process without CAP_SYS_ADMIN would (no page
 * frames), for caches created after it is set. */
extern int mrmgr__stale_test_no_pfn;

#endif /* MRMGR__STALE_H */
