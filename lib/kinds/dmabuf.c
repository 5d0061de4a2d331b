/*
 * Kind two: the bytes of a dma-buf (dmabuf.h has the key space). The
 * registration operation is the device seam's reg_dmabuf_mr on the
 * cache's own duplicate of the buffer's descriptor; no event source is
 * needed: a buffer's identity cannot be reused while the table holds a
 * descriptor of it, and the table holds one while any MR of it lives.
 * A caller's descriptor number, which can be closed and reused for
 * another buffer at any time, is never a key.
 *
 * One mutex guards the table: a get pins its buffer (a list walk by
 * identity, after one fstat), the registration finds it by slot, the
 * deregistration by MR. The lists are short (buffers with live MRs).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device.h"
#include "dmabuf.h"
#include "kind.h"
#include "mr_record.h"

__thread int mrmgr__dmabuf_entry;

struct mrmgr__dmabuf_buf {
	dev_t dev;
	ino_t ino;
	int fd;              /* the table's duplicate */
	uint64_t size;       /* st_size; 0: unknown */
	uint64_t slot;
	uint64_t pins;       /* gets and registrations under way */
	uint64_t nmrs;       /* live MRs */
	struct mrmgr__dmabuf_buf *next;
};

struct mrmgr__dmabuf_tbl {
	pthread_mutex_t lock;
	struct mrmgr__dmabuf_buf *bufs;
	struct mrmgr__kind_mr *mrs; /* owner: the buffer */
	uint64_t next_slot;  /* never given yet, from 1 */
	uint64_t *free_slots; /* given back, most recent last */
	size_t nfree, free_cap;
	uint64_t nfds;
	uint64_t nhandles;   /* mrmgr_dmabuf_open()'s, open */
};

int mrmgr__dmabuf_tbl_new(struct mrmgr__dmabuf_tbl **t)
{
	*t = calloc(1, sizeof(**t));
	if (!*t)
		return ENOMEM;
	(*t)->next_slot = 1; /* slot 0: keys under 2^38, where a host
			      * address given by mistake is likeliest */
	pthread_mutex_init(&(*t)->lock, NULL);
	return 0;
}

static void give_back_slot(struct mrmgr__dmabuf_tbl *t, uint64_t slot)
{
	if (t->nfree == t->free_cap) {
		size_t cap = t->free_cap ? 2 * t->free_cap : 16;
		uint64_t *v = realloc(t->free_slots, cap * sizeof(*v));

		if (!v)
			return;
		t->free_slots = v;
		t->free_cap = cap;
	}
	t->free_slots[t->nfree++] = slot;
}

static int take_slot(struct mrmgr__dmabuf_tbl *t, uint64_t *slot)
{
	if (t->nfree) {
		*slot = t->free_slots[--t->nfree];
		return 0;
	}
	if (t->next_slot >= MRMGR__DMABUF_MAX_SLOTS)
		return ENOSPC;
	*slot = t->next_slot++;
	return 0;
}

/* Lock held: close and forget b when nothing holds it any more. */
static void maybe_close(struct mrmgr__dmabuf_tbl *t,
			struct mrmgr__dmabuf_buf *b)
{
	if (b->pins || b->nmrs)
		return;
	for (struct mrmgr__dmabuf_buf **pp = &t->bufs; *pp; pp = &(*pp)->next) {
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	}
	close(b->fd);
	t->nfds--;
	/* No MR of it lives (nor a get): no region has a key of the slot,
	 * which may be given again. Low slots first: their keys are the
	 * index's. Without memory to remember it, the slot is lost. */
	give_back_slot(t, b->slot);
	free(b);
}

/* Lock held: the buffer with st's identity, made (fd duplicated) when
 * the table has none. */
static int find_or_add(struct mrmgr__dmabuf_tbl *t, int fd,
		       const struct stat *st, struct mrmgr__dmabuf_buf **out)
{
	struct mrmgr__dmabuf_buf *b;

	for (b = t->bufs; b; b = b->next) {
		if (b->dev == st->st_dev && b->ino == st->st_ino) {
			*out = b;
			return 0;
		}
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return ENOMEM;
	b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (b->fd < 0) {
		int err = errno;

		free(b);
		return err == EBADF ? EBADF : err == ENFILE ? ENFILE : EMFILE;
	}
	if (take_slot(t, &b->slot)) {
		close(b->fd);
		free(b);
		return ENOSPC;
	}
	b->dev = st->st_dev;
	b->ino = st->st_ino;
	b->size = st->st_size > 0 ? (uint64_t)st->st_size : 0;
	b->next = t->bufs;
	t->bufs = b;
	t->nfds++;
	*out = b;
	return 0;
}

int mrmgr__dmabuf_pin(struct mrmgr__dmabuf_tbl *t, int fd, uint64_t offset,
		      uint64_t length, uint64_t *key,
		      struct mrmgr__dmabuf_buf **pin)
{
	struct mrmgr__dmabuf_buf *b;
	struct stat st;
	int ret;

	if (fd < 0 || fstat(fd, &st) != 0)
		return EBADF;
	if (offset + length < offset || offset + length > MRMGR__DMABUF_MAX_OFFSET ||
	    (st.st_size > 0 && offset + length > (uint64_t)st.st_size))
		return EINVAL;
	pthread_mutex_lock(&t->lock);
	ret = find_or_add(t, fd, &st, &b);
	if (!ret)
		b->pins++;
	pthread_mutex_unlock(&t->lock);
	if (ret)
		return ret;
	*key = (b->slot << MRMGR__DMABUF_SLOT_SHIFT) | offset;
	*pin = b;
	return 0;
}

void mrmgr__dmabuf_unpin(struct mrmgr__dmabuf_tbl *t,
			 struct mrmgr__dmabuf_buf *b)
{
	pthread_mutex_lock(&t->lock);
	b->pins--;
	maybe_close(t, b);
	pthread_mutex_unlock(&t->lock);
}

uint64_t mrmgr__dmabuf_buf_size(const struct mrmgr__dmabuf_buf *b)
{
	return b->size;
}

void mrmgr__dmabuf_handles(struct mrmgr__dmabuf_tbl *t, int delta)
{
	pthread_mutex_lock(&t->lock);
	t->nhandles += (uint64_t)(int64_t)delta;
	pthread_mutex_unlock(&t->lock);
}

static int dmabuf_busy(void *ctx)
{
	struct mrmgr__dmabuf_tbl *t = ctx;
	int busy;

	pthread_mutex_lock(&t->lock);
	busy = t->nhandles != 0;
	pthread_mutex_unlock(&t->lock);
	return busy;
}

uint64_t mrmgr__dmabuf_fds(struct mrmgr__dmabuf_tbl *t)
{
	uint64_t n;

	pthread_mutex_lock(&t->lock);
	n = t->nfds;
	pthread_mutex_unlock(&t->lock);
	return n;
}

static int dmabuf_reg(void *ctx, const struct mrmgr_device_ops *ops,
		      struct ibv_pd *pd, uint64_t key, uint64_t len,
		      int access, struct ibv_mr **mr)
{
	struct mrmgr__dmabuf_tbl *t = ctx;
	uint64_t slot = key >> MRMGR__DMABUF_SLOT_SHIFT;
	uint64_t off = key & (MRMGR__DMABUF_MAX_OFFSET - 1);
	struct mrmgr__dmabuf_buf *b;
	struct mrmgr__kind_mr *rec;
	int ret;

	*mr = NULL;
	if (!mrmgr__dmabuf_entry)
		return EINVAL; /* mrmgr_get() of a host address on a dma-buf cache */
	rec = malloc(sizeof(*rec));
	if (!rec)
		return ENOMEM;
	pthread_mutex_lock(&t->lock);
	for (b = t->bufs; b && b->slot != slot; b = b->next)
		;
	if (b)
		b->pins++; /* the get pins it too; this covers the unlock */
	pthread_mutex_unlock(&t->lock);
	if (!b) {
		free(rec);
		return EINVAL;
	}
	/* The span is whole pages of keys; the buffer may end inside the
	 * last one. */
	if (b->size && off + len > b->size)
		len = b->size > off ? b->size - off : 0;
	ret = len ? mrmgr__dev_reg_dmabuf_mr(ops, pd, off, (size_t)len, off,
					     b->fd, access, mr)
		  : EINVAL;
	pthread_mutex_lock(&t->lock);
	b->pins--;
	if (!ret) {
		b->nmrs++;
		mrmgr__kind_mr_push(&t->mrs, rec, *mr, b);
		rec = NULL;
	}
	maybe_close(t, b);
	pthread_mutex_unlock(&t->lock);
	free(rec);
	return ret;
}

static void dmabuf_released(void *ctx, void *owner)
{
	struct mrmgr__dmabuf_buf *b = owner;

	b->nmrs--;
	maybe_close(ctx, b);
}

/* The record goes first, while the MR lives (mr_record.c says why). */
static int dmabuf_dereg(void *ctx, const struct mrmgr_device_ops *ops,
			struct ibv_mr *mr)
{
	struct mrmgr__dmabuf_tbl *t = ctx;

	return mrmgr__kind_mr_dereg(&t->lock, &t->mrs, ops, mr,
				    dmabuf_released, t);
}

/* The cache is gone: what an abandoned MR (a deregistration that never
 * succeeded) still held is closed too. */
static void dmabuf_fini(void *ctx)
{
	struct mrmgr__dmabuf_tbl *t = ctx;

	mrmgr__kind_mr_free_all(&t->mrs);
	while (t->bufs) {
		struct mrmgr__dmabuf_buf *b = t->bufs;

		t->bufs = b->next;
		close(b->fd);
		free(b);
	}
	pthread_mutex_destroy(&t->lock);
	free(t->free_slots);
	free(t);
}

const struct mrmgr__kind mrmgr__kind_dmabuf = {
	.name = "dma-buf",
	.id = MRMGR__KIND_DMABUF,
	.sources = 0, /* identity held by the duplicate: nothing to watch */
	.reg = dmabuf_reg,
	.dereg = dmabuf_dereg,
	.fini = dmabuf_fini,
	.busy = dmabuf_busy,
};
