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

struct mrmgr__dmabuf_buf {
	dev_t dev;
	ino_t ino;
	int fd;              /* the table's duplicate */
	uint64_t size;       /* st_size; 0: unknown */
	uint64_t slot;
	uint64_t pins;       /* gets and registrations under way */
	uint64_t nmrs;       /* live MRs */
	int had_mr;          /* some key of its slot was registered */
	struct mrmgr__dmabuf_buf *next;
};

struct mr_rec {
	struct ibv_mr *mr;
	struct mrmgr__dmabuf_buf *b;
	struct mr_rec *next;
};

struct mrmgr__dmabuf_tbl {
	pthread_mutex_t lock;
	struct mrmgr__dmabuf_buf *bufs;
	struct mr_rec *mrs;
	uint64_t next_slot;
	uint64_t nfds;
};

int mrmgr__dmabuf_tbl_new(struct mrmgr__dmabuf_tbl **t)
{
	*t = calloc(1, sizeof(**t));
	if (!*t)
		return ENOMEM;
	pthread_mutex_init(&(*t)->lock, NULL);
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
	/* A slot no MR ever had names no key in the cache: the newest one
	 * is given again, so failing gets (a device that refuses) do not
	 * spend the slot numbers. */
	if (!b->had_mr && b->slot + 1 == t->next_slot)
		t->next_slot--;
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
	if (t->next_slot >= MRMGR__DMABUF_MAX_SLOTS)
		return ENOSPC;
	b = calloc(1, sizeof(*b));
	if (!b)
		return ENOMEM;
	b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (b->fd < 0) {
		int err = errno;

		free(b);
		return err == EBADF ? EBADF : err == ENFILE ? ENFILE : EMFILE;
	}
	b->dev = st->st_dev;
	b->ino = st->st_ino;
	b->size = st->st_size > 0 ? (uint64_t)st->st_size : 0;
	b->slot = t->next_slot++;
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
	*key = MRMGR__DMABUF_KEY_BIT | (b->slot << MRMGR__DMABUF_SLOT_SHIFT) |
	       offset;
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
	uint64_t slot = (key & ~MRMGR__DMABUF_KEY_BIT) >> MRMGR__DMABUF_SLOT_SHIFT;
	uint64_t off = key & (MRMGR__DMABUF_MAX_OFFSET - 1);
	struct mrmgr__dmabuf_buf *b;
	struct mr_rec *rec;
	int ret;

	*mr = NULL;
	if (!(key & MRMGR__DMABUF_KEY_BIT))
		return EINVAL; /* a host address given to a dma-buf cache */
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
		b->had_mr = 1;
		rec->mr = *mr;
		rec->b = b;
		rec->next = t->mrs;
		t->mrs = rec;
		rec = NULL;
	}
	maybe_close(t, b);
	pthread_mutex_unlock(&t->lock);
	free(rec);
	return ret;
}

static int dmabuf_dereg(void *ctx, const struct mrmgr_device_ops *ops,
			struct ibv_mr *mr)
{
	struct mrmgr__dmabuf_tbl *t = ctx;
	struct mr_rec *rec = NULL;
	int ret = mrmgr__dev_dereg_mr(ops, mr);

	if (ret)
		return ret; /* the MR may live: its buffer stays held */
	pthread_mutex_lock(&t->lock);
	for (struct mr_rec **pp = &t->mrs; *pp; pp = &(*pp)->next) {
		if ((*pp)->mr == mr) {
			rec = *pp;
			*pp = rec->next;
			break;
		}
	}
	if (rec) {
		rec->b->nmrs--;
		maybe_close(t, rec->b);
	}
	pthread_mutex_unlock(&t->lock);
	free(rec);
	return 0;
}

/* The cache is gone: what an abandoned MR (a deregistration that never
 * succeeded) still held is closed too. */
static void dmabuf_fini(void *ctx)
{
	struct mrmgr__dmabuf_tbl *t = ctx;

	while (t->mrs) {
		struct mr_rec *rec = t->mrs;

		t->mrs = rec->next;
		free(rec);
	}
	while (t->bufs) {
		struct mrmgr__dmabuf_buf *b = t->bufs;

		t->bufs = b->next;
		close(b->fd);
		free(b);
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
}

const struct mrmgr__kind mrmgr__kind_dmabuf = {
	.name = "dma-buf",
	.id = MRMGR__KIND_DMABUF,
	.sources = 0, /* identity held by the duplicate: nothing to watch */
	.reg = dmabuf_reg,
	.dereg = dmabuf_dereg,
	.fini = dmabuf_fini,
};
