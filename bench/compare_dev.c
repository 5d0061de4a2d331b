/*
 * bench/compare: the bench device. A provider on libmrmgr's public device
 * seam (include/mrmgr/device.h) that registers nothing and busy-waits the
 * cost model, as the UCX driver's registration callback does, so the two
 * caches pay the same for a registration and nothing else: no simulated
 * HCA, no system call, no shared table in the comparison rows.
 *
 * A re-registration that changes the translation costs what registering
 * the new range anew does (mlx5 pins the whole new range again), and
 * counts as a registration call. Deregistration is free on both sides.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mrmgr/device.h>

#include "compare.h"

/* One open bench device: its context, device and only PD. */
struct bdev {
	struct ibv_context ctx;
	struct ibv_device dev;
	struct ibv_pd pd;
	struct cost_model cost;
	uint64_t regs, pages;  /* counted by the device, atomically */
	uint32_t next_key;
};

#define MAX_BDEV 16
static struct bdev *open_devs[MAX_BDEV];
static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;

static struct bdev *bdev_of(const struct ibv_context *ctx)
{
	return (struct bdev *)((char *)ctx - offsetof(struct bdev, ctx));
}

static int b_owns(const struct ibv_context *ctx)
{
	int mine = 0;

	pthread_mutex_lock(&devs_lock);
	for (int i = 0; i < MAX_BDEV; i++)
		mine |= open_devs[i] && &open_devs[i]->ctx == ctx;
	pthread_mutex_unlock(&devs_lock);
	return mine;
}

static int b_query(struct ibv_context *ctx, struct mrmgr_device_attr *attr)
{
	snprintf(attr->name, sizeof(attr->name), "%s", ctx->device->name);
	attr->max_mr_size = UINT64_MAX;
	attr->page_size_cap = PG;
	return 0;
}

static void charge(const struct cost_model *cost, uint64_t *regs,
		   uint64_t *pages, size_t len)
{
	busy_wait_ns(model_ns(cost, len));
	__atomic_add_fetch(regs, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(pages, (len + PG - 1) / PG, __ATOMIC_RELAXED);
}

/*
 * What both caches' registration does besides the cost model, the same
 * code for both (compare_ucx.c's callback calls it too): the MR object a
 * provider's ibv_reg_mr() allocates, its key, and the counts (atomic:
 * libmrmgr registers outside its lock). Before, only this device
 * allocated and counted atomically, and UCX's callback did neither: ~40
 * ns of device work on one side of the zero-cost row (doc/perf.md).
 */
struct ibv_mr *bench_mr_make(const struct cost_model *cost, uint64_t *regs,
			     uint64_t *pages, uint32_t *next_key, void *addr,
			     size_t len)
{
	struct ibv_mr *mr = calloc(1, sizeof(*mr));

	if (!mr)
		return NULL;
	charge(cost, regs, pages, len);
	mr->addr = addr;
	mr->length = len;
	mr->lkey = mr->rkey = __atomic_add_fetch(next_key, 1, __ATOMIC_RELAXED);
	return mr;
}

void bench_mr_drop(struct ibv_mr *mr)
{
	free(mr);
}

static int b_reg(struct ibv_pd *pd, void *addr, size_t len, int access,
		 struct ibv_mr **mrp)
{
	struct bdev *b = bdev_of(pd->context);
	struct ibv_mr *mr = bench_mr_make(&b->cost, &b->regs, &b->pages,
					  &b->next_key, addr, len);

	(void)access;
	if (!mr)
		return ENOMEM;
	mr->context = pd->context;
	mr->pd = pd;
	*mrp = mr;
	return 0;
}

static int b_dereg(struct ibv_mr *mr)
{
	bench_mr_drop(mr);
	return 0;
}

static int b_rereg(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
		   void *addr, size_t len, int access, int *err)
{
	(void)access;
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		if (!pd || pd->context != mr->context) {
			*err = EINVAL;
			return IBV_REREG_MR_ERR_INPUT;
		}
		mr->pd = pd;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		struct bdev *b = bdev_of(mr->context);

		charge(&b->cost, &b->regs, &b->pages, len);
		mr->addr = addr;
		mr->length = len;
	}
	return 0;
}

static const struct mrmgr_device_ops bdev_ops = {
	.size = sizeof(struct mrmgr_device_ops),
	.name = "bench",
	.owns_context = b_owns,
	.query_device = b_query,
	.reg_mr = b_reg,
	.dereg_mr = b_dereg,
	.rereg_mr = b_rereg,
};

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static int register_err;

static void do_register(void)
{
	register_err = mrmgr_device_register(&bdev_ops);
}

int bdev_open(const struct cost_model *cost, struct ibv_pd **pd)
{
	struct bdev *b;
	int slot = -1;

	pthread_once(&registered, do_register);
	if (register_err)
		return register_err;
	b = calloc(1, sizeof(*b));
	if (!b)
		return ENOMEM;
	b->cost = *cost;
	snprintf(b->dev.name, sizeof(b->dev.name), "bench");
	b->ctx.device = &b->dev;
	b->ctx.cmd_fd = -1;
	b->ctx.async_fd = -1;
	b->pd.context = &b->ctx;
	pthread_mutex_lock(&devs_lock);
	for (int i = 0; i < MAX_BDEV && slot < 0; i++)
		if (!open_devs[i])
			open_devs[slot = i] = b;
	pthread_mutex_unlock(&devs_lock);
	if (slot < 0) {
		free(b);
		return ENOSPC;
	}
	*pd = &b->pd;
	return 0;
}

void bdev_close(struct ibv_pd *pd)
{
	struct bdev *b = bdev_of(pd->context);

	pthread_mutex_lock(&devs_lock);
	for (int i = 0; i < MAX_BDEV; i++)
		if (open_devs[i] == b)
			open_devs[i] = NULL;
	pthread_mutex_unlock(&devs_lock);
	free(b);
}

void bdev_counts(struct ibv_pd *pd, uint64_t *regs, uint64_t *pages)
{
	struct bdev *b = bdev_of(pd->context);

	*regs = __atomic_load_n(&b->regs, __ATOMIC_RELAXED);
	*pages = __atomic_load_n(&b->pages, __ATOMIC_RELAXED);
}
