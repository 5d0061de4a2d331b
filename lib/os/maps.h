/*
 * The one reader of /proc/self/maps' text, async-signal-safe: no
 * allocation (a stack buffer), no stdio, no lock, errno kept. vma.c reads
 * through it where the kernel has no PROCMAP_QUERY (or when asked for the
 * text), and the memory hooks call it from inside the calls they wrap
 * (shmdt(): what segment is attached where), where the ioctl's shared
 * descriptor, behind a lock, is no use.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__MAPS_H
#define MRMGR__MAPS_H

#include <stdint.h>

/* One mapping (VMA), as the kernel reports it. */
struct mrmgr__vma {
	uint64_t start, end;        /* [start, end) */
	uint64_t offset;            /* file offset of start */
	uint64_t inode;             /* 0: anonymous (or no file) */
	uint32_t dev_major, dev_minor;
	uint32_t flags;             /* enum mrmgr__vma_flags */
};

enum mrmgr__vma_flags {
	MRMGR__VMA_F_READ = 1u << 0,
	MRMGR__VMA_F_WRITE = 1u << 1,
	MRMGR__VMA_F_EXEC = 1u << 2,
	MRMGR__VMA_F_SHARED = 1u << 3,
	/* Anonymous memory: no file, or anonymous huge pages (MAP_HUGETLB
	 * without a file), which the kernel backs by a hugetlbfs inode. */
	MRMGR__VMA_F_ANON = 1u << 4,
};

/* The kernel names anonymous MAP_HUGETLB memory after this file. */
#define MRMGR__VMA_ANON_HUGE "/anon_hugepage"

/* Called for each mapping of a walk; nonzero stops it. */
typedef int (*mrmgr__vma_fn)(const struct mrmgr__vma *v, void *arg);

/*
 * Call fn for each mapping that ends after start and begins at or before
 * last, in address order, until fn returns nonzero, from the text.
 * Returns what fn returned, 0 when the mappings ran out, or a negative
 * errno when the file cannot be read. Async-signal-safe.
 */
int mrmgr__maps_walk(uint64_t start, uint64_t last, mrmgr__vma_fn fn,
		     void *arg);

/*
 * The SysV segment attached at a: the run of consecutive mappings of one
 * inode that begins at a. 1 with *end its end (exclusive), 0 when no
 * mapping begins at a, -1 when the mappings cannot be read.
 * Async-signal-safe.
 */
int mrmgr__maps_shm_extent(uint64_t a, uint64_t *end);

#endif /* MRMGR__MAPS_H */
