/*
 * bench/compare: the libmrmgr driver. A cache with the given limits and
 * otherwise default settings, on the bench device (compare_dev.c: it
 * busy-waits the cost model and registers nothing, as the UCX driver's
 * callback does). The simulated HCA only appears in sim_reg_dereg_ns(),
 * the row of its own cost.
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

extern char **environ;

struct drv {
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	int watched;      /* a memory-event source covers the cache */
	int patched;      /* ... and it is the patched libc */
	char source[160]; /* what reports unmaps, for the report */
};

/* Whether any MRMGR_* variable is set: then this is not the default. */
static const char *mrmgr_env(void)
{
	for (char **e = environ; *e; e++)
		if (!strncmp(*e, "MRMGR_", 6))
			return *e;
	return NULL;
}

/* Which invalidation source is in force for the cache. */
static void find_source(struct drv *d)
{
#if HAVE_DECL_MRMGR_CACHE_QUERY_MONITOR
	struct mrmgr_monitor_info mi;

	memset(&mi, 0, sizeof(mi));
	if (!mrmgr_cache_query_monitor(d->cache, &mi, sizeof(mi)) &&
	    (mi.sources & (MRMGR_MONITOR_SRC_UFFD | MRMGR_MONITOR_SRC_HOOKS |
			   MRMGR_MONITOR_SRC_PATCH))) {
		d->watched = 1;
		d->patched = !!(mi.sources & MRMGR_MONITOR_SRC_PATCH);
		snprintf(d->source, sizeof(d->source), "%s%s%s",
			 mi.sources & MRMGR_MONITOR_SRC_PATCH ? "patched libc " : "",
			 mi.sources & MRMGR_MONITOR_SRC_HOOKS ? "libmrmgr_hooks.so " : "",
			 mi.sources & MRMGR_MONITOR_SRC_UFFD ? "userfaultfd " : "");
		d->source[strlen(d->source) - 1] = '\0';
		return;
	}
	if (mi.patch_error) {
		snprintf(d->source, sizeof(d->source),
			 "none: libc not patched (%s); mrmgr_invalidate() "
			 "before munmap", strerror(mi.patch_error));
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
	if ((ret = bdev_open(cost, &d->pd)))
		goto out;
	if ((ret = mrmgr_cache_create(d->pd, &ca, &d->cache)))
		goto out_pd;
	find_source(d);
	*dp = d;
	return 0;
out_pd:
	bdev_close(d->pd);
out:
	free(d);
	return ret;
}

static void m_close(struct drv *d)
{
	mrmgr_cache_destroy(d->cache);
	bdev_close(d->pd);
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

/* Registration calls (reg, and rereg that changed the translation) and
 * pages, as the device counted them. */
static uint64_t m_registrations(struct drv *d)
{
	uint64_t regs, pages;

	bdev_counts(d->pd, &regs, &pages);
	return regs;
}

static uint64_t m_pages(struct drv *d)
{
	uint64_t regs, pages;

	bdev_counts(d->pd, &regs, &pages);
	return pages;
}

static const char *m_source(struct drv *d)
{
	return d->source;
}

static int m_is_default(struct drv *d)
{
	return d->patched && !mrmgr_env();
}

static uint64_t m_unwatched(struct drv *d)
{
#if HAVE_DECL_MRMGR_CACHE_QUERY_MONITOR
	struct mrmgr_monitor_info mi;

	memset(&mi, 0, sizeof(mi));
	if (!mrmgr_cache_query_monitor(d->cache, &mi, sizeof(mi)))
		return mi.unwatched;
#endif
	(void)d;
	return 0;
}

double sim_reg_dereg_ns(void *p, size_t len, int n, int no_pin)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK,
		.flags = no_pin ? MRMGR_SIM_FLAG_NO_PIN : 0,
		.memlock_bytes = UINT64_MAX,
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
	.is_default = m_is_default,
	.unwatched = m_unwatched,
};
