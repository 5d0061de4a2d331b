/*
 * The public entry points of kind two (dma-buf, lib/kinds/dmabuf.c): a
 * cache that serves it, and the get. The get is mrmgr_get() on the
 * buffer's keys, with the buffer pinned in the kind's table around it;
 * hit, miss, eviction and put are the core's, unchanged.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "cache.h"
#include "dmabuf.h"
#include "log.h"

MRMGR_EXPORT int mrmgr_cache_create_dmabuf(struct ibv_pd *pd,
					   const struct mrmgr_cache_attr *attr,
					   mrmgr_cache_t **cache)
{
	/* No feature: growth, headroom, ODP and sharing all work on host
	 * addresses. */
	static const struct mrmgr__ext *const none[] = { NULL };
	struct mrmgr__dmabuf_tbl *t;
	struct mrmgr_cache *c;
	int ret;

	if (!cache)
		return EINVAL;
	ret = mrmgr__dmabuf_tbl_new(&t);
	if (ret)
		return ret;
	ret = mrmgr__cache_create_ex(pd, attr, none, MRMGR__CREATE_PINNED,
				     "a dma-buf cache", &c);
	if (ret) {
		mrmgr__kind_dmabuf.fini(t);
		return ret;
	}
	/* Not shared yet: no get can have seen kind one. */
	c->kind = &mrmgr__kind_dmabuf;
	c->kind_ctx = t;
	*cache = c;
	return 0;
}

MRMGR_EXPORT int mrmgr_get_dmabuf(mrmgr_cache_t *c,
				  const struct mrmgr_dmabuf_attr *attr,
				  mrmgr_region_t **region)
{
	struct mrmgr__dmabuf_buf *pin;
	uint64_t key;
	int ret;

	if (!c || !attr || !region) {
		mrmgr__err("mrmgr_get_dmabuf: NULL %s",
			   !c ? "cache" : !attr ? "attr" : "region pointer");
		return EINVAL;
	}
	if (c->kind != &mrmgr__kind_dmabuf) {
		mrmgr__err("mrmgr_get_dmabuf: not a dma-buf cache "
			   "(mrmgr_cache_create_dmabuf())");
		return EINVAL;
	}
	if (attr->comp_mask || !attr->length) {
		mrmgr__err("mrmgr_get_dmabuf: %s",
			   attr->comp_mask ? "unknown comp_mask bits"
					   : "zero length");
		return EINVAL;
	}
	ret = mrmgr__dmabuf_pin(c->kind_ctx, attr->fd, attr->offset,
				attr->length, &key, &pin);
	if (ret) {
		mrmgr__err("mrmgr_get_dmabuf: fd %d [%llu, +%llu): %s", attr->fd,
			   (unsigned long long)attr->offset,
			   (unsigned long long)attr->length, strerror(ret));
		return ret;
	}
	ret = mrmgr_get(c, (void *)(uintptr_t)key, (size_t)attr->length,
			attr->access, region);
	mrmgr__dmabuf_unpin(c->kind_ctx, pin);
	return ret;
}

MRMGR_EXPORT int mrmgr_region_dmabuf_offset(const mrmgr_region_t *r,
					    uint64_t *offset)
{
	uint64_t key;

	if (!r || !offset || r->cache->kind != &mrmgr__kind_dmabuf)
		return EINVAL;
	key = mrmgr__rgn_start(r);
	*offset = key & (MRMGR__DMABUF_MAX_OFFSET - 1);
	return 0;
}
