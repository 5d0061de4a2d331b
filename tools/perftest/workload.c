/*
 * The message-passing workload (workload.h).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "workload.h"

#define HOT 8 /* the hot buffers: three messages in four go to them */

struct workload {
	struct workload_attr a;
	workload_unmap_fn before_unmap;
	void *arg;
	unsigned int seed;
	long remaps, growths;
	char **buf;
	size_t *len;
};

void workload_default_attr(struct workload_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->nbuf = 48;
	attr->buflen = 256 * 1024;
	attr->seed = 42;
	attr->remap_every = 1000;
	attr->grow_every = 700;
	attr->max_growth = 4;
}

/* Growth picks among the hot buffers, one at a time, so at most HOT of
 * them are ever grown. */
size_t workload_footprint(const struct workload_attr *a)
{
	int grown = a->grow_every && a->max_growth > 1
			    ? (a->nbuf < HOT ? a->nbuf : HOT) : 0;

	return (size_t)(a->nbuf - grown) * a->buflen +
	       (size_t)grown * a->buflen * (a->max_growth > 1 ? a->max_growth : 1);
}

static char *map_filled(size_t len, int fill)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, fill, len);
	return p;
}

int workload_create(const struct workload_attr *attr,
		    workload_unmap_fn before_unmap, void *arg,
		    struct workload **out)
{
	struct workload *wl;

	if (attr->nbuf < 1 || attr->buflen < 2)
		return EINVAL;
	wl = calloc(1, sizeof(*wl));
	if (!wl)
		return ENOMEM;
	wl->a = *attr;
	wl->before_unmap = before_unmap;
	wl->arg = arg;
	wl->seed = attr->seed;
	wl->buf = calloc((size_t)attr->nbuf, sizeof(*wl->buf));
	wl->len = calloc((size_t)attr->nbuf, sizeof(*wl->len));
	if (!wl->buf || !wl->len) {
		workload_destroy(wl);
		return ENOMEM;
	}
	for (int i = 0; i < attr->nbuf; i++) {
		wl->buf[i] = map_filled(attr->buflen, i);
		if (!wl->buf[i]) {
			int err = errno;

			workload_destroy(wl);
			return err;
		}
		wl->len[i] = attr->buflen;
	}
	*out = wl;
	return 0;
}

/* The application frees a buffer and maps a new one. */
static int remap(struct workload *wl, int v)
{
	if (wl->before_unmap)
		wl->before_unmap(wl->arg, wl->buf[v], wl->len[v]);
	munmap(wl->buf[v], wl->len[v]);
	wl->len[v] = wl->a.buflen;
	wl->buf[v] = map_filled(wl->len[v], v);
	if (!wl->buf[v])
		return errno;
	wl->remaps++;
	return 0;
}

/* A buffer doubles (realloc of a large block: mremap, maybe moved); one
 * grown to the most starts again from buflen. */
static int grow(struct workload *wl, int v)
{
	size_t nlen = wl->len[v] * 2;
	char *p;

	if (nlen > wl->a.buflen * wl->a.max_growth)
		return remap(wl, v);
	if (wl->before_unmap)
		wl->before_unmap(wl->arg, wl->buf[v], wl->len[v]);
	p = mremap(wl->buf[v], wl->len[v], nlen, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return errno;
	memset(p + wl->len[v], v, nlen - wl->len[v]);
	wl->buf[v] = p;
	wl->len[v] = nlen;
	wl->growths++;
	return 0;
}

int workload_next(struct workload *wl, long m, char **addr, size_t *len)
{
	int nbuf = wl->a.nbuf, hot = nbuf < HOT ? nbuf : HOT, b, ret;
	size_t off, blen;

	if (m && wl->a.remap_every && m % wl->a.remap_every == 0 &&
	    (ret = remap(wl, rand_r(&wl->seed) % nbuf)))
		return ret;
	if (m && wl->a.grow_every && wl->a.max_growth > 1 &&
	    m % wl->a.grow_every == 0 && (ret = grow(wl, rand_r(&wl->seed) % hot)))
		return ret;
	/* Skewed: a few hot buffers, a long tail. */
	b = (rand_r(&wl->seed) % 4) ? rand_r(&wl->seed) % hot
				    : rand_r(&wl->seed) % nbuf;
	blen = wl->len[b];
	off = (size_t)rand_r(&wl->seed) % (blen / 2);
	*addr = wl->buf[b] + off;
	*len = 1 + (size_t)rand_r(&wl->seed) % (blen - off);
	return 0;
}

void workload_counts(const struct workload *wl, long *remaps, long *growths)
{
	*remaps = wl->remaps;
	*growths = wl->growths;
}

void workload_destroy(struct workload *wl)
{
	if (!wl)
		return;
	for (int i = 0; wl->buf && i < wl->a.nbuf; i++) {
		if (!wl->buf[i])
			continue;
		if (wl->before_unmap)
			wl->before_unmap(wl->arg, wl->buf[i], wl->len[i]);
		munmap(wl->buf[i], wl->len[i]);
	}
	free(wl->buf);
	free(wl->len);
	free(wl);
}
