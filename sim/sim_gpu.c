/*
 * A simulated device allocator, a memory domain for tests and tools
 * (include/mrmgr/sim.h, mrmgr_sim_gpu_*): device virtual addresses from
 * a range no host mapping uses here, each allocation backed by a memfd
 * (its dma-buf: the export is a duplicate of it), a buffer id never
 * given twice, addresses given again after a free (the most recently
 * freed range of the same size first, as device allocators do),
 * allocations of several segments (one VA range, one buffer), and
 * deferred frees (the allocation is gone at once, its address given
 * again only after mrmgr_sim_gpu_sync()).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mrmgr/mrmgr.h"
#include "mrmgr/sim.h"

#define GPU_VA_BASE 0x200000000000ull  /* under 2^48: the hash index's */
#define GPU_ALIGN (64 * 1024ull)

struct gpu_alloc {
	uint64_t va, size, id;
	unsigned int nseg;
	int fd;
	struct gpu_alloc *next;
};

struct gpu_hole {
	uint64_t va, size;
	int deferred;   /* not given again before mrmgr_sim_gpu_sync() */
	struct gpu_hole *next;
};

struct mrmgr_sim_gpu {
	pthread_mutex_t lock;
	struct gpu_alloc *allocs;
	struct gpu_hole *holes;   /* most recently freed first */
	uint64_t next_va, next_id;
	uint64_t frees;           /* the domain's free counter */
};

/* Lock held. */
static struct gpu_alloc *find(struct mrmgr_sim_gpu *g, uint64_t va)
{
	for (struct gpu_alloc *a = g->allocs; a; a = a->next)
		if (va >= a->va && va - a->va < a->size)
			return a;
	return NULL;
}

static int gpu_query(void *ctx, uint64_t va, uint64_t *base, uint64_t *size,
		     uint64_t *id)
{
	struct mrmgr_sim_gpu *g = ctx;
	struct gpu_alloc *a;

	pthread_mutex_lock(&g->lock);
	a = find(g, va);
	if (a) {
		*base = a->va;
		*size = a->size; /* every segment: the whole allocation */
		*id = a->id;
	}
	pthread_mutex_unlock(&g->lock);
	return a ? 0 : ENOENT;
}

static int gpu_valid(void *ctx, uint64_t base, uint64_t id)
{
	struct mrmgr_sim_gpu *g = ctx;
	struct gpu_alloc *a;
	int ok;

	pthread_mutex_lock(&g->lock);
	a = find(g, base);
	ok = a && a->va == base && a->id == id;
	pthread_mutex_unlock(&g->lock);
	return ok;
}

static int gpu_export(void *ctx, uint64_t base, uint64_t size, int *fd)
{
	struct mrmgr_sim_gpu *g = ctx;
	struct gpu_alloc *a;
	int ret = 0;

	pthread_mutex_lock(&g->lock);
	a = find(g, base);
	if (!a || a->va != base || a->size != size)
		ret = ENOENT;
	else if ((*fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0)) < 0)
		ret = errno == ENFILE ? ENFILE : EMFILE;
	pthread_mutex_unlock(&g->lock);
	return ret;
}

static const uint64_t *gpu_counter(void *ctx)
{
	return &((struct mrmgr_sim_gpu *)ctx)->frees;
}

static const struct mrmgr_domain_ops gpu_ops = {
	.size = sizeof(gpu_ops),
	.name = "sim",
	.query = gpu_query,
	.valid = gpu_valid,
	.export_dmabuf = gpu_export,
	.free_counter = gpu_counter,
};

/* The caller makes the domain (mrmgr_domain_create(ops, gpu)): the sim
 * library takes nothing of libmrmgr's but the device seam. */
MRMGR_EXPORT const struct mrmgr_domain_ops *mrmgr_sim_gpu_ops(void)
{
	return &gpu_ops;
}

MRMGR_EXPORT int mrmgr_sim_gpu_open(struct mrmgr_sim_gpu **out)
{
	struct mrmgr_sim_gpu *g;

	if (!out)
		return EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return ENOMEM;
	pthread_mutex_init(&g->lock, NULL);
	g->next_va = GPU_VA_BASE;
	g->next_id = 1;
	*out = g;
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_gpu_close(struct mrmgr_sim_gpu *g)
{
	if (!g)
		return EINVAL;
	while (g->allocs) {
		struct gpu_alloc *a = g->allocs;

		g->allocs = a->next;
		close(a->fd);
		free(a);
	}
	while (g->holes) {
		struct gpu_hole *h = g->holes;

		g->holes = h->next;
		free(h);
	}
	pthread_mutex_destroy(&g->lock);
	free(g);
	return 0;
}

/* Lock held: a freed range of exactly size (not deferred), or a new one. */
static uint64_t take_va(struct mrmgr_sim_gpu *g, uint64_t size)
{
	for (struct gpu_hole **pp = &g->holes; *pp; pp = &(*pp)->next) {
		struct gpu_hole *h = *pp;

		if (!h->deferred && h->size == size) {
			uint64_t va = h->va;

			*pp = h->next;
			free(h);
			return va;
		}
	}
	g->next_va += size;
	return g->next_va - size;
}

MRMGR_EXPORT int mrmgr_sim_gpu_alloc(struct mrmgr_sim_gpu *g, size_t size,
				     unsigned int nseg, uint64_t *va)
{
	struct gpu_alloc *a;
	uint64_t len;

	if (!g || !size || !va || !nseg)
		return EINVAL;
	len = (size + GPU_ALIGN - 1) & ~(GPU_ALIGN - 1);
	a = calloc(1, sizeof(*a));
	if (!a)
		return ENOMEM;
	a->fd = memfd_create("mrmgr-sim-gpu", MFD_CLOEXEC);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)len) != 0) {
		int err = errno;

		if (a->fd >= 0)
			close(a->fd);
		free(a);
		return err;
	}
	a->size = len;
	a->nseg = nseg;
	pthread_mutex_lock(&g->lock);
	a->va = take_va(g, len);
	a->id = g->next_id++;
	a->next = g->allocs;
	g->allocs = a;
	pthread_mutex_unlock(&g->lock);
	*va = a->va;
	return 0;
}

static int gpu_free(struct mrmgr_sim_gpu *g, uint64_t va, int deferred)
{
	struct gpu_alloc *a = NULL;
	struct gpu_hole *h = malloc(sizeof(*h));

	if (!g || !h) {
		free(h);
		return g ? ENOMEM : EINVAL;
	}
	pthread_mutex_lock(&g->lock);
	for (struct gpu_alloc **pp = &g->allocs; *pp; pp = &(*pp)->next) {
		if ((*pp)->va == va) {
			a = *pp;
			*pp = a->next;
			break;
		}
	}
	if (a) {
		/* The counter moves before the address can be given again. */
		__atomic_fetch_add(&g->frees, 1, __ATOMIC_RELEASE);
		h->va = a->va;
		h->size = a->size;
		h->deferred = deferred;
		h->next = g->holes;
		g->holes = h;
		h = NULL;
	}
	pthread_mutex_unlock(&g->lock);
	free(h);
	if (!a)
		return EINVAL;
	close(a->fd); /* an exported dma-buf keeps the pages */
	free(a);
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_gpu_free(struct mrmgr_sim_gpu *g, uint64_t va)
{
	return gpu_free(g, va, 0);
}

MRMGR_EXPORT int mrmgr_sim_gpu_free_deferred(struct mrmgr_sim_gpu *g,
					     uint64_t va)
{
	return gpu_free(g, va, 1);
}

MRMGR_EXPORT int mrmgr_sim_gpu_sync(struct mrmgr_sim_gpu *g)
{
	if (!g)
		return EINVAL;
	pthread_mutex_lock(&g->lock);
	for (struct gpu_hole *h = g->holes; h; h = h->next)
		h->deferred = 0;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static int gpu_rw(struct mrmgr_sim_gpu *g, uint64_t va, void *buf,
		  size_t len, int write)
{
	struct gpu_alloc *a;
	ssize_t n = -1;

	if (!g || !buf || !len)
		return EINVAL;
	pthread_mutex_lock(&g->lock);
	a = find(g, va);
	if (a && len <= a->size - (va - a->va))
		n = write ? pwrite(a->fd, buf, len, (off_t)(va - a->va))
			  : pread(a->fd, buf, len, (off_t)(va - a->va));
	pthread_mutex_unlock(&g->lock);
	return n == (ssize_t)len ? 0 : EINVAL;
}

MRMGR_EXPORT int mrmgr_sim_gpu_write(struct mrmgr_sim_gpu *g, uint64_t va,
				     const void *src, size_t len)
{
	return gpu_rw(g, va, (void *)src, len, 1);
}

MRMGR_EXPORT int mrmgr_sim_gpu_read(struct mrmgr_sim_gpu *g, uint64_t va,
				    void *dst, size_t len)
{
	return gpu_rw(g, va, dst, len, 0);
}

MRMGR_EXPORT int mrmgr_sim_gpu_segments(struct mrmgr_sim_gpu *g,
					uint64_t va, unsigned int *nseg,
					uint64_t *seg_size)
{
	struct gpu_alloc *a;

	if (!g || !nseg || !seg_size)
		return EINVAL;
	pthread_mutex_lock(&g->lock);
	a = find(g, va);
	if (a) {
		*nseg = a->nseg;
		*seg_size = a->size / a->nseg;
	}
	pthread_mutex_unlock(&g->lock);
	return a ? 0 : ENOENT;
}
