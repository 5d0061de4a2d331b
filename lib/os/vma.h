/*
 * The process's mappings: the one reader of /proc/self/maps (the
 * PROCMAP_QUERY ioctl where the kernel has it, Linux 6.11; the text
 * elsewhere) for every part of the library that asks what memory is
 * mapped where, and how.
 *
 * Nothing here allocates, logs or takes a lock, and the answers hold only
 * for the moment they were read: a caller that needs more (the monitor)
 * has its own way to learn of later changes.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__VMA_H
#define MRMGR__VMA_H

#include <stdint.h>

#include "maps.h"

/* How to read (walk flags). */
enum mrmgr__vma_how {
	MRMGR__VMA_TEXT = 1u << 0, /* the text even where the ioctl works
				    * (tests compare both) */
};

/*
 * Call fn for each mapping that ends after start and begins at or before
 * last, in address order, until fn returns nonzero. Returns what fn
 * returned, 0 when the mappings ran out, or a negative errno when the
 * mappings cannot be read.
 */
int mrmgr__vma_walk(uint64_t start, uint64_t last, unsigned int how,
		    mrmgr__vma_fn fn, void *arg);

/* The mapping that holds addr: 0, ENOENT when none does, or the errno
 * that kept the mappings from being read. */
int mrmgr__vma_find(uint64_t addr, unsigned int how, struct mrmgr__vma *v);

/*
 * Whether [start, last] is mapped, readable, and writable when write is
 * set: 0, EFAULT with *bad the first offending address and *why "not
 * mapped", "not readable" or "read-only", or another errno when it
 * cannot tell.
 */
int mrmgr__vma_check_prot(uint64_t start, uint64_t last, int write,
			  unsigned int how, uint64_t *bad, const char **why);

/*
 * The first readable (and writable, when write is set) mapped piece of
 * [from, last], as [*s, *e]: 0, ENOENT when there is none, or another
 * errno when it cannot tell.
 */
int mrmgr__vma_next_readable(uint64_t from, uint64_t last, int write,
			     unsigned int how, uint64_t *s, uint64_t *e);

/* What kind of memory a range is, worst first last (the monitor's
 * question: can a memory-event source vouch for it). */
enum mrmgr__vma_kind {
	MRMGR__VMA_ANON_PRIVATE = 0, /* anonymous private: heap, stack, mmap */
	MRMGR__VMA_FILE_PRIVATE,     /* private file mapping: .data, mmap'd files */
	MRMGR__VMA_SHARED,           /* shared: shmem, SysV, MAP_SHARED files */
	MRMGR__VMA_UNMAPPED,         /* a hole */
};
/* The worst kind over [start, last], and (when the outputs are not NULL)
 * the extent of the mappings covering it. */
int mrmgr__vma_classify(uint64_t start, uint64_t last, uint64_t *vstart,
			uint64_t *vlast);
/* PROCMAP_QUERY worked (mrmgr_cache_query_monitor() reports it). */
int mrmgr__vma_uses_query(void);

#endif /* MRMGR__VMA_H */
