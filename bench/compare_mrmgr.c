/*
 * bench/compare: the libmrmgr driver. A simulated HCA that pins nothing
 * (MRMGR_SIM_FLAG_NO_PIN: registration checks the range is mapped, then
 * busy-waits the cost model) under a cache with the given limits and
 * otherwise default settings.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#include "compare.h"

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ)

struct drv {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	int watched;      /* a memory-event source covers the cache */
	char source[96];  /* what reports unmaps, for the report */
};

/* Which invalidation source is in force for the cache. */
static void find_source(struct drv *d)
{
#if HAVE_DECL_MRMGR_CACHE_QUERY_MONITOR
	struct mrmgr_monitor_info mi;

	if (!mrmgr_cache_query_monitor(d->cache, &mi, sizeof(mi)) &&
	    (mi.sources & (MRMGR_MONITOR_SRC_UFFD | MRMGR_MONITOR_SRC_HOOKS |
			   MRMGR_MONITOR_SRC_PATCH))) {
		d->watched = 1;
		snprintf(d->source, sizeof(d->source), "monitor: %s%s%s",
			 mi.sources & MRMGR_MONITOR_SRC_UFFD ? "userfaultfd " : "",
			 mi.sources & MRMGR_MONITOR_SRC_HOOKS ? "libmrmgr_hooks.so " : "",
			 mi.sources & MRMGR_MONITOR_SRC_PATCH ? "patched libc" : "");
		return;
	}
#endif
	/* No automatic source: the caller reports unmaps (the documented
	 * contract). */
	snprintf(d->source, sizeof(d->source),
		 "mrmgr_invalidate() before munmap");
}

static int m_open(struct drv **dp, uint64_t max_regions, uint64_t max_bytes,
		  const struct cost_model *cost)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK |
			     MRMGR_SIM_ATTR_COST,
		.flags = MRMGR_SIM_FLAG_NO_PIN,
		.memlock_bytes = UINT64_MAX,
		.reg_ns = cost->reg_ns,
		.reg_ns_per_page = cost->reg_ns_per_page,
	};
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_regions = max_regions,
		.max_bytes = max_bytes,
	};
	struct drv *d = calloc(1, sizeof(*d));
	int ret;

	if (!d)
		return ENOMEM;
	if ((ret = mrmgr_sim_open(&sa, &d->ctx)))
		goto out;
	if ((ret = mrmgr_sim_alloc_pd(d->ctx, &d->pd)))
		goto out_ctx;
	if ((ret = mrmgr_cache_create(d->pd, &ca, &d->cache)))
		goto out_pd;
	find_source(d);
	*dp = d;
	return 0;
out_pd:
	mrmgr_sim_dealloc_pd(d->pd);
out_ctx:
	mrmgr_sim_close(d->ctx);
out:
	free(d);
	return ret;
}

static void m_close(struct drv *d)
{
	mrmgr_cache_destroy(d->cache);
	mrmgr_sim_dealloc_pd(d->pd);
	mrmgr_sim_close(d->ctx);
	free(d);
}

static void *m_get(struct drv *d, void *addr, size_t len)
{
	mrmgr_region_t *r;

	return mrmgr_get(d->cache, addr, len, ACCESS, &r) ? NULL : r;
}

static void m_put(struct drv *d, void *h)
{
	(void)d;
	mrmgr_put(h);
}

static void m_invalidate(struct drv *d, void *addr, size_t len)
{
	if (!d->watched)
		mrmgr_invalidate(d->cache, addr, len);
}

static void m_hit_loop(struct drv *d, const struct hit_args *a)
{
	mrmgr_cache_t *cache = d->cache;
	uint64_t s = a->seed;
	uint64_t pages = a->region_len / PG, key = 0;

	for (uint64_t i = 0; i < a->nops; i++) {
		uint64_t r = rng_next(&s);
		char *p = a->base + rng_below(r, a->nregions) * a->stride +
			  rng_below(r << 32, pages) * PG;
		mrmgr_region_t *reg;

		if (__builtin_expect(mrmgr_get(cache, p, PG, ACCESS, &reg), 0))
			abort();
		if (a->read_key)
			key += mrmgr_region_lkey(reg);
		mrmgr_put(reg);
	}
	((struct hit_args *)a)->sink = key;
}

/* Registration calls: ibv_reg_mr, and ibv_rereg_mr that grew a region. */
static uint64_t m_registrations(struct drv *d)
{
	struct mrmgr_stats st;

	mrmgr_cache_query_stats(d->cache, &st, sizeof(st));
	return st.registrations + st.rereg_successes;
}

static uint64_t m_pages(struct drv *d)
{
	struct mrmgr_stats st;

	mrmgr_cache_query_stats(d->cache, &st, sizeof(st));
	return st.pages_registered;
}

static const char *m_source(struct drv *d)
{
	return d->source;
}

double sim_reg_dereg_ns(const struct cost_model *cost, void *p, size_t len,
			int n)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK |
			     MRMGR_SIM_ATTR_COST,
		.flags = MRMGR_SIM_FLAG_NO_PIN,
		.memlock_bytes = UINT64_MAX,
		.reg_ns = cost->reg_ns,
		.reg_ns_per_page = cost->reg_ns_per_page,
	};
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	double *t = calloc((size_t)n, sizeof(*t)), m;

	if (!t || mrmgr_sim_open(&sa, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd))
		abort();
	for (int i = 0; i < n; i++) {
		double t0 = now_ns();
		struct ibv_mr *mr;

		if (mrmgr_sim_reg_mr(pd, p, len, ACCESS, &mr))
			abort();
		mrmgr_sim_dereg_mr(mr);
		t[i] = now_ns() - t0;
	}
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	m = t[n / 2];
	free(t);
	return m;
}

const struct drv_ops mrmgr_drv = {
	.name = "libmrmgr",
	.open = m_open,
	.close = m_close,
	.get = m_get,
	.put = m_put,
	.invalidate = m_invalidate,
	.hit_loop = m_hit_loop,
	.registrations = m_registrations,
	.pages_registered = m_pages,
	.event_source = m_source,
};
