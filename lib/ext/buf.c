/*
 * Growable registered buffers: memory the library maps, and a registration
 * that follows it through every resize.
 *
 * A buffer is an anonymous mapping of `cap` bytes (page multiple) and a
 * reference on a cache region covering exactly that mapping. The buffer's
 * region is an ordinary cached region: gets on buffer memory hit it, and
 * the cache's rules (never evicted while held, invalidation detaches it
 * but leaves it valid for the holder) keep it safe.
 *
 * Capacity doubles when the size outgrows it and halves only when the size
 * falls to a quarter, so a stream of small growths costs O(log n)
 * capacity changes; each one is an mremap() (the kernel moves page tables,
 * no copy; it may move the buffer) and a change of registration:
 *   - the buffer's region leaves the cache first (invalidation of the old
 *     range: once the memory moves, nobody may find it at the old
 *     address), keeping its MR for its holders;
 *   - then, if nobody but the buffer holds it, it is re-registered in
 *     place onto the new range (keys kept where the device can), else a
 *     new registration is made and the old one left to its holders
 *     (grow.c's rules and error contract, mrmgr__grow_held()).
 *
 * A buffer is driven by one thread at a time (resize, destroy); its
 * accessors may be read concurrently between resizes.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "compiler.h"
#include "core.h"
#include "ext.h"
#include "ids.h"
#include "grow.h"
#include "log.h"

/* A ring of buffers; the cache's head is the feature's state. */
struct buf_link {
	struct buf_link *prev, *next;
};

struct mrmgr_buf {
	struct buf_link link;          /* on the cache's ring (bufs()), under
					* the cache lock */
	struct mrmgr_cache *cache;
	struct mrmgr_region *r;        /* held; NULL after a failed follow */
	char *data;
	size_t size;                   /* what the caller asked for */
	size_t cap;                    /* bytes mapped and registered */
	unsigned int access;
	uint64_t gen;
};

static inline struct mrmgr_buf *link_buf(struct buf_link *l)
{
	return mrmgr__container_of(l, struct mrmgr_buf, link);
}

/* The cache's buffers (the feature's state, core.h). */
static struct buf_link *bufs(const struct mrmgr_cache *c)
{
	return mrmgr__core_priv(c, &mrmgr__ext_buf);
}

static inline unsigned int my_slot(const struct mrmgr_cache *c)
{
	return mrmgr__core_slot(c);
}

/* Pages for size bytes (at least one); 0 on overflow. */
static size_t cap_for(const struct mrmgr_cache *c, size_t size)
{
	size_t page = (size_t)1 << mrmgr__core_view(c)->page_shift;

	if (size == 0)
		return page;
	if (size > SIZE_MAX - (page - 1))
		return 0;
	return (size + page - 1) & ~(page - 1);
}

/*
 * After the registration changed: the generation is the registration's
 * number (or a fresh one without one), and the region is marked as a
 * buffer's so that a PD move leaves it to the buffer.
 */
static void adopt(struct mrmgr_cache *c, struct mrmgr_buf *b)
{
	b->gen = b->r ? mrmgr__rgn_gen(b->r) : mrmgr__core_next_gen(c);
	if (b->r)
		mrmgr__rgn_set_flags(b->r, MRMGR__REGION_BUFFER, 0);
}

static uint64_t first(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* Registration follows [data, data+cap): lock held. */
static int follow(struct mrmgr_buf *b, char *data, size_t cap)
{
	struct mrmgr_cache *c = b->cache;
	int ret;

	if (b->r)
		mrmgr__rgn_set_flags(b->r, 0, MRMGR__REGION_BUFFER);
	ret = mrmgr__grow_held(c, &b->r, my_slot(c), first(data), cap, b->access);

	adopt(c, b);
	if (ret)
		mrmgr__err("buffer %p + %zu: no registration (%s); resize again "
			   "to retry", (void *)data, cap, strerror(ret));
	return ret;
}

MRMGR_EXPORT int mrmgr_buf_create(mrmgr_cache_t *c, size_t size,
				  unsigned int access, mrmgr_buf_t **buf)
{
	struct mrmgr_buf *b;
	size_t cap;
	int ret;

	if (!c || !buf) {
		mrmgr__err("mrmgr_buf_create: NULL %s", !c ? "cache" : "buf pointer");
		return EINVAL;
	}
	ret = mrmgr__core_check_access("mrmgr_buf_create", access);
	if (ret)
		return ret;
	cap = cap_for(c, size);
	if (!cap) {
		mrmgr__err("mrmgr_buf_create: size %zu overflows", size);
		return EINVAL;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return ENOMEM;
	b->data = mmap(NULL, cap, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->data == MAP_FAILED) {
		free(b);
		return ENOMEM;
	}
	b->cache = c;
	b->size = size;
	b->cap = cap;
	b->access = access;

	mrmgr__core_lock(c);
	/* Fresh memory: whatever is cached at these addresses is stale. */
	mrmgr__core_invalidate_locked(c, first(b->data), first(b->data) + cap - 1);
	ret = mrmgr__core_get_locked(c, first(b->data), first(b->data) + cap - 1,
				      access, my_slot(c),
				      MRMGR__GET_NO_GROW | MRMGR__GET_NO_MERGE,
				      &b->r);
	if (!ret) {
		struct buf_link *head = bufs(c);

		b->link.prev = head->prev;
		b->link.next = head;
		head->prev->next = &b->link;
		head->prev = &b->link;
		adopt(c, b);
	}
	mrmgr__core_unlock(c);
	if (ret) {
		munmap(b->data, cap);
		free(b);
		return ret;
	}
	*buf = b;
	return 0;
}

/* The capacity a buffer of cap bytes should have for size bytes. */
static size_t next_cap(const struct mrmgr_cache *c, size_t cap, size_t need)
{
	size_t page = (size_t)1 << mrmgr__core_view(c)->page_shift;

	if (need > cap)
		return cap <= SIZE_MAX / 2 && 2 * cap > need ? 2 * cap : need;
	if (cap > page && need <= cap / 4)
		return 2 * need > page ? 2 * need : page;
	return cap;
}

MRMGR_EXPORT int mrmgr_buf_resize(mrmgr_buf_t *b, size_t new_size)
{
	struct mrmgr_cache *c;
	size_t need, cap, old_cap;
	char *old, *p;
	int ret, copied = 0;

	if (!b) {
		mrmgr__err("mrmgr_buf_resize: NULL buffer");
		return EINVAL;
	}
	c = b->cache;
	need = cap_for(c, new_size);
	if (!need) {
		mrmgr__err("mrmgr_buf_resize: size %zu overflows", new_size);
		return EINVAL;
	}
	old = b->data;
	old_cap = b->cap;
	cap = next_cap(c, old_cap, need);
	if (cap == old_cap) {
		b->size = new_size;
		if (b->r)
			return 0;
		mrmgr__core_lock(c); /* retry a failed follow */
		ret = follow(b, old, old_cap);
		mrmgr__core_unlock(c);
		return ret;
	}

	/*
	 * Out of the cache before the memory changes: no get may find a
	 * registration at addresses that are about to mean something else.
	 * The buffer's own region stays valid for it (and its other holders).
	 */
	mrmgr__core_lock(c);
	mrmgr__core_invalidate_locked(c, first(old), first(old) + old_cap - 1);
	mrmgr__core_unlock(c);

	p = mremap(old, old_cap, cap, MREMAP_MAYMOVE);
	if (p == MAP_FAILED && cap > old_cap) {
		/* E.g. the range was split into several mappings: copy. */
		p = mmap(NULL, cap, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED) {
			memcpy(p, old, b->size < old_cap ? b->size : old_cap);
			copied = 1;
		}
	}
	mrmgr__core_lock(c);
	if (p == MAP_FAILED) {
		/* Nothing changed but the cache entry: put it back. */
		ret = follow(b, old, old_cap);
		mrmgr__core_unlock(c);
		return ret ? ret : ENOMEM;
	}
	if (p != old) {
		/* The old range again (a get may have registered it while the
		 * memory was still there), and the new one: fresh memory. */
		mrmgr__core_invalidate_locked(c, first(old),
					       first(old) + old_cap - 1);
		mrmgr__core_invalidate_locked(c, first(p), first(p) + cap - 1);
	} else if (cap > old_cap)
		mrmgr__core_invalidate_locked(c, first(p) + old_cap,
					       first(p) + cap - 1);
	b->data = p;
	b->cap = cap;
	b->size = new_size;
	ret = follow(b, p, cap);
	mrmgr__core_unlock(c);
	if (copied)
		munmap(old, old_cap);
	return ret;
}

MRMGR_EXPORT int mrmgr_buf_destroy(mrmgr_buf_t *b)
{
	struct mrmgr_cache *c;

	if (!b) {
		mrmgr__err("mrmgr_buf_destroy: NULL buffer");
		return EINVAL;
	}
	c = b->cache;
	mrmgr__core_lock(c);
	b->link.prev->next = b->link.next;
	b->link.next->prev = b->link.prev;
	/* The memory goes: nothing may stay cached for it. */
	mrmgr__core_invalidate_locked(c, first(b->data),
				       first(b->data) + b->cap - 1);
	if (b->r) {
		mrmgr__rgn_set_flags(b->r, 0, MRMGR__REGION_BUFFER);
		mrmgr__core_unref_locked(c, b->r, my_slot(c));
	}
	mrmgr__core_unlock(c);
	munmap(b->data, b->cap);
	free(b);
	return 0;
}

int mrmgr__buf_follow_pd(struct mrmgr_cache *c)
{
	struct buf_link *head = bufs(c);
	int ret = 0;

	for (struct buf_link *l = head->next; l != head; l = l->next) {
		struct mrmgr_buf *b = link_buf(l);
		int err = follow(b, b->data, b->cap);

		if (err && !ret)
			ret = err;
	}
	return ret;
}

/* One exported call describes the buffer; the accessors are inline readers
 * of it in mrmgr.h (a small public surface, no per-field symbol). */
MRMGR_EXPORT int mrmgr_buf_query(const mrmgr_buf_t *b,
				 struct mrmgr_buf_info *info, size_t size)
{
	struct mrmgr_buf_info one;

	if (!b || !info || !size) {
		mrmgr__err("mrmgr_buf_query: %s", !b ? "NULL buffer"
			   : !info ? "NULL info" : "size 0");
		return EINVAL;
	}
	one.data = b->data;
	one.size = b->size;
	one.capacity = b->cap;
	one.mr = b->r ? mrmgr__rgn_mr(b->r) : NULL;
	one.generation = b->gen;
	memcpy(info, &one, size < sizeof(one) ? size : sizeof(one));
	return 0;
}

/* ------------------------------------------------------------ hooks */

static int buf_init(struct mrmgr_cache *c)
{
	struct buf_link *head = bufs(c);

	head->prev = head->next = head;
	return 0;
}

/* A buffer holds its cache: it is destroyed first. */
static int buf_destroy_check(struct mrmgr_cache *c, uint64_t busy)
{
	struct buf_link *head = bufs(c);

	if (busy || head->next == head)
		return 0;
	mrmgr__err("mrmgr_cache_destroy: buffers still use the cache; "
		   "destroy them first");
	return EBUSY;
}

const struct mrmgr__ext mrmgr__ext_buf = {
	.name = "buf",
	.id = MRMGR__EXT_ID_BUF,
	.priv_size = sizeof(struct buf_link),
	.init = buf_init,
	.destroy_check = buf_destroy_check,
};
