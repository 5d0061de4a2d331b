/*
 * A memory change seen from both of its sides, for sources that run in
 * the changing thread (the patch source's hooks): begin before the
 * kernel releases the pages, end after the call returned (also when it
 * failed: part of the range may have changed).
 *
 * Placeholder until the cache-side protocol lands: both sides report the
 * range through the filtered notification path (memory no cache ever
 * registered stops at the filter), so a cache drops an overlapping
 * region before the pages go and again after.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "monitor.h"

static void report(uint64_t start, uint64_t last)
{
	size_t len = (size_t)(last - start + 1);

	(void)mrmgr_notify_unmap((void *)(uintptr_t)start, len ? len : SIZE_MAX);
}

void mrmgr__mon_change_begin(uint64_t start, uint64_t last)
{
	report(start, last);
}

void mrmgr__mon_change_end(uint64_t start, uint64_t last)
{
	report(start, last);
}
