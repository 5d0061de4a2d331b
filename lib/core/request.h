/*
 * The rules for a request to the cache (mrmgr_get(), mrmgr_invalidate()),
 * written once: get.c tests them inline, request.c's checkers log which
 * one failed.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__REQUEST_H
#define MRMGR__REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#define MRMGR__KNOWN_ACCESS                                                 \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                  \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |                 \
	 IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING)

static inline int mrmgr__range_wraps(uintptr_t a, size_t length,
				     uint64_t page_mask)
{
	uintptr_t end = a + (length - 1);

	return end < a || (end | page_mask) < a;
}

static inline unsigned int mrmgr__unknown_access(unsigned int access)
{
	return access & ~(unsigned int)MRMGR__KNOWN_ACCESS;
}

static inline int mrmgr__remote_write_without_local(unsigned int access)
{
	return (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	       !(access & IBV_ACCESS_LOCAL_WRITE);
}

/* EINVAL and a log line, or 0 and the page-aligned range. */
int mrmgr__cache_check_range(const char *fn, const void *addr, size_t length,
			     uint64_t page_mask, uint64_t *start,
			     uint64_t *last);

#endif /* MRMGR__REQUEST_H */
