/*
 * Growth headroom: when a get grows a cached region, register more than
 * was asked, so that a buffer growing step by step costs O(log n)
 * registrations instead of one per step.
 *
 * The rule: the new registration is at least twice the region it grows
 * (geometric), and never
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
 * The mapping's bounds come from /proc/self/maps, read only here, and
 * growth with headroom happens O(log n) times per growing buffer, so the
 * read is rare. Turned off by MRMGR_CACHE_NO_HEADROOM or
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

#include "cache.h"
#include "grow.h"
#include "log.h"
#include "monitor.h"

/*
 * The mapping containing addr: [*lo, *hi). Returns 0, or ENOENT when
 * nothing maps addr (or the file cannot be read). Lines are read into a
 * stack buffer (no allocation) and the file is left as soon as the
 * mappings, sorted by address, pass addr.
 */
static int mapping_of(uint64_t addr, uint64_t *lo, uint64_t *hi)
{
	char buf[4096];
	size_t have = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return ENOENT;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *line, *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		line = buf;
		while ((nl = memchr(line, '\n', (size_t)(buf + have - line)))) {
			char *end;
			unsigned long long l = strtoull(line, &end, 16), h;

			*nl = '\0';
			h = *end == '-' ? strtoull(end + 1, NULL, 16) : 0;
			if (addr >= l && addr < h) {
				close(fd);
				*lo = l;
				*hi = h;
				return 0;
			}
			if (l > addr)
				goto out;
			line = nl + 1;
		}
		have = (size_t)(buf + have - line);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			have = 0; /* no line is that long; skip it */
	}
out:
	close(fd);
	return ENOENT;
}

void mrmgr__headroom_widen(struct mrmgr_cache *c, uint64_t os, uint64_t ol,
			   uint64_t *s, uint64_t *l)
{
	uint64_t page_mask = ((uint64_t)1 << c->page_shift) - 1;
	uint64_t old_len = ol - os + 1, span = *l - *s + 1, want, lo, hi;

	if ((c->cfg.flags & MRMGR_CACHE_NO_HEADROOM) ||
	    old_len > UINT64_MAX / 2 || 2 * old_len <= span)
		return; /* off, or the request itself at least doubles */
	/*
	 * Headroom registers memory the program did not ask for: only where
	 * every change to it reaches the cache before and after the kernel
	 * acts (monitor.c: mrmgr__mon_headroom_ok(); doc/growth.md).
	 */
	if (!mrmgr__mon_headroom_ok(c))
		return;
	want = 2 * old_len - span;
	/* What fits as things stand, counting the whole span as new. */
	if (c->pinned_bytes >= c->cfg.max_bytes ||
	    span >= c->cfg.max_bytes - c->pinned_bytes)
		return;
	if (want > c->cfg.max_bytes - c->pinned_bytes - span)
		want = (c->cfg.max_bytes - c->pinned_bytes - span) & ~page_mask;
	if (c->caps.max_mr_size) {
		if (span >= c->caps.max_mr_size)
			return;
		if (want > c->caps.max_mr_size - span)
			want = (c->caps.max_mr_size - span) & ~page_mask;
	}
	if (!want)
		return;

	if (*l > ol) {
		/* Grew upward: more above. */
		uint64_t end = *l + want < *l ? UINT64_MAX : *l + want;
		struct mrmgr__itree_node *n;

		if (mapping_of(*l, &lo, &hi))
			return;
		if (end > hi - 1)
			end = hi - 1;
		n = mrmgr__itree_first_overlap(&c->tree, *l + 1, end);
		if (n)
			end = n->start - 1;
		if (end <= *l)
			return;
		c->st.headroom_bytes += end - *l;
		*l = end;
	} else if (*s < os) {
		/* Grew downward: more below. */
		uint64_t begin = *s > want ? *s - want : 0;

		if (mapping_of(*s, &lo, &hi))
			return;
		if (begin < lo)
			begin = lo;
		for (struct mrmgr__itree_node *n =
			     mrmgr__itree_first_overlap(&c->tree, begin, *s - 1);
		     n; n = mrmgr__itree_next_overlap(n, begin, *s - 1))
			if (n->last + 1 > begin)
				begin = n->last + 1;
		if (begin >= *s)
			return;
		c->st.headroom_bytes += *s - begin;
		*s = begin;
	}
}
