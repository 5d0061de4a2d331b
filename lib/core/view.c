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
	size_t priv = 0, rpriv = REGION_PRIV_START;
	size_t off[MRMGR__EXT_MAX] = { 0 };

	for (size_t i = 0; c->exts && c->exts[i]; i++) {
		const struct mrmgr__ext *e = c->exts[i];

		/* The features' list is the library's own: a mistake here is
		 * a programming error, caught by the first cache any test
		 * makes. */
		if (e->id >= MRMGR__EXT_MAX || c->ext_roff_of[e->id] ||
		    off[e->id]) {
			mrmgr__err("mrmgr_cache_create: feature %s: id %u "
				   "taken or out of range", e->name, e->id);
			return EINVAL;
		}
		off[e->id] = priv + 1; /* 0: none */
		priv += ALIGN8(e->priv_size);
		if (e->region_size) {
			c->ext_roff_of[e->id] = (uint16_t)rpriv;
			rpriv += ALIGN8(e->region_size);
		}
	}
	if (rpriv > MRMGR__REGION_SIZE) {
		mrmgr__err("mrmgr_cache_create: the features' region state "
			   "(%zu bytes) does not fit beside a region (%zu)",
			   rpriv - REGION_PRIV_START,
			   (size_t)(MRMGR__REGION_SIZE - REGION_PRIV_START));
		return ENOMEM;
	}
	if (priv) {
		c->ext_priv = calloc(1, priv);
		if (!c->ext_priv)
			return ENOMEM;
	}
	for (size_t i = 0; c->exts && c->exts[i]; i++) {
		const struct mrmgr__ext *e = c->exts[i];

		if (e->priv_size)
			c->ext_priv_of[e->id] = c->ext_priv + off[e->id] - 1;
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
	c->ext_priv = NULL;
	memset(c->ext_priv_of, 0, sizeof(c->ext_priv_of));
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

void *mrmgr__core_priv(const struct mrmgr_cache *c,
		       const struct mrmgr__ext *ext)
{
	return c->ext_priv_of[ext->id];
}

void *mrmgr__core_region_priv(const struct mrmgr_region *r,
			      const struct mrmgr__ext *ext)
{
	uint16_t off = r->cache->ext_roff_of[ext->id];

	return off ? (char *)r + off : NULL;
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
		mrmgr__itree_first_overlap(mrmgr__cache_tree(c), start, last);

	return n ? mrmgr__node_region(n) : NULL;
}

struct mrmgr_region *mrmgr__core_next_overlap(struct mrmgr_region *r,
					      uint64_t start, uint64_t last)
{
	struct mrmgr__itree_node *n;

	/* Regions published since the first step join the walk. */
	(void)mrmgr__cache_tree(r->cache);
	n = mrmgr__itree_next_overlap(&r->node, start, last);

	return n ? mrmgr__node_region(n) : NULL;
}

struct mrmgr_region *mrmgr__core_region_at(struct mrmgr_cache *c, size_t i)
{
	return i < c->nall ? c->all[i] : NULL;
}
