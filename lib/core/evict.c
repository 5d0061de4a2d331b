/*
 * Eviction policy: which idle region goes when a limit is reached.
 *
 * Recency. A CLOCK over the cache's list of cached regions, oldest first:
 * hits only set a "used" bit in their own reference word (region.h), and
 * the hand gives a region whose bit is set a second chance (clears the
 * bits, moves it to the back). A region the hand finds held (references
 * not summing to zero) moves to a second list, the held list, so that a
 * cache full of held regions does not make every miss walk all of them:
 * each pick looks at a couple of held regions again (oldest first) and
 * returns the idle ones to the clock, and looks at more when the clock
 * has nothing to offer.
 *
 * Size, under the byte limit. Evicting a region frees its bytes but loses
 * its registration, which costs a fixed amount plus a per-page amount to
 * make again. When the byte limit is what is short, the pick weighs the
 * first few cold idle regions the hand comes to (a window) and takes the
 * smallest one that alone frees the shortfall: one deregistration instead
 * of many, and no big region thrown away to make room for a small one.
 * When none in the window is big enough, it takes the biggest, and the
 * caller asks again for the rest. Only cold regions are weighed: a region
 * used since the hand last passed keeps its second chance for the whole
 * round of evictions that makes room for one registration, however big
 * (recency first, size among the cold). Under the region limit alone
 * every eviction frees the same (one region): plain CLOCK order.
 *
 * Bounds. A pick looks at no more than EXAMINE idle regions (the used
 * bits it clears were each set by a hit, so that work is paid for by
 * hits); the held regions it parks on the way were each taken by a get
 * since they were last looked at, so they are paid for by gets. When it
 * finds no candidate the caller registers uncached, as it does when
 * every region is held.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "cache.h"
#include "evict.h"

#define EXAMINE 128 /* regions a pick looks at, at most */
#define WINDOW 8    /* cold idle regions weighed against each other */
#define RECHECK 2   /* held regions looked at again on every pick */

static struct mrmgr_region *region_of(struct mrmgr__lru_link *l)
{
	return mrmgr__container_of(l, struct mrmgr_region, lru);
}

static void move_to_back(struct mrmgr__lru_link *head, struct mrmgr_region *r)
{
	r->lru.prev->next = r->lru.next;
	r->lru.next->prev = r->lru.prev;
	r->lru.prev = head->prev;
	r->lru.next = head;
	head->prev->next = &r->lru;
	head->prev = &r->lru;
}

uint64_t mrmgr__evict_bytes(const struct mrmgr_region *r)
{
	/* ODP regions pin nothing: max_bytes does not count them. */
	return r->kind == MRMGR__REGION_PINNED ? mrmgr__region_len(r) : 0;
}

struct pick {
	uint64_t shortfall;
	struct mrmgr_region *fit; /* smallest that frees the shortfall */
	struct mrmgr_region *big; /* biggest of the others */
	unsigned int window;
};

/* Weigh an idle cold region; returns 1 when the pick is decided. */
static int consider(struct pick *p, struct mrmgr_region *r)
{
	uint64_t b = mrmgr__evict_bytes(r);

	if (!p->shortfall) {
		if (!p->fit) /* the oldest: plain CLOCK order */
			p->fit = r;
		return 1;
	}
	if (b >= p->shortfall) {
		if (!p->fit || b < mrmgr__evict_bytes(p->fit))
			p->fit = r;
	} else if (!p->big || b > mrmgr__evict_bytes(p->big)) {
		p->big = r;
	}
	return ++p->window == WINDOW;
}

struct mrmgr_region *mrmgr__evict_pick(struct mrmgr_cache *c,
				       uint64_t shortfall)
{
	struct pick p = { .shortfall = shortfall };
	struct pick spared = { .shortfall = shortfall };
	unsigned int budget = EXAMINE;
	uint32_t round = c->evict_round;
	struct mrmgr__lru_link *l;

	/* Holders come and go: give the oldest held regions back to the
	 * clock when they are idle now. */
	for (int i = 0; i < RECHECK && c->held.next != &c->held; i++) {
		struct mrmgr_region *r = region_of(c->held.next);

		move_to_back(mrmgr__region_refs_checked(c, r, "evicting") ? &c->held
								: &c->lru,
			     r);
	}
	/*
	 * Regions given a second chance during this round of evictions
	 * (one mrmgr__cache_make_room()) are weighed only when nothing else
	 * is idle: a region used since the hand last passed survives the
	 * round, however big.
	 */
	for (l = c->lru.next; l != &c->lru && budget; ) {
		struct mrmgr_region *r = region_of(l);

		l = l->next;
		if (mrmgr__region_refs_checked(c, r, "evicting")) {
			/* Paid for by the get that took it: no budget. */
			move_to_back(&c->held, r);
			continue;
		}
		budget--;
		if (mrmgr__region_take_used(r, c->nstripes)) {
			r->spared = round; /* a second chance */
			move_to_back(&c->lru, r);
			/* It was the last: the hand comes to it again (as
			 * spared), so a lone used region can still go. */
			if (l == &c->lru)
				l = &r->lru;
		} else if (r->spared == round) {
			consider(&spared, r);
		} else if (consider(&p, r)) {
			break;
		}
	}
	if (!p.fit && !p.big) {
		/* Nothing on the clock: regions held a while ago may be
		 * idle by now. */
		for (l = c->held.next; l != &c->held && budget; budget--) {
			struct mrmgr_region *r = region_of(l);

			l = l->next;
			if (mrmgr__region_refs_checked(c, r, "evicting"))
				continue;
			move_to_back(&c->lru, r);
			if (consider(&p, r))
				break;
		}
	}
	if (!p.fit && !p.big)
		p = spared;
	return p.fit ? p.fit : p.big;
}
