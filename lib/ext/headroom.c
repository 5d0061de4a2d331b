/*
 * Growth headroom: when a get grows a cached region, register more than
 * was asked, so that a buffer growing step by step costs O(log n)
 * registrations instead of one per step.
 *
 * The rule: the new registration is twice the grown span (the region and
 * the request together), and never
 *   - past the end of the mapping that holds the request (so never into a
 *     mapping with other protections, or memory the program did not map
 *     together with it),
 *   - over another cached region (that would be a merge nobody asked for),
 *   - beyond what fits the cache's byte limit as it stands (headroom never
 *     evicts anything) or the device's largest MR.
 * Only growth gets headroom: a request that overlaps a region and reaches
 * past it. A fresh miss, or one that merely touches a neighbour, registers
 * what it asked for.
 *
 * The mapping's bounds come from /proc/self/maps (os/vma.c), and growth
 * with headroom happens O(log n) times per growing buffer, so the read is
 * rare.
 *
 * The bounds are policy, never trusted for safety: the mapping may change
 * (a neighbour unmapped, another mapping put there) between this read and
 * the registration. The widened span is what the miss (or the rereg)
 * hands to watch_begin(), which classifies it afresh and watches all of
 * it (under userfaultfd the second look proves it registered; under a
 * two-sided source the filter holds the span before the classification)
 * before anything pins it, and what is pinned is exactly that span. So a
 * change after this read is either seen by the classification (a hole,
 * another kind: not cached) or reported (issue 21's review; both held
 * open by the test hook mrmgr__headroom_test_window, in
 * tests/unit/test_headroom_window.c). Turned off by MRMGR_CACHE_NO_HEADROOM or
 * MRMGR_GROW_HEADROOM=0.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "ext.h"
#include "grow.h"
#include "log.h"
#include "vma.h"

void (*mrmgr__headroom_test_window)(uint64_t s, uint64_t l);

/* The mapping containing addr: [*lo, *hi). 0, or ENOENT when nothing
 * maps addr (or the mappings cannot be read). */
static int mapping_of(uint64_t addr, uint64_t *lo, uint64_t *hi)
{
	struct mrmgr__vma v;

	if (mrmgr__vma_find(addr, 0, &v))
		return ENOENT;
	*lo = v.start;
	*hi = v.end;
	return 0;
}

void mrmgr__headroom_widen(struct mrmgr_cache *c, uint64_t os, uint64_t ol,
			   uint64_t *s, uint64_t *l)
{
	const struct mrmgr__core_view *v = mrmgr__core_view(c);
	uint64_t page_mask = ((uint64_t)1 << v->page_shift) - 1;
	uint64_t pinned = mrmgr__core_pinned_bytes(c);
	uint64_t span = *l - *s + 1, want, lo, hi;

	/*
	 * Twice the span, not twice the old region: a buffer that doubles
	 * at every step (a vector's growth) then registers every other step
	 * and 4/3 of its final size in all, where registering each step
	 * exactly costs one call per step and twice the final size (UCX's
	 * rcache). Growth a page at a time is the same either way. The
	 * bounds below (the mapping, the next region, the byte limit) keep
	 * it from reaching memory the program mapped apart or other buffers.
	 */
	if ((v->cfg_flags & MRMGR_CACHE_NO_HEADROOM) || span > UINT64_MAX / 2)
		return;
	/*
	 * Headroom registers memory the program did not ask for: only where
	 * every change to it reaches the cache before and after the kernel
	 * acts (monitor.c: mrmgr__mon_headroom_ok(); doc/growth.md).
	 */
	if (!mrmgr__mon_headroom_ok(c))
		return;
	want = span;
	/* What fits as things stand, counting the whole span as new. */
	if (pinned >= v->max_bytes ||
	    span >= v->max_bytes - pinned)
		return;
	if (want > v->max_bytes - pinned - span)
		want = (v->max_bytes - pinned - span) & ~page_mask;
	if (v->caps->max_mr_size) {
		if (span >= v->caps->max_mr_size)
			return;
		if (want > v->caps->max_mr_size - span)
			want = (v->caps->max_mr_size - span) & ~page_mask;
	}
	if (!want)
		return;

	if (*l > ol) {
		/* Grew upward: more above. */
		uint64_t end = *l + want < *l ? UINT64_MAX : *l + want;
		struct mrmgr_region *n;

		if (mapping_of(*l, &lo, &hi))
			return;
		if (end > hi - 1)
			end = hi - 1;
		n = mrmgr__core_first_overlap(c, *l + 1, end);
		if (n)
			end = mrmgr__rgn_start(n) - 1;
		if (end <= *l)
			return;
		mrmgr__core_count(c, headroom_bytes, end - *l);
		*l = end;
		if (mrmgr__headroom_test_window)
			mrmgr__headroom_test_window(*s, *l);
	} else if (*s < os) {
		/* Grew downward: more below. */
		uint64_t begin = *s > want ? *s - want : 0;
		struct mrmgr_region *n;

		if (mapping_of(*s, &lo, &hi))
			return;
		if (begin < lo)
			begin = lo;
		mrmgr__core_for_each_overlap(c, n, begin, *s - 1)
			if (mrmgr__rgn_last(n) + 1 > begin)
				begin = mrmgr__rgn_last(n) + 1;
		if (begin >= *s)
			return;
		mrmgr__core_count(c, headroom_bytes, *s - begin);
		*s = begin;
		if (mrmgr__headroom_test_window)
			mrmgr__headroom_test_window(*s, *l);
	}
}
