/*
 * Zeroed, cache-line-aligned memory for the cache's hot structures (the
 * lookup index, region slabs). Large blocks come from mmap with
 * transparent huge pages requested, so the hit path's random accesses
 * over many regions do not also miss the TLB on every one.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__POOL_H
#define MRMGR__POOL_H

#include <stddef.h>

/*
 * size bytes, zeroed, aligned to a cache line; from 256 KiB on, mapped on
 * their own and aligned to 2 MiB (and to their size up to that), on huge
 * pages if huge (a hint), else on small pages. NULL when out of memory.
 */
void *mrmgr__pool_alloc(size_t size, int huge);
/* Give back a block of mrmgr__pool_alloc(size). */
void mrmgr__pool_free(void *p, size_t size);

#endif /* MRMGR__POOL_H */
