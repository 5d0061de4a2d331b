/*
 * Deregistrations that failed: kept and retried instead of abandoned.
 *
 * ibv_dereg_mr() can fail for a while (a memory window still bound, a
 * command interface that is busy or resetting). An MR given up on stays
 * registered, with its pages pinned, until the process exits. So a
 * failed one is remembered and tried again at the cache's next release
 * and at its destruction; only a failure at destruction abandons it, with
 * an error line. The cache's own accounting (regions, pinned_bytes)
 * forgets the MR at the first try: it no longer backs any region.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "log.h"

int mrmgr__core_dereg(struct mrmgr_cache *c, struct ibv_mr *mr,
		      const char *what)
{
	int ret = mrmgr__kind_dereg(c->kind, c->kind_ctx, c->ops, mr);

	if (!ret)
		return 0;
	if (c->ndeferred == c->deferred_cap) {
		size_t cap = c->deferred_cap ? 2 * c->deferred_cap : 8;
		struct ibv_mr **v = realloc(c->deferred, cap * sizeof(*v));

		if (!v) {
			mrmgr__err("deregistering %s failed: %s; out of memory "
				   "to retry it: the MR is abandoned", what,
				   strerror(ret));
			return ret;
		}
		c->deferred = v;
		c->deferred_cap = cap;
	}
	c->deferred[c->ndeferred++] = mr;
	mrmgr__err("deregistering %s failed: %s; retried later", what,
		   strerror(ret));
	return ret;
}

void mrmgr__cache_dereg_retry(struct mrmgr_cache *c, int last_chance)
{
	size_t kept = 0;

	for (size_t i = 0; i < c->ndeferred; i++) {
		struct ibv_mr *mr = c->deferred[i];
		int ret = mrmgr__kind_dereg(c->kind, c->kind_ctx, c->ops, mr);

		if (!ret) {
			c->st.deregistrations++;
			continue;
		}
		if (last_chance)
			mrmgr__err("deregistering the MR %p [%p, +%zu) failed "
				   "again: %s; the MR is abandoned", (void *)mr,
				   mr->addr, mr->length, strerror(ret));
		else
			c->deferred[kept++] = mr;
	}
	c->ndeferred = kept;
	if (last_chance) {
		free(c->deferred);
		c->deferred = NULL;
		c->deferred_cap = 0;
	}
}
