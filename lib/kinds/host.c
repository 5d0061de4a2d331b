/*
 * Kind one: host virtual memory. The key is the virtual address the
 * request named (page-aligned by request.h's rules); the device registers
 * it by address; the memory-event monitor watches it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "device.h"
#include "kind.h"

static int host_reg(void *ctx, const struct mrmgr_device_ops *ops,
		    struct ibv_pd *pd, uint64_t key, uint64_t len, int access,
		    struct ibv_mr **mr)
{
	(void)ctx;
	return mrmgr__dev_reg_mr(ops, pd, (void *)(uintptr_t)key, (size_t)len,
				 access, mr);
}

static int host_dereg(void *ctx, const struct mrmgr_device_ops *ops,
		      struct ibv_mr *mr)
{
	(void)ctx;
	return mrmgr__dev_dereg_mr(ops, mr);
}

const struct mrmgr__kind mrmgr__kind_host = {
	.name = "host",
	.id = MRMGR__KIND_HOST,
	.sources = MRMGR__KIND_SRC_MONITOR,
	.reg = host_reg,
	.dereg = host_dereg,
};
