/*
 * Region helpers shared by the cache's fast and slow paths, and the public
 * accessors.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <limits.h>

#include "cache.h"
#include "region.h"
#include "share.h"

/*
 * Threads get slots round-robin on first use; a thread keeps its slot for
 * life. More threads than stripes share stripes, which stays correct
 * (the adds are atomic) and only costs contention.
 */
static unsigned int next_slot;
static __thread unsigned int tls_slot = UINT_MAX;

unsigned int mrmgr__thread_slot(void)
{
	unsigned int s = tls_slot;

	if (mrmgr__unlikely(s == UINT_MAX)) {
		s = __atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED);
		s &= INT_MAX; /* never UINT_MAX */
		tls_slot = s;
	}
	return s;
}

int64_t mrmgr__region_refs(const struct mrmgr_region *r, unsigned int nstripes)
{
	int64_t sum = 0;

	for (unsigned int i = 0; i < nstripes; i++)
		sum += __atomic_load_n(&r->stripes[i].refs, __ATOMIC_SEQ_CST);
	return sum;
}

MRMGR_EXPORT struct ibv_mr *mrmgr_region_mr(const mrmgr_region_t *region)
{
	return region ? mrmgr__region_plain_mr(region) : NULL;
}

MRMGR_EXPORT uint32_t mrmgr_region_lkey(const mrmgr_region_t *region)
{
	struct ibv_mr *mr = region ? mrmgr__region_plain_mr(region) : NULL;

	return mr ? mr->lkey : 0;
}

MRMGR_EXPORT uint32_t mrmgr_region_rkey(const mrmgr_region_t *region)
{
	struct ibv_mr *mr = region ? mrmgr__region_plain_mr(region) : NULL;

	return mr ? mr->rkey : 0;
}

MRMGR_EXPORT void *mrmgr_region_addr(const mrmgr_region_t *region)
{
	return region ? (void *)(uintptr_t)mrmgr__region_start(region) : NULL;
}

MRMGR_EXPORT size_t mrmgr_region_length(const mrmgr_region_t *region)
{
	return region ? (size_t)mrmgr__region_len(region) : 0;
}

MRMGR_EXPORT unsigned int mrmgr_region_access(const mrmgr_region_t *region)
{
	return region ? region->access : 0;
}

MRMGR_EXPORT uint64_t mrmgr_region_generation(const mrmgr_region_t *region)
{
	return region ? region->gen : 0;
}
