/*
 * bench/compare: the UCX driver. ucs_rcache from libucx-dev (1.13 on
 * Debian 12), driven the way UCX's own memory domains drive it: page
 * alignment, LRU limits, its UCM memory hooks delivering
 * UCM_EVENT_VM_UNMAPPED, and a registration callback that busy-waits the
 * same cost model as libmrmgr's bench device (and registers nothing).
 *
 * libucs is loaded with dlopen() when a UCX cache is first opened, never
 * linked: loading libucm patches libc's memory entry points at once (its
 * constructor), and libmrmgr's default memory-event source, which patches
 * them too, then steps aside. The libmrmgr processes must not have it.
 * The four calls go through pointers, as through the PLT.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#ifdef HAVE_UCX
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "compare.h"

#define PROT (PROT_READ | PROT_WRITE)

static struct {
	ucs_status_t (*create)(const ucs_rcache_params_t *params,
			       const char *name, ucs_stats_node_t *stats_parent,
			       ucs_rcache_t **rcache_p);
	void (*destroy)(ucs_rcache_t *rcache);
	ucs_status_t (*get)(ucs_rcache_t *rcache, void *address, size_t length,
			    int prot, void *arg, ucs_rcache_region_t **region_p);
	void (*put)(ucs_rcache_t *rcache, ucs_rcache_region_t *region);
} ucs;

/* Load libucs (and with it libucm) into this process; 0 or EIO. */
static int load_ucs(void)
{
	void *h;

	if (ucs.create)
		return 0;
	h = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		h = dlopen("libucs.so", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "compare: loading libucs: %s\n", dlerror());
		return EIO;
	}
	*(void **)&ucs.destroy = dlsym(h, "ucs_rcache_destroy");
	*(void **)&ucs.get = dlsym(h, "ucs_rcache_get");
	*(void **)&ucs.put = dlsym(h, "ucs_rcache_region_put");
	*(void **)&ucs.create = dlsym(h, "ucs_rcache_create");
	if (!ucs.destroy || !ucs.get || !ucs.put || !ucs.create) {
		fprintf(stderr, "compare: libucs lacks the rcache calls\n");
		ucs.create = NULL;
		return EIO;
	}
	return 0;
}

struct drv {
	ucs_rcache_t *rc;
	struct cost_model cost;
	uint64_t regs, pages;
	uint32_t next_key;
	int events; /* UCM delivers unmap events */
};

/* A region and what a UCX transport keeps in its memh: the MR and its
 * key, copied (a hit reads the key without the MR). */
struct u_region {
	ucs_rcache_region_t super;
	struct ibv_mr *mr;
	uint32_t lkey;
};

static ucs_status_t u_mem_reg(void *context, ucs_rcache_t *rc, void *arg,
			      ucs_rcache_region_t *region, uint16_t flags)
{
	struct drv *d = context;
	struct u_region *u = (struct u_region *)region;
	size_t len = region->super.end - region->super.start;

	(void)rc;
	(void)arg;
	(void)flags;
	/* The same device work as libmrmgr's bench device (bench_mr_make():
	 * the MR object ibv_reg_mr() allocates, its key, the counts). */
	u->mr = bench_mr_make(&d->cost, &d->regs, &d->pages, &d->next_key,
			      (void *)region->super.start, len);
	if (!u->mr)
		return UCS_ERR_NO_MEMORY;
	u->lkey = u->mr->lkey;
	return UCS_OK;
}

static void u_mem_dereg(void *context, ucs_rcache_t *rc,
			ucs_rcache_region_t *region)
{
	(void)context;
	(void)rc;
	bench_mr_drop(((struct u_region *)region)->mr);
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

static int u_open(struct drv **dp, uint64_t max_regions, uint64_t max_bytes,
		  const struct cost_model *cost)
{
	ucs_rcache_params_t p;
	struct drv *d = calloc(1, sizeof(*d));
	ucs_status_t st;

	if (!d)
		return ENOMEM;
	if (load_ucs()) {
		free(d);
		return EIO;
	}
	d->cost = *cost;
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
	st = ucs.create(&p, "bench", NULL, &d->rc);
	d->events = st == UCS_OK;
	if (st != UCS_OK) {
		/* No memory hooks here (under valgrind UCM installs none):
		 * the same cache without events, for instruction counts. */
		p.ucm_events = 0;
		st = ucs.create(&p, "bench", NULL, &d->rc);
	}
	if (st != UCS_OK) {
		free(d);
		return EIO;
	}
	*dp = d;
	return 0;
}

static void u_close(struct drv *d)
{
	ucs.destroy(d->rc);
	free(d);
}

static void *u_get(struct drv *d, void *addr, size_t len)
{
	ucs_rcache_region_t *r;

	return ucs.get(d->rc, addr, len, PROT, NULL, &r) == UCS_OK ? r
									  : NULL;
}

static void u_put(struct drv *d, void *h)
{
	ucs.put(d->rc, h);
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

		if (__builtin_expect(ucs.get(rc, p, PG, PROT, NULL,
						    &reg) != UCS_OK, 0))
			abort();
		if (a->read_key)
			key += ((struct u_region *)reg)->lkey;
		ucs.put(rc, reg);
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

static int u_is_default(struct drv *d)
{
	return d->events;
}

static uint64_t u_unwatched(struct drv *d)
{
	(void)d;
	return 0;
}

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
	.is_default = u_is_default,
	.unwatched = u_unwatched,
};
#endif /* HAVE_UCX */
