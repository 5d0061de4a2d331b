/*
 * Included into README's program right after its own #include lines, to
 * run it where there is no RDMA device: the few libibverbs calls it makes
 * to find a device and a PD go to the simulated HCA instead; everything
 * libmrmgr does is unchanged, and the program text stays README's.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_CONSUMER_SIM_SHIM_H
#define MRMGR_CONSUMER_SIM_SHIM_H

#include <infiniband/verbs.h>
#include <mrmgr/sim.h>

static inline struct ibv_device **shim_get_device_list(int *n)
{
	/* One entry that the shim's open knows; never given to libibverbs. */
	static struct ibv_device *list[2] = { (struct ibv_device *)&list, NULL };

	if (n)
		*n = 1;
	return list;
}

static inline void shim_free_device_list(struct ibv_device **list)
{
	(void)list;
}

static inline struct ibv_context *shim_open_device(struct ibv_device *dev)
{
	struct ibv_context *ctx;

	(void)dev;
	return mrmgr_sim_open(NULL, &ctx) ? NULL : ctx;
}

static inline int shim_close_device(struct ibv_context *ctx)
{
	return mrmgr_sim_close(ctx);
}

static inline struct ibv_pd *shim_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd;

	return mrmgr_sim_alloc_pd(ctx, &pd) ? NULL : pd;
}

static inline int shim_dealloc_pd(struct ibv_pd *pd)
{
	return mrmgr_sim_dealloc_pd(pd);
}

#undef ibv_get_device_list
#define ibv_get_device_list shim_get_device_list
#define ibv_free_device_list shim_free_device_list
#define ibv_open_device shim_open_device
#define ibv_close_device shim_close_device
#define ibv_alloc_pd shim_alloc_pd
#define ibv_dealloc_pd shim_dealloc_pd

#endif
