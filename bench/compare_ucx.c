/*
 * bench/compare: the UCX driver. ucs_rcache from libucx-dev (1.13 on
 * Debian 12), driven the way UCX's own memory domains drive it: page
 * alignment, LRU limits, its UCM memory hooks delivering
 * UCM_EVENT_VM_UNMAPPED, and a registration callback that busy-waits the
 * same cost model as the simulated HCA (and registers nothing).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#ifdef HAVE_UCX
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "compare.h"

#define PROT (PROT_READ | PROT_WRITE)
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ)

struct drv {
	ucs_rcache_t *rc;
	struct cost_model cost;
	uint64_t regs, pages;
	int events; /* UCM delivers unmap events */
	/* "UCX+sim": registrations go to a simulated HCA like libmrmgr's */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
};

/* A region and the simulated MR behind it. */
struct u_region {
	ucs_rcache_region_t super;
	struct ibv_mr *mr;
	uint32_t lkey; /* what a UCX transport keeps in its memh */
};

static ucs_status_t u_mem_reg(void *context, ucs_rcache_t *rc, void *arg,
			      ucs_rcache_region_t *region, uint16_t flags)
{
	struct drv *d = context;
	size_t len = region->super.end - region->super.start;

	(void)rc;
	(void)arg;
	(void)flags;
	if (d->pd) {
		struct u_region *ur = (struct u_region *)region;

		if (mrmgr_sim_reg_mr(d->pd, (void *)region->super.start, len,
				     ACCESS, &ur->mr))
			return UCS_ERR_IO_ERROR;
		ur->lkey = ur->mr->lkey;
	} else {
		busy_wait_ns(model_ns(&d->cost, len));
		((struct u_region *)region)->lkey =
			(uint32_t)(region->super.start >> 12);
	}
	d->regs++; /* called under the rcache's write lock */
	d->pages += len / PG;
	return UCS_OK;
}

static void u_mem_dereg(void *context, ucs_rcache_t *rc,
			ucs_rcache_region_t *region)
{
	struct drv *d = context;

	(void)rc;
	if (d->pd)
		mrmgr_sim_dereg_mr(((struct u_region *)region)->mr);
}

static void u_dump(void *context, ucs_rcache_t *rc,
		   ucs_rcache_region_t *region, char *buf, size_t max)
{
	(void)context;
	(void)rc;
	(void)region;
	if (max)
		buf[0] = '\0';
}

static const ucs_rcache_ops_t u_ops = {
	.mem_reg = u_mem_reg,
	.mem_dereg = u_mem_dereg,
	.dump_region = u_dump,
};

static int open_common(struct drv **dp, uint64_t max_regions,
		       uint64_t max_bytes, const struct cost_model *cost,
		       int sim)
{
	ucs_rcache_params_t p;
	struct drv *d = calloc(1, sizeof(*d));
	ucs_status_t st;

	if (!d)
		return ENOMEM;
	d->cost = *cost;
	if (sim) {
		struct mrmgr_sim_attr sa = {
			.comp_mask = MRMGR_SIM_ATTR_FLAGS |
				     MRMGR_SIM_ATTR_MEMLOCK |
				     MRMGR_SIM_ATTR_COST,
			.flags = MRMGR_SIM_FLAG_NO_PIN,
			.memlock_bytes = UINT64_MAX,
			.reg_ns = cost->reg_ns,
			.reg_ns_per_page = cost->reg_ns_per_page,
		};
		int ret = mrmgr_sim_open(&sa, &d->ctx);

		if (ret || (ret = mrmgr_sim_alloc_pd(d->ctx, &d->pd))) {
			free(d);
			return ret;
		}
	}
	memset(&p, 0, sizeof(p));
	p.region_struct_size = sizeof(struct u_region);
	p.alignment = PG;
	p.max_alignment = PG;
	p.ucm_events = UCM_EVENT_VM_UNMAPPED;
	p.ucm_event_priority = 1000;
	p.ops = &u_ops;
	p.context = d;
	p.flags = 0; /* (UCS_RCACHE_FLAG_NO_PFN_CHECK would turn LRU off) */
	p.max_regions = max_regions > ULONG_MAX ? ULONG_MAX : max_regions;
	p.max_size = max_bytes > SIZE_MAX ? SIZE_MAX : max_bytes;
	p.max_unreleased = SIZE_MAX;
	st = ucs_rcache_create(&p, "bench", NULL, &d->rc);
	d->events = st == UCS_OK;
	if (st != UCS_OK) {
		/* No memory hooks here (under valgrind UCM installs none):
		 * the same cache without events, for instruction counts. */
		p.ucm_events = 0;
		st = ucs_rcache_create(&p, "bench", NULL, &d->rc);
	}
	if (st != UCS_OK) {
		free(d);
		return EIO;
	}
	*dp = d;
	return 0;
}

static int u_open(struct drv **dp, uint64_t max_regions, uint64_t max_bytes,
		  const struct cost_model *cost)
{
	return open_common(dp, max_regions, max_bytes, cost, 0);
}

static int us_open(struct drv **dp, uint64_t max_regions, uint64_t max_bytes,
		   const struct cost_model *cost)
{
	return open_common(dp, max_regions, max_bytes, cost, 1);
}

static void u_close(struct drv *d)
{
	ucs_rcache_destroy(d->rc);
	if (d->pd) {
		mrmgr_sim_dealloc_pd(d->pd);
		mrmgr_sim_close(d->ctx);
	}
	free(d);
}

static void *u_get(struct drv *d, void *addr, size_t len)
{
	ucs_rcache_region_t *r;

	return ucs_rcache_get(d->rc, addr, len, PROT, NULL, &r) == UCS_OK ? r
									  : NULL;
}

static void u_put(struct drv *d, void *h)
{
	ucs_rcache_region_put(d->rc, h);
}

static void u_hit_loop(struct drv *d, const struct hit_args *a)
{
	ucs_rcache_t *rc = d->rc;
	uint64_t s = a->seed;
	uint64_t pages = a->region_len / PG, key = 0;

	for (uint64_t i = 0; i < a->nops; i++) {
		uint64_t r = rng_next(&s);
		char *p = a->base + rng_below(r, a->nregions) * a->stride +
			  rng_below(r << 32, pages) * PG;
		ucs_rcache_region_t *reg;

		if (__builtin_expect(ucs_rcache_get(rc, p, PG, PROT, NULL,
						    &reg) != UCS_OK, 0))
			abort();
		if (a->read_key)
			key += ((struct u_region *)reg)->lkey;
		ucs_rcache_region_put(rc, reg);
	}
	((struct hit_args *)a)->sink = key;
}

static uint64_t u_registrations(struct drv *d)
{
	return d->regs;
}

static uint64_t u_pages(struct drv *d)
{
	return d->pages;
}

static const char *u_source(struct drv *d)
{
	return d->events ? "UCM hooks (UCM_EVENT_VM_UNMAPPED)"
			 : "none (UCM could not install its hooks)";
}

const struct drv_ops ucx_sim_drv = {
	.name = "UCX+sim",
	.open = us_open,
	.close = u_close,
	.get = u_get,
	.put = u_put,
	.invalidate = NULL,
	.hit_loop = u_hit_loop,
	.registrations = u_registrations,
	.pages_registered = u_pages,
	.event_source = u_source,
};

const struct drv_ops ucx_drv = {
	.name = "UCX",
	.open = u_open,
	.close = u_close,
	.get = u_get,
	.put = u_put,
	.invalidate = NULL,
	.hit_loop = u_hit_loop,
	.registrations = u_registrations,
	.pages_registered = u_pages,
	.event_source = u_source,
};
#endif /* HAVE_UCX */
