/*
 * The public entry points of kind three (device VAs of a memory domain,
 * lib/kinds/devva.c): domains, a cache that serves the kind, the get.
 *
 * The get's hit is the core's lock-free hit after one atomic load (the
 * domain's free counter) and one compare: only when the counter moved
 * since the cache last validated does the get take the validation lock,
 * ask the domain whether each allocation it holds still has its buffer
 * id, and invalidate the ones that changed, before it looks up (also
 * while a free is under way, for a domain that counts frees begun and
 * ended apart). A domain whose counter is not trusted (the CUDA domain
 * where it cannot follow frees) has the allocation the get would hit
 * validated at every get instead. A miss asks the domain for the
 * allocation and gets all of it, so later gets of any part of it hit.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "core.h"
#include "devva.h"
#include "log.h"
#include "region.h"

MRMGR_EXPORT int mrmgr_domain_create(const struct mrmgr_domain_ops *ops,
				     void *ctx, mrmgr_domain_t **domain)
{
	static const int follows = 1; /* the operations' promise */
	struct mrmgr_domain *d;

	if (!ops || !domain || ops->size < sizeof(*ops) || !ops->query ||
	    !ops->valid || !ops->export_dmabuf || !ops->free_counter) {
		mrmgr__err("mrmgr_domain_create: NULL argument or operation");
		return EINVAL;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return ENOMEM;
	d->ops = *ops;
	d->ctx = ctx;
	d->follows = &follows;
	d->free_counter = ops->free_counter(ctx);
	if (!d->free_counter) {
		free(d);
		return EINVAL;
	}
	*domain = d;
	return 0;
}

MRMGR_EXPORT int mrmgr_domain_open_cuda(mrmgr_domain_t **domain)
{
	static int said; /* once a process: callers probe it at every start */
	const char *why = NULL;
	int ret;

	if (!domain)
		return EINVAL;
	ret = mrmgr__cuda_domain_open(domain, &why);
	if (ret && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		mrmgr__info("CUDA memory domain off: %s", why);
	return ret;
}

MRMGR_EXPORT int mrmgr_domain_freed(mrmgr_domain_t *d)
{
	if (!d)
		return EINVAL;
	__atomic_fetch_add(&d->reported, 1, __ATOMIC_RELEASE);
	return 0;
}

MRMGR_EXPORT int mrmgr_domain_destroy(mrmgr_domain_t *d)
{
	if (!d)
		return EINVAL;
	if (__atomic_load_n(&d->users, __ATOMIC_ACQUIRE))
		return EBUSY;
	if (d->close)
		d->close(d->ctx);
	free(d);
	return 0;
}

MRMGR_EXPORT int mrmgr_cache_create_device(struct ibv_pd *pd,
					   const struct mrmgr_cache_attr *attr,
					   mrmgr_domain_t *domain,
					   mrmgr_cache_t **cache)
{
	/* No feature: growth, headroom, ODP and sharing work on host
	 * addresses. */
	static const struct mrmgr__ext *const none[] = { NULL };
	struct mrmgr_cache_attr a = { 0 };
	struct mrmgr__devva_tbl *t;
	struct mrmgr_cache *c;
	int ret;

	if (!cache || !domain)
		return EINVAL;
	/* Each allocation is its own registration: never merged with a
	 * neighbouring allocation (whose free must not take it along). */
	if (attr)
		a = *attr;
	if (!(a.comp_mask & MRMGR_CACHE_ATTR_FLAGS))
		a.flags = 0;
	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags |= MRMGR_CACHE_NO_MERGE;
	ret = mrmgr__devva_tbl_new(domain, &t);
	if (ret)
		return ret;
	__atomic_fetch_add(&domain->users, 1, __ATOMIC_RELAXED);
	ret = mrmgr__cache_create_ex(pd, &a, none, MRMGR__CREATE_PINNED,
				     "a device-VA cache", &c);
	if (ret) {
		mrmgr__kind_devva.fini(t);
		return ret;
	}
	c->kind = &mrmgr__kind_devva;
	c->kind_ctx = t;
	*cache = c;
	return 0;
}

/* The counter moved: invalidate the allocations whose buffer id changed. */
static int revalidate(struct mrmgr_cache *c, struct mrmgr__devva_tbl *t,
		      const struct mrmgr_domain *d, uint64_t *validated)
{
	uint64_t *ranges = NULL, now;
	size_t n = 0;
	int ret;

	mrmgr__devva_lock(t, 1);
	/* Read before the walk: a free after it moves it again. A free
	 * under way (not settled) is walked for at every get until it ends. */
	now = mrmgr__domain_frees(d);
	if (now == __atomic_load_n(validated, __ATOMIC_RELAXED) &&
	    mrmgr__domain_settled(d)) {
		mrmgr__devva_lock(t, 0);
		return 0;
	}
	ret = mrmgr__devva_stale(t, &ranges, &n);
	for (size_t i = 0; i < n; i++)
		mrmgr_invalidate(c, (void *)(uintptr_t)ranges[2 * i],
				 (size_t)ranges[2 * i + 1]);
	if (!ret)
		__atomic_store_n(validated, now, __ATOMIC_RELEASE);
	mrmgr__devva_lock(t, 0);
	free(ranges);
	return ret;
}

/* A domain whose counter is not trusted: the allocation this get would
 * hit is checked (its buffer id) every time, as libfabric does. */
static int validate_at(struct mrmgr_cache *c, struct mrmgr__devva_tbl *t,
		       uint64_t va)
{
	uint64_t *ranges = NULL;
	size_t n = 0;
	int ret;

	ret = mrmgr__devva_stale_at(t, va, &ranges, &n);
	for (size_t i = 0; i < n; i++)
		mrmgr_invalidate(c, (void *)(uintptr_t)ranges[2 * i],
				 (size_t)ranges[2 * i + 1]);
	free(ranges);
	return ret;
}

MRMGR_EXPORT int mrmgr_get_device(mrmgr_cache_t *c, uint64_t va,
				  size_t length, unsigned int access,
				  mrmgr_region_t **region)
{
	struct mrmgr__devva_tbl *t;
	const struct mrmgr_domain *d;
	uint64_t *validated, base, size, id;
	struct mrmgr_region *r;
	int ret;

	if (mrmgr__unlikely(!c || !region || !length ||
			    c->kind != &mrmgr__kind_devva ||
			    va + length < va)) {
		mrmgr__err("mrmgr_get_device: %s", !c || !region
			   ? "NULL argument" : !length ? "zero length"
			   : va + length < va ? "range overflows"
			   : "not a device-VA cache (mrmgr_cache_create_device())");
		return EINVAL;
	}
	t = c->kind_ctx;
	d = mrmgr__devva_domain(t);
	validated = mrmgr__devva_validated(t);
	if (d->recheck)
		d->recheck();
	if (mrmgr__unlikely(!mrmgr__domain_follows(d))) {
		ret = validate_at(c, t, va);
		if (ret)
			return ret;
	}
	if (mrmgr__unlikely(mrmgr__domain_frees(d) !=
			    __atomic_load_n(validated, __ATOMIC_ACQUIRE) ||
			    !mrmgr__domain_settled(d))) {
		ret = revalidate(c, t, d, validated);
		if (ret)
			return ret;
	}
	r = mrmgr__core_try_hit(c, va, va + length - 1, access,
				mrmgr__thread_slot() & (c->nstripes - 1));
	if (mrmgr__likely(r != NULL)) {
		*region = r;
		return 0;
	}
	/* A miss: the whole allocation. */
	ret = d->ops.query(d->ctx, va, &base, &size, &id);
	if (ret) {
		mrmgr__err("mrmgr_get_device: %s domain: no allocation at %#llx: %s",
			   d->ops.name, (unsigned long long)va, strerror(ret));
		return ret;
	}
	/* The core's regions are whole pages: an allocation that shares a
	 * page with another (small allocations a driver packs together)
	 * would let a get of the neighbour hit this registration, which
	 * does not cover it. Not cached. */
	if ((base | size) & ((uint64_t)sysconf(_SC_PAGESIZE) - 1)) {
		mrmgr__err("mrmgr_get_device: allocation [%#llx, +%llu) is not "
			   "whole pages: not cached (EOPNOTSUPP)",
			   (unsigned long long)base, (unsigned long long)size);
		return EOPNOTSUPP;
	}
	if (va < base || va + length > base + size) {
		mrmgr__err("mrmgr_get_device: [%#llx, +%zu) past its allocation "
			   "[%#llx, +%llu)", (unsigned long long)va, length,
			   (unsigned long long)base, (unsigned long long)size);
		return EINVAL;
	}
	mrmgr__devva_entry = 1;
	mrmgr__devva_va = va;
	ret = mrmgr_get(c, (void *)(uintptr_t)base, (size_t)size, access,
			region);
	mrmgr__devva_entry = 0;
	return ret;
}
