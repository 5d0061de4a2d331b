/*
 * Zeroed blocks for hot structures (see pool.h).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "compiler.h"
#include "pool.h"

/* From here on, a block is mapped on its own and may use huge pages. */
#define BIG ((size_t)256 << 10)
#define HUGE ((size_t)2 << 20)

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) & ~(to - 1);
}

void *mrmgr__pool_alloc(size_t size, int huge)
{
	char *p;
	size_t head;

	if (size < BIG) {
		size = round_up(size, MRMGR__CACHELINE);
		p = aligned_alloc(MRMGR__CACHELINE, size);
		if (p)
			memset(p, 0, size);
		return p;
	}
	size = round_up(size, HUGE);
	/* Map a huge page more and trim, so the block is huge-page aligned
	 * and every 2 MiB of it can be one huge page. */
	p = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	head = round_up((uintptr_t)p, HUGE) - (uintptr_t)p;
	if (head)
		munmap(p, head);
	munmap(p + head + size, HUGE - head);
	p += head;
	/* Hints: failure is fine. */
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
	madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
	(void)huge;
#endif
	return p;
}

void mrmgr__pool_free(void *p, size_t size)
{
	if (!p)
		return;
	if (size < BIG)
		free(p);
	else
		munmap(p, round_up(size, HUGE));
}
