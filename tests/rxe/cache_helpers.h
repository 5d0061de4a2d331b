/*
 * Small libmrmgr helpers shared by the real-device tests (the device side
 * is rdma_fixture.h).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_RXE_CACHE_HELPERS_H
#define MRMGR_TEST_RXE_CACHE_HELPERS_H

#include <stdint.h>

#include <criterion/criterion.h>
#include <mrmgr/mrmgr.h>

#include "rdma_fixture.h"

/* What a buffer that is written and read remotely needs. */
#define RXE_RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ)

/* Cache attributes; a 0 limit keeps the library's default. */
static inline struct mrmgr_cache_attr rxe_cache_attr(uint64_t max_regions,
						     uint64_t max_bytes,
						     uint64_t flags)
{
	struct mrmgr_cache_attr a = { 0 };

	if (max_regions) {
		a.comp_mask |= MRMGR_CACHE_ATTR_MAX_REGIONS;
		a.max_regions = max_regions;
	}
	if (max_bytes) {
		a.comp_mask |= MRMGR_CACHE_ATTR_MAX_BYTES;
		a.max_bytes = max_bytes;
	}
	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags = flags;
	return a;
}

static inline mrmgr_cache_t *rxe_cache(struct rdma_fixture *f,
				       uint64_t max_regions,
				       uint64_t max_bytes, uint64_t flags)
{
	struct mrmgr_cache_attr a = rxe_cache_attr(max_regions, max_bytes, flags);
	mrmgr_cache_t *c = NULL;

	cr_assert_eq(mrmgr_cache_create(f->pd, &a, &c), 0,
		     "mrmgr_cache_create on %s", f->name);
	return c;
}

static inline struct mrmgr_stats rxe_stats(mrmgr_cache_t *c)
{
	struct mrmgr_stats s;

	cr_assert_eq(mrmgr_cache_query_stats(c, &s, sizeof(s)), 0);
	return s;
}

static inline mrmgr_region_t *rxe_get(mrmgr_cache_t *c, void *addr,
				      size_t len, unsigned int access)
{
	mrmgr_region_t *r = NULL;
	int ret = mrmgr_get(c, addr, len, access, &r);

	cr_assert_eq(ret, 0, "mrmgr_get(%p, %zu, %#x): %s", addr, len, access,
		     strerror(ret));
	return r;
}

#endif /* MRMGR_TEST_RXE_CACHE_HELPERS_H */
