/*
 * Growth: regions that must cover more, allow more access or move to
 * another PD, changed in place with ibv_rereg_mr() or by make-before-break.
 * grow.c holds the rereg contract and the per-device probe, headroom.c the
 * headroom policy, buf.c the growable buffers built on both.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__GROW_H
#define MRMGR__GROW_H

#include <stdint.h>

#include "ext.h"

struct mrmgr_cache;
struct mrmgr_region;

/* What a device does with ibv_rereg_mr(), learnt once per device. */
enum mrmgr__rereg_verdict {
	MRMGR__REREG_UNKNOWN = 0, /* not probed yet, or the probe could not run */
	MRMGR__REREG_YES,
	MRMGR__REREG_NO,
};

/* mrmgr__grow_miss(): the miss path goes on and registers [*rs, *rl]. */
#define MRMGR__GROW_PASS MRMGR__PLAN_GO_ON

/* The features as the core sees them (ext.h): growth (grow.c, with
 * headroom.c) and growable buffers (buf.c). */
extern const struct mrmgr__ext mrmgr__ext_grow;
extern const struct mrmgr__ext mrmgr__ext_buf;

/* Cache creation: learn whether the device can rereg (probe once). */
void mrmgr__grow_init(struct mrmgr_cache *c);

/*
 * A get missed and the merge span [*rs, *rl] (access *racc, requests
 * [as, al]) absorbs cached regions (mrmgr__core_joins()). When it absorbs exactly one, idle, region and the device can,
 * rereg that region in place: returns 0 with *out referenced on slot. Else
 * widens the span by the headroom policy when the request grows a region,
 * and returns MRMGR__GROW_PASS: the caller registers the span and detaches
 * what it covers (make-before-break). Lock held.
 */
int mrmgr__grow_miss(struct mrmgr_cache *c, uint64_t start, uint64_t last,
		     unsigned int slot, uint64_t *rs,
		     uint64_t *rl, unsigned int *racc, uint64_t as,
		     uint64_t al, struct mrmgr_region **out);

/*
 * Re-point a region the caller holds one reference on (taken on any slot;
 * dropped here on slot) at [start, start+len) with access, in the cache's
 * PD: in place when nobody else holds it and the device can, else a new
 * registration while other holders keep the old one (make-before-break).
 * *rp may be NULL (nothing held). On return *rp is the region now held, or
 * NULL with a positive errno. Lock held.
 */
int mrmgr__grow_held(struct mrmgr_cache *c, struct mrmgr_region **rp,
		     unsigned int slot, uint64_t start, uint64_t len,
		     unsigned int access);

/*
 * headroom.c: the request [*s, *l] grows the regions spanning [os, ol];
 * widen it geometrically within the mapping, the byte limit and free
 * address space between regions. Lock held.
 */
void mrmgr__headroom_widen(struct mrmgr_cache *c, uint64_t os, uint64_t ol,
			   uint64_t *s, uint64_t *l);
/*
 * Tests only (tests/unit/test_headroom_window.c): called, lock held, when
 * a span was widened, between the read of the mapping's bounds and the
 * watch that classifies the widened span [s, l] afresh: the window
 * headroom.c's argument is about, held open so that a test changes memory
 * there, as another thread could. NULL in production.
 */
extern void (*mrmgr__headroom_test_window)(uint64_t s, uint64_t l);

/* buf.c: every buffer of c follows a PD move. Returns the first error. */
int mrmgr__buf_follow_pd(struct mrmgr_cache *c);

#endif /* MRMGR__GROW_H */
