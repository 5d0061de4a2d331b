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
#include <stdlib.h>
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
	mrmgr__dmabuf_entry = 1;
	ret = mrmgr_get(c, (void *)(uintptr_t)key, (size_t)attr->length,
			attr->access, region);
	mrmgr__dmabuf_entry = 0;
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

/*
 * A handle: the buffer identified once (fstat, the duplicate) and pinned
 * while the handle is open, so a get through it needs no system call and
 * no lock: its key is the handle's base plus the offset, and the core's
 * hit is lock-free.
 */
struct mrmgr_dmabuf {
	struct mrmgr_cache *cache;
	struct mrmgr__dmabuf_buf *buf;
	uint64_t base;  /* the key of offset 0 */
	uint64_t limit; /* offsets end here: the size, or the key space's */
};

MRMGR_EXPORT int mrmgr_dmabuf_open(mrmgr_cache_t *c, int fd,
				   mrmgr_dmabuf_t **handle)
{
	struct mrmgr_dmabuf *h;
	uint64_t size;
	int ret;

	if (!c || !handle || c->kind != &mrmgr__kind_dmabuf) {
		mrmgr__err("mrmgr_dmabuf_open: %s", !c || !handle
			   ? "NULL argument" : "not a dma-buf cache");
		return EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return ENOMEM;
	ret = mrmgr__dmabuf_pin(c->kind_ctx, fd, 0, 0, &h->base, &h->buf);
	if (ret) {
		mrmgr__err("mrmgr_dmabuf_open: fd %d: %s", fd, strerror(ret));
		free(h);
		return ret;
	}
	size = mrmgr__dmabuf_buf_size(h->buf);
	h->limit = size ? size : MRMGR__DMABUF_MAX_OFFSET;
	h->cache = c;
	mrmgr__dmabuf_handles(c->kind_ctx, 1);
	*handle = h;
	return 0;
}

MRMGR_EXPORT int mrmgr_get_dmabuf_at(mrmgr_dmabuf_t *h, uint64_t offset,
				     uint64_t length, unsigned int access,
				     mrmgr_region_t **region)
{
	int ret;

	if (!h || !length || offset >= h->limit || length > h->limit - offset)
		return EINVAL;
	mrmgr__dmabuf_entry = 1;
	ret = mrmgr_get(h->cache, (void *)(uintptr_t)(h->base + offset),
			(size_t)length, access, region);
	mrmgr__dmabuf_entry = 0;
	return ret;
}

MRMGR_EXPORT int mrmgr_dmabuf_close(mrmgr_dmabuf_t *h)
{
	if (!h)
		return EINVAL;
	mrmgr__dmabuf_handles(h->cache->kind_ctx, -1);
	mrmgr__dmabuf_unpin(h->cache->kind_ctx, h->buf);
	free(h);
	return 0;
}
