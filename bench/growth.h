/*
 * The growth patterns shared by bench/growth (libmrmgr's variants) and
 * bench/compare (libmrmgr against UCX): one buffer grown step by step,
 * under a registration cost of 10 us + 100 ns per 4 KiB page.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef BENCH_GROWTH_H
#define BENCH_GROWTH_H

#include <stddef.h>

#define GROWTH_PAGE ((size_t)4096)
#define GROWTH_REG_NS 10000          /* fixed cost of a registration */
#define GROWTH_REG_NS_PER_PAGE 100   /* plus this per page */
#define GROWTH_DOUBLING_STEPS 15     /* 4 KiB -> 64 MiB */
#define GROWTH_LINEAR_STEPS 10000    /* 4 KiB at a time */

/* The buffer's size at step i (1-based) of a pattern. */
static inline size_t growth_size_at(int doubling, size_t i)
{
	return doubling ? GROWTH_PAGE << (i - 1) : i * GROWTH_PAGE;
}

#endif /* BENCH_GROWTH_H */
