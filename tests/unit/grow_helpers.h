/*
 * Shared by the growth tests (test_grow.c, test_rereg.c, test_sim_rereg.c):
 * simulated devices with room, cache attributes, exactly-sized mappings,
 * simulated RDMA writes that must land, rereg fault injection.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_GROW_HELPERS_H
#define MRMGR_TEST_GROW_HELPERS_H

#include <errno.h>

#include "helpers.h"

#define PG ((size_t)4096)
#define LW IBV_ACCESS_LOCAL_WRITE

static struct mrmgr_sim_attr __attribute__((unused)) sim_big = {
	.comp_mask = MRMGR_SIM_ATTR_MEMLOCK, .memlock_bytes = 1ull << 32,
};

static struct mrmgr_sim_attr __attribute__((unused)) sim_rxe = {
	.comp_mask = MRMGR_SIM_ATTR_MEMLOCK | MRMGR_SIM_ATTR_PERSONALITY,
	.memlock_bytes = 1ull << 32, .personality = MRMGR_SIM_RXE,
};

static inline struct mrmgr_cache_attr cattr(uint64_t flags)
{
	/* These suites test the rereg contract, not memory events: the
	 * program reports changes itself (external monitoring), under which
	 * a get's growth rereg's in place (see grow.c). */
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_FLAGS |
			     MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32,
		.flags = flags,
		.monitor = MRMGR_MONITOR_EXTERNAL,
	};
	return a;
}

/* len bytes read-write between two PROT_NONE pages: a mapping of exactly len. */
static inline char *map_guarded(size_t len)
{
	char *p = mmap(NULL, len + 2 * PG, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(mprotect(p + PG, len, PROT_READ | PROT_WRITE), 0);
	memset(p + PG, 0, len);
	return p + PG;
}

static inline void unmap_guarded(char *p, size_t len)
{
	munmap(p - PG, len + 2 * PG);
}

/* A simulated RDMA WRITE through rkey must land at p. */
static inline void write_lands(struct ibv_pd *pd, uint32_t rkey, char *p, char c)
{
	char v[8];

	memset(v, c, sizeof(v));
	cr_assert_eq(mrmgr_sim_write(pd, rkey, (uint64_t)(uintptr_t)p, v, sizeof(v)),
		     0, "write through rkey %#x at %p", rkey, (void *)p);
	cr_assert_eq(memcmp(p, v, sizeof(v)), 0, "the write landed elsewhere");
}

static inline int write_err(struct ibv_pd *pd, uint32_t rkey, char *p)
{
	return mrmgr_sim_write(pd, rkey, (uint64_t)(uintptr_t)p, "x", 1);
}

static inline void rereg_fault(struct ibv_context *ctx, int code, int err)
{
	struct mrmgr_sim_fault ft = {
		.comp_mask = code ? MRMGR_SIM_FAULT_REREG_CODE : 0,
		.op = MRMGR_SIM_OP_REREG, .err = err, .nth = 1, .count = 1,
		.rereg_code = code,
	};

	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &ft), 0);
}

#endif
