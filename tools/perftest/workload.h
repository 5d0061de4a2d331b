/*
 * The message-passing workload of examples/demo and mrmgr_perftest(1):
 * many messages from a set of buffers, each message a slice of one buffer
 * that needs a registration for a moment. Skewed (a few hot buffers, a
 * long tail); now and then a buffer is freed and mapped afresh, and now
 * and then one grows (mremap, contents kept), as a middleware send path
 * sees. Deterministic for a seed.
 *
 * Not part of libmrmgr: compiled into the programs that use it.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_WORKLOAD_H
#define MRMGR_WORKLOAD_H

#include <stddef.h>

struct workload_attr {
	int nbuf;             /* buffers */
	size_t buflen;        /* initial length of each, a page multiple */
	unsigned int seed;
	long remap_every;     /* every Nth message frees and remaps a buffer (0: never) */
	long grow_every;      /* every Nth message doubles a buffer (0: never) */
	unsigned int max_growth; /* a buffer grows to at most this many buflens */
};

/* Called before the workload unmaps or moves [addr, addr+len). */
typedef void (*workload_unmap_fn)(void *arg, void *addr, size_t len);

struct workload;

/* The demo's workload: 48 buffers of 256 KiB, a remap every 1000
 * messages, a growth every 700 up to 4x. */
void workload_default_attr(struct workload_attr *attr);
/* Most bytes the workload maps at once. */
size_t workload_footprint(const struct workload_attr *attr);
/* 0 or an errno. @before_unmap may be NULL. */
int workload_create(const struct workload_attr *attr,
		    workload_unmap_fn before_unmap, void *arg,
		    struct workload **wl);
/*
 * Message @m: first the remap or growth due at @m, then a slice of a
 * buffer in *addr, *len. 0 or an errno (mmap/mremap failed).
 */
int workload_next(struct workload *wl, long m, char **addr, size_t *len);
/* Remaps and growths done so far. */
void workload_counts(const struct workload *wl, long *remaps, long *growths);
/* Unmaps every buffer (calling before_unmap for each) and frees @wl. */
void workload_destroy(struct workload *wl);

#endif
