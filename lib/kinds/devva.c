/*
 * Kind three: device virtual addresses of a memory domain (devva.h has
 * the key space and the event source). The registration operation asks
 * the domain which allocation holds the key, exports it as a dma-buf
 * once per allocation (the descriptor kept while an MR of it lives, so
 * the buffer cannot go away under the MR) and registers the dma-buf with
 * the device seam's reg_dmabuf_mr, iova = the device VA.
 *
 * One mutex guards the table: allocations by (base, buffer id), MRs to
 * their allocation. The lists are short (allocations with live MRs).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "device.h"
#include "devva.h"
#include "kind.h"
#include "mr_record.h"

__thread int mrmgr__devva_entry;
__thread uint64_t mrmgr__devva_va;

struct alloc {
	uint64_t base, size, id;
	int fd;             /* the domain's export, ours */
	int stale;          /* its buffer id changed: found no more */
	uint64_t pins;      /* registrations under way */
	uint64_t nmrs;      /* live MRs */
	struct alloc *next;
};

struct mrmgr__devva_tbl {
	pthread_mutex_t lock;
	pthread_mutex_t vlock; /* one validation at a time */
	struct mrmgr_domain *dom;
	struct alloc *allocs;
	struct mrmgr__kind_mr *mrs; /* owner: the allocation */
	uint64_t nfds;
	uint64_t validated;    /* the free count last validated at */
};

int mrmgr__devva_tbl_new(struct mrmgr_domain *d, struct mrmgr__devva_tbl **t)
{
	*t = calloc(1, sizeof(**t));
	if (!*t)
		return ENOMEM;
	(*t)->dom = d;
	(*t)->validated = mrmgr__domain_frees(d);
	pthread_mutex_init(&(*t)->lock, NULL);
	pthread_mutex_init(&(*t)->vlock, NULL);
	return 0;
}

uint64_t *mrmgr__devva_validated(struct mrmgr__devva_tbl *t)
{
	return &t->validated;
}

struct mrmgr_domain *mrmgr__devva_domain(struct mrmgr__devva_tbl *t)
{
	return t->dom;
}

void mrmgr__devva_lock(struct mrmgr__devva_tbl *t, int lock)
{
	if (lock)
		pthread_mutex_lock(&t->vlock);
	else
		pthread_mutex_unlock(&t->vlock);
}

/* Lock held: close and forget a when nothing holds it any more. */
static void maybe_close(struct mrmgr__devva_tbl *t, struct alloc *a)
{
	if (a->pins || a->nmrs)
		return;
	for (struct alloc **pp = &t->allocs; *pp; pp = &(*pp)->next) {
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	}
	close(a->fd);
	t->nfds--;
	free(a);
}

/* Lock held: the allocations (all, or those holding va) whose buffer id
 * changed, marked stale, their ranges appended. */
static int stale_walk(struct mrmgr__devva_tbl *t, int all, uint64_t va,
		      uint64_t **ranges, size_t *n)
{
	struct mrmgr_domain *d = t->dom;
	int ret = 0;

	for (struct alloc *a = t->allocs; a; a = a->next) {
		uint64_t *v;

		if (a->stale || (!all && (va < a->base || va - a->base >= a->size)))
			continue;
		if (!all)
			__atomic_fetch_add(&d->validations, 1, __ATOMIC_RELAXED);
		if (d->ops.valid(d->ctx, a->base, a->id))
			continue;
		v = realloc(*ranges, (*n + 1) * 2 * sizeof(*v));
		if (!v) {
			ret = ENOMEM;
			break;
		}
		*ranges = v;
		v[2 * *n] = a->base;
		v[2 * *n + 1] = a->size;
		(*n)++;
		a->stale = 1;
	}
	return ret;
}

int mrmgr__devva_stale(struct mrmgr__devva_tbl *t, uint64_t **ranges,
		       size_t *n)
{
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = stale_walk(t, 1, 0, ranges, n);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int mrmgr__devva_stale_at(struct mrmgr__devva_tbl *t, uint64_t va,
			  uint64_t **ranges, size_t *n)
{
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = stale_walk(t, 0, va, ranges, n);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

uint64_t mrmgr__devva_fds(struct mrmgr__devva_tbl *t)
{
	uint64_t n;

	pthread_mutex_lock(&t->lock);
	n = t->nfds;
	pthread_mutex_unlock(&t->lock);
	return n;
}

/* The allocation (base, id), pinned; exported when the table has none. */
static int pin_alloc(struct mrmgr__devva_tbl *t, uint64_t base,
		     uint64_t size, uint64_t id, struct alloc **out)
{
	const struct mrmgr_domain *d = t->dom;
	struct alloc *a, *n;
	int fd = -1, ret;

	pthread_mutex_lock(&t->lock);
	for (a = t->allocs; a; a = a->next)
		if (!a->stale && a->base == base && a->id == id)
			break;
	if (a)
		a->pins++;
	pthread_mutex_unlock(&t->lock);
	if (a) {
		*out = a;
		return 0;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return ENOMEM;
	ret = d->ops.export_dmabuf(d->ctx, base, size, &fd);
	if (ret || fd < 0) {
		free(n);
		return ret ? ret : EIO;
	}
	n->base = base;
	n->size = size;
	n->id = id;
	n->fd = fd;
	n->pins = 1;
	pthread_mutex_lock(&t->lock);
	/* Another thread may have exported it meanwhile: one descriptor
	 * per allocation. */
	for (a = t->allocs; a; a = a->next)
		if (!a->stale && a->base == base && a->id == id)
			break;
	if (a) {
		a->pins++;
	} else {
		n->next = t->allocs;
		t->allocs = n;
		t->nfds++;
		a = n;
		n = NULL;
	}
	pthread_mutex_unlock(&t->lock);
	if (n) {
		close(n->fd);
		free(n);
	}
	*out = a;
	return 0;
}

static int devva_reg(void *ctx, const struct mrmgr_device_ops *ops,
		     struct ibv_pd *pd, uint64_t key, uint64_t len,
		     int access, struct ibv_mr **mr)
{
	struct mrmgr__devva_tbl *t = ctx;
	const struct mrmgr_domain *d = t->dom;
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE) - 1;
	uint64_t base, size, id, off, end;
	struct mrmgr__kind_mr *rec;
	struct alloc *a;
	int ret;

	*mr = NULL;
	if (!mrmgr__devva_entry)
		return EINVAL; /* mrmgr_get() on a device cache */
	/* The get's own address: the core widened the request to pages,
	 * and a page-aligned key may lie before a small allocation. */
	ret = d->ops.query(d->ctx, mrmgr__devva_va, &base, &size, &id);
	if (ret)
		return ret;
	/* The span must be the allocation's pages: one reaching a
	 * neighbouring allocation (a merge; device caches ask for none) is
	 * refused with EFAULT, on which the core registers the request
	 * alone. */
	end = key + len;
	if (key < (base & ~page) || end > ((base + size + page) & ~page))
		return EFAULT;
	off = key > base ? key - base : 0;
	if (end > base + size)
		end = base + size;
	len = end - (base + off);
	rec = malloc(sizeof(*rec));
	if (!rec)
		return ENOMEM;
	ret = pin_alloc(t, base, size, id, &a);
	if (ret) {
		free(rec);
		return ret;
	}
	ret = mrmgr__dev_reg_dmabuf_mr(ops, pd, off, (size_t)len, base + off,
				       a->fd, access, mr);
	pthread_mutex_lock(&t->lock);
	a->pins--;
	if (!ret) {
		a->nmrs++;
		mrmgr__kind_mr_push(&t->mrs, rec, *mr, a);
		rec = NULL;
	}
	maybe_close(t, a);
	pthread_mutex_unlock(&t->lock);
	free(rec);
	return ret;
}

static void devva_released(void *ctx, void *owner)
{
	struct alloc *a = owner;

	a->nmrs--;
	maybe_close(ctx, a);
}

/* The record goes first, while the MR lives (mr_record.c says why). */
static int devva_dereg(void *ctx, const struct mrmgr_device_ops *ops,
		       struct ibv_mr *mr)
{
	struct mrmgr__devva_tbl *t = ctx;

	return mrmgr__kind_mr_dereg(&t->lock, &t->mrs, ops, mr,
				    devva_released, t);
}

static void devva_fini(void *ctx)
{
	struct mrmgr__devva_tbl *t = ctx;

	mrmgr__kind_mr_free_all(&t->mrs);
	while (t->allocs) {
		struct alloc *a = t->allocs;

		t->allocs = a->next;
		close(a->fd);
		free(a);
	}
	__atomic_fetch_sub(&t->dom->users, 1, __ATOMIC_RELEASE);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->vlock);
	free(t);
}

const struct mrmgr__kind mrmgr__kind_devva = {
	.name = "device VA",
	.id = MRMGR__KIND_DEVICE_VA,
	.sources = MRMGR__KIND_SRC_DOMAIN,
	.reg = devva_reg,
	.dereg = devva_dereg,
	.fini = devva_fini,
};
