/*
 * Registration accounting in one place: a registration's counters and
 * the regions and pinned bytes the limits count.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "config_env.h"
#include "core.h"
#include "evict.h"
#include "ext.h"
#include "hit.h"
#include "log.h"

/* A registration's counters and debug line; lock held. */
void mrmgr__core_reg_done(struct mrmgr_cache *c, uint64_t start, uint64_t len,
			  unsigned int access, int ret)
{
	if (!ret) {
		c->st.registrations++;
		c->st.pages_registered += len >> c->page_shift;
	}
	mrmgr__dbg("reg [%#llx, +%llu) access %#x: %s",
		   (unsigned long long)start, (unsigned long long)len, access,
		   ret ? strerror(ret) : "ok");
}

/* Count (sign 1) or uncount (-1) a pinned registration of len bytes. */
void mrmgr__core_account_reg(struct mrmgr_cache *c, int kind, uint64_t len,
			     int sign)
{
	if (sign > 0) {
		c->nregions++;
		if (kind != MRMGR__REGION_PINNED)
			return;
		c->pinned_bytes += len;
		if (c->pinned_bytes > c->st.peak_pinned_bytes)
			c->st.peak_pinned_bytes = c->pinned_bytes;
	} else {
		c->nregions--;
		if (kind == MRMGR__REGION_PINNED)
			c->pinned_bytes -= len;
	}
}
