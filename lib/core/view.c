/*
 * What features read of the core (core.h): the cache's view, the
 * features' private state, the one counter API, a region's fields and
 * the iterators. Slow path only: features never run on a hit.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "core.h"
#include "ext.h"
#include "log.h"

#define ALIGN8(x) (((x) + 7u) & ~(size_t)7u)

/* Where a region's features' state starts: after the region, in the
 * rest of its place in the slab (region.h). */
#define REGION_PRIV_START ALIGN8(sizeof(struct mrmgr_region))

int mrmgr__view_init(struct mrmgr_cache *c)
{
	size_t n = 0, priv = 0, rpriv = REGION_PRIV_START;

	while (c->exts && c->exts[n])
		n++;
	c->ext_off = calloc(2 * n + 1, sizeof(*c->ext_off));
	if (!c->ext_off)
		return ENOMEM;
	c->ext_roff = c->ext_off + n;
	for (size_t i = 0; i < n; i++) {
		c->ext_off[i] = priv;
		priv += ALIGN8(c->exts[i]->priv_size);
		c->ext_roff[i] = rpriv;
		rpriv += ALIGN8(c->exts[i]->region_size);
	}
	if (rpriv > MRMGR__REGION_SIZE) {
		/* The features' list is the library's own: a programming
		 * error, caught by the first cache any test makes. */
		mrmgr__err("mrmgr_cache_create: the features' region state "
			   "(%zu bytes) does not fit beside a region (%zu)",
			   rpriv - REGION_PRIV_START,
			   (size_t)(MRMGR__REGION_SIZE - REGION_PRIV_START));
		free(c->ext_off);
		c->ext_off = c->ext_roff = NULL;
		return ENOMEM;
	}
	if (priv) {
		c->ext_priv = calloc(1, priv);
		if (!c->ext_priv) {
			free(c->ext_off);
			c->ext_off = c->ext_roff = NULL;
			return ENOMEM;
		}
	}
	c->view.pd = c->pd;
	c->view.ops = c->ops;
	c->view.caps = &c->caps;
	c->view.max_regions = c->cfg.max_regions;
	c->view.max_bytes = c->cfg.max_bytes;
	c->view.cfg_flags = c->cfg.flags;
	c->view.odp_mode = c->cfg.odp_mode;
	c->view.odp_flags = c->cfg.odp_flags;
	c->view.odp_transports = c->cfg.odp_transports;
	c->view.odp_ops = c->cfg.odp_ops;
	c->view.page_shift = c->page_shift;
	c->view.nstripes = c->nstripes;
	return 0;
}

void mrmgr__view_fini(struct mrmgr_cache *c)
{
	free(c->ext_priv);
	free(c->ext_off);
	c->ext_priv = NULL;
	c->ext_off = c->ext_roff = NULL;
}

const struct mrmgr__core_view *mrmgr__core_view(const struct mrmgr_cache *c)
{
	return &c->view;
}

uint64_t mrmgr__core_flags(const struct mrmgr_cache *c)
{
	return __atomic_load_n(&c->flags, __ATOMIC_RELAXED);
}

void mrmgr__core_init_reg(struct mrmgr_cache *c, unsigned int reg_access,
			  int unpinned)
{
	c->reg_access = reg_access;
	c->unpinned = unpinned;
}

void mrmgr__core_init_flags(struct mrmgr_cache *c, uint64_t set,
			    uint64_t clear)
{
	c->flags = (c->flags & ~clear) | set;
}

uint64_t mrmgr__core_pinned_bytes(const struct mrmgr_cache *c)
{
	return c->pinned_bytes;
}

unsigned int mrmgr__core_slot(const struct mrmgr_cache *c)
{
	return mrmgr__thread_slot() & (c->nstripes - 1);
}

/* Index of ext in c's list, or -1. */
static ptrdiff_t ext_index(const struct mrmgr_cache *c,
			   const struct mrmgr__ext *ext)
{
	for (ptrdiff_t i = 0; c->exts && c->exts[i]; i++)
		if (c->exts[i] == ext)
			return i;
	return -1;
}

void *mrmgr__core_priv(const struct mrmgr_cache *c,
		       const struct mrmgr__ext *ext)
{
	ptrdiff_t i = ext_index(c, ext);

	if (i < 0 || !ext->priv_size)
		return NULL;
	return c->ext_priv + c->ext_off[i];
}

void *mrmgr__core_region_priv(const struct mrmgr_region *r,
			      const struct mrmgr__ext *ext)
{
	const struct mrmgr_cache *c = r->cache;
	ptrdiff_t i = ext_index(c, ext);

	if (i < 0 || !ext->region_size)
		return NULL;
	return (char *)r + c->ext_roff[i];
}

uint64_t mrmgr__core_next_gen(struct mrmgr_cache *c)
{
	return ++c->next_gen;
}

void mrmgr__core_count_at(struct mrmgr_cache *c, size_t offset, int64_t delta)
{
	uint64_t *v = (uint64_t *)((char *)&c->st + offset);

	*v += (uint64_t)delta;
}

uint64_t mrmgr__rgn_start(const struct mrmgr_region *r)
{
	return r->node.start;
}

uint64_t mrmgr__rgn_last(const struct mrmgr_region *r)
{
	return r->node.last;
}

struct ibv_mr *mrmgr__rgn_mr(const struct mrmgr_region *r)
{
	return r->mr;
}

unsigned int mrmgr__rgn_access(const struct mrmgr_region *r)
{
	return r->access;
}

int mrmgr__rgn_kind(const struct mrmgr_region *r)
{
	return r->kind;
}

unsigned int mrmgr__rgn_flags(const struct mrmgr_region *r)
{
	return r->flags;
}

uint64_t mrmgr__rgn_gen(const struct mrmgr_region *r)
{
	return r->gen;
}

struct mrmgr_cache *mrmgr__rgn_cache(const struct mrmgr_region *r)
{
	return r->cache;
}

int mrmgr__rgn_state(const struct mrmgr_region *r)
{
	return mrmgr__region_state(r);
}

int64_t mrmgr__rgn_refs(const struct mrmgr_region *r)
{
	return mrmgr__region_refs(r, r->cache->nstripes);
}

void mrmgr__rgn_release_locked(struct mrmgr_region *r)
{
	r->release_locked = 1;
}

int mrmgr__rgn_live(const struct mrmgr_region *r)
{
	return mrmgr__region_state(r) == MRMGR__REGION_LIVE;
}

void mrmgr__rgn_set_flags(struct mrmgr_region *r, unsigned int set,
			  unsigned int clear)
{
	r->flags = (r->flags & ~clear) | set;
}

void mrmgr__rgn_ref(struct mrmgr_region *r, unsigned int slot)
{
	mrmgr__ref_take(r, slot);
}

void mrmgr__rgn_ref_used(struct mrmgr_region *r, unsigned int slot)
{
	if (!(mrmgr__ref_take(r, slot) & MRMGR__REF_USED))
		mrmgr__ref_mark_used(mrmgr__ref_word(r, slot));
}

void mrmgr__rgn_unref(struct mrmgr_region *r, unsigned int slot)
{
	mrmgr__ref_drop(r, slot);
}

void mrmgr__rgn_set_asked(struct mrmgr_region *r, uint64_t start,
			  uint64_t last)
{
	r->asked_start = start;
	r->asked_last = last;
}

void mrmgr__core_set_pd(struct mrmgr_cache *c, struct ibv_pd *pd)
{
	c->pd = pd;
	c->view.pd = pd;
}

struct mrmgr_region *mrmgr__core_first_overlap(struct mrmgr_cache *c,
					       uint64_t start, uint64_t last)
{
	struct mrmgr__itree_node *n =
		mrmgr__itree_first_overlap(&c->tree, start, last);

	return n ? mrmgr__node_region(n) : NULL;
}

struct mrmgr_region *mrmgr__core_next_overlap(struct mrmgr_region *r,
					      uint64_t start, uint64_t last)
{
	struct mrmgr__itree_node *n =
		mrmgr__itree_next_overlap(&r->node, start, last);

	return n ? mrmgr__node_region(n) : NULL;
}

struct mrmgr_region *mrmgr__core_region_at(struct mrmgr_cache *c, size_t i)
{
	return i < c->nall ? c->all[i] : NULL;
}
