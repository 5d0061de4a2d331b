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

/*
 * LeakSanitizer scans the heap, stacks and globals, not anonymous
 * mappings: memory only a mapped block points to (a region's share set,
 * say) would be reported as leaked. The sanitizer runtime provides these
 * when it is in the process; elsewhere they are NULL and cost nothing.
 */
void __lsan_register_root_region(const void *p, size_t size)
	__attribute__((weak));
void __lsan_unregister_root_region(const void *p, size_t size)
	__attribute__((weak));

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
	if (__lsan_register_root_region)
		__lsan_register_root_region(p, size);
	return p;
}

void mrmgr__pool_free(void *p, size_t size)
{
	if (!p)
		return;
	if (size < BIG) {
		free(p);
		return;
	}
	size = round_up(size, HUGE);
	if (__lsan_unregister_root_region)
		__lsan_unregister_root_region(p, size);
	munmap(p, size);
}
