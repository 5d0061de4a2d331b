/*
 * Running the features' hooks (ext.h), in list order. Slow path only:
 * each runner walks the cache's NULL-terminated list of a handful of
 * entries.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>

#include "cache.h"
#include "ext.h"

#define EACH(c, e)                                                         \
	for (const struct mrmgr__ext *const *e##_at = (c)->exts,           \
					    *e;                            \
	     e##_at && (e = *e##_at) != NULL; e##_at++)

/* The features whose miss and region hooks run in c. */
#define EACH_BUSY(c, e) EACH(c, e) if (!((c)->ext_idle & (1u << e->id)))

/* Which hooks of the miss path the busy features have (cache.h), as
 * their scopes narrow them: the runners return at once when none, and
 * the miss does not even call mrmgr__ext_plan_miss(). */
static void note_hooks(struct mrmgr_cache *c)
{
	c->ext_hooks = 0;
	EACH_BUSY(c, e) {
		int merged = e->scope & MRMGR__EXT_PLAN_MERGED;
		int marked = e->scope & MRMGR__EXT_RELEASED_MARKED;

		c->ext_hooks |=
			(e->region_alloc ? MRMGR__HAS_ALLOC : 0) |
			(e->region_added ? MRMGR__HAS_ADDED : 0) |
			(!e->region_released ? 0
			 : marked ? MRMGR__HAS_RELEASED_MARKED
				  : MRMGR__HAS_RELEASED) |
			(!e->plan_miss ? 0
			 : merged ? MRMGR__HAS_PLAN_MERGED : MRMGR__HAS_PLAN);
	}
}

void mrmgr__core_init_idle(struct mrmgr_cache *c, const struct mrmgr__ext *ext)
{
	c->ext_idle |= 1u << ext->id;
	note_hooks(c);
}

int mrmgr__ext_init(struct mrmgr_cache *c)
{
	c->ext_idle = 0;
	note_hooks(c);
	EACH(c, e) {
		int ret = e->init ? e->init(c) : 0;

		if (ret) {
			/* Undo the ones that ran, this one too (its state may
			 * be half made), in reverse. */
			for (e_at++; e_at != c->exts;) {
				e_at--;
				if ((*e_at)->fini)
					(*e_at)->fini(c);
				if ((*e_at)->free)
					(*e_at)->free(c);
			}
			return ret;
		}
	}
	return 0;
}

void mrmgr__ext_fini(struct mrmgr_cache *c)
{
	EACH(c, e)
		if (e->fini)
			e->fini(c);
}

void mrmgr__ext_free(struct mrmgr_cache *c)
{
	EACH(c, e)
		if (e->free)
			e->free(c);
}

int mrmgr__ext_plan_miss(struct mrmgr_cache *c, struct mrmgr__miss *m,
			 struct mrmgr_region **out)
{
	if (!mrmgr__ext_wants_plan(c, m))
		return MRMGR__PLAN_GO_ON;
	EACH_BUSY(c, e) {
		int ret = e->plan_miss &&
				  (m->merged ||
				   !(e->scope & MRMGR__EXT_PLAN_MERGED))
			  ? e->plan_miss(c, m, out) : MRMGR__PLAN_GO_ON;

		if (ret != MRMGR__PLAN_GO_ON)
			return ret;
	}
	return MRMGR__PLAN_GO_ON;
}

int mrmgr__ext_region_alloc(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	if (!(c->ext_hooks & MRMGR__HAS_ALLOC))
		return 0;
	EACH_BUSY(c, e) {
		int ret = e->region_alloc ? e->region_alloc(c, r) : 0;

		if (ret)
			return ret;
	}
	return 0;
}

void mrmgr__ext_region_added(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	if (!(c->ext_hooks & MRMGR__HAS_ADDED))
		return;
	EACH_BUSY(c, e)
		if (e->region_added)
			e->region_added(c, r);
}

void mrmgr__ext_region_released(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	int marked = r->release_locked;

	if (!mrmgr__ext_wants_released(c, r))
		return;
	EACH_BUSY(c, e)
		if (e->region_released &&
		    (marked || !(e->scope & MRMGR__EXT_RELEASED_MARKED)))
			e->region_released(c, r);
}

void mrmgr__ext_region_invalidated(struct mrmgr_cache *c,
				   struct mrmgr_region *r)
{
	EACH_BUSY(c, e)
		if (e->region_invalidated)
			e->region_invalidated(c, r);
}

void mrmgr__ext_destroy_begin(struct mrmgr_cache *c, uint64_t flags)
{
	EACH(c, e)
		if (e->destroy_begin)
			e->destroy_begin(c, flags);
}

int mrmgr__ext_destroy_check(struct mrmgr_cache *c, uint64_t busy)
{
	int ret = 0;

	EACH(c, e) {
		int r = e->destroy_check ? e->destroy_check(c, busy) : 0;

		if (r && !ret)
			ret = r;
		if (ret && !busy)
			break; /* one refusal is enough */
	}
	return ret;
}

void mrmgr__ext_stats(struct mrmgr_cache *c, struct mrmgr_stats *s)
{
	EACH(c, e)
		if (e->stats)
			e->stats(c, s);
}

int mrmgr__ext_get(struct mrmgr_cache *c, struct ibv_pd *pd, uint64_t start,
		   uint64_t last, unsigned int access, unsigned int slot,
		   struct mrmgr_region **out)
{
	EACH(c, e)
		if (e->get)
			return e->get(c, pd, start, last, access, slot, out);
	return ENOSYS; /* MRMGR__CACHE_EXT_GET with nobody to answer */
}

void mrmgr__ext_after_get(struct mrmgr_cache *c, struct mrmgr_region *r,
			  void *addr, size_t length, unsigned int access,
			  uint64_t get_flags)
{
	EACH(c, e)
		if (e->after_get)
			e->after_get(c, r, addr, length, access, get_flags);
}

struct ibv_mr *mrmgr__ext_region_mr(const struct mrmgr_region *r)
{
	EACH(r->cache, e)
		if (e->region_mr)
			return e->region_mr(r);
	return r->mr;
}
