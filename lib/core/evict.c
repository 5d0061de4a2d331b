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
 * since they were last looked at, so they are paid for by gets. A pick
 * that used its budget clearing used bits takes the first region it
 * cleared (the oldest of them, idle, and a region whose bit the hand
 * clears is CLOCK's next victim anyway): it never comes back empty while
 * an idle region is cached. Only when every region is held does the
 * caller register uncached.
 *
 * Ageing. Hits leave no time, only a bit, so the hand also moves as time
 * passes, as CLOCK's hand does: every new region moves it AGE_STEPS
 * regions on (mrmgr__evict_age()), clearing used bits and sending the
 * regions that had one to the back. A region whose only mark is "new"
 * keeps its place: it was appended when it was made, which is its last
 * use; a move would date it to now, ahead of regions made after it (and
 * cost writes to three cold links). The list then stays close to the
 * order of last use: a region hit before another was made sits ahead of
 * it, one hit after sits behind. New regions enter marked "new" (the
 * region's fresh field, set by the miss under the lock; only the hand,
 * under the lock too, clears it: no locked instruction, unlike the used
 * bits hits set in their words): the hand spares them as it
 * spares hit ones, so a region is never the next to go just because it is
 * new; but when a full turn finds every idle region marked, the oldest
 * region marked only new goes before those hit since the hand last
 * passed (a hit after a region was made is more recent than its making). How close to
 * least-recently-used this is, against an exact model over a random
 * trace: tests/unit/test_evict.c (lru_model).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "cache.h"
#include "evict.h"

#define EXAMINE 128 /* regions a pick looks at, at most */
#define WINDOW 8    /* cold idle regions weighed against each other */
#define RECHECK 2   /* held regions looked at again on every pick */
#define AGE_STEPS 2 /* regions the ageing hand passes per new region */

static struct mrmgr_region *region_of(struct mrmgr__lru_link *l)
{
	return mrmgr__container_of(l, struct mrmgr_region, lru);
}

/* c, not r->cache: the hand's regions are otherwise read only in their
 * link's line and their reference words, not the line holding cache. */
static void move_to_back(struct mrmgr_cache *c, struct mrmgr__lru_link *head,
			 struct mrmgr_region *r)
{
	mrmgr__evict_unlinking(&c->age_hand, &r->lru);
	r->lru.prev->next = r->lru.next;
	r->lru.next->prev = r->lru.prev;
	r->lru.prev = head->prev;
	r->lru.next = head;
	head->prev->next = &r->lru;
	head->prev = &r->lru;
}

void mrmgr__evict_age(struct mrmgr_cache *c)
{
	for (int i = 0; i < AGE_STEPS; i++) {
		struct mrmgr__lru_link *l = c->age_hand;
		struct mrmgr_region *r;

		if (!l || l == &c->lru)
			l = c->lru.next; /* round the clock */
		if (l == &c->lru)
			return;
		r = region_of(l);
		if (mrmgr__region_take_used(r, c->nstripes) == 2)
			move_to_back(c, &c->lru, r); /* the hand moves on */
		else
			c->age_hand = l->next;
	}
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
	uint64_t b;

	if (!p->shortfall) {
		if (!p->fit) /* the oldest: plain CLOCK order */
			p->fit = r;
		return 1;
	}
	b = mrmgr__evict_bytes(r);
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
	struct mrmgr_region *first = NULL; /* the first this pick spared */
	struct mrmgr_region *first_new = NULL; /* ...for being new, not hit */
	int lapped = 0, used;
	struct mrmgr__lru_link *l;

	/* Holders come and go: give the oldest held regions back to the
	 * clock when they are idle now. */
	for (int i = 0; i < RECHECK && c->held.next != &c->held; i++) {
		struct mrmgr_region *r = region_of(c->held.next);

		move_to_back(c,
			     mrmgr__region_refs_checked(c, r, "evicting")
				     ? &c->held
				     : &c->lru,
			     r);
	}
	/*
	 * Regions given a second chance during this round of evictions
	 * (one mrmgr__core_make_room()) are weighed only when nothing else
	 * is idle: a region used since the hand last passed survives the
	 * round, however big. The hand goes round the clock: past the
	 * newest region it comes back to the oldest, and once it is back at
	 * the first region it spared in this pick, every idle region was
	 * used: it weighs them in the order it spared them (oldest first;
	 * under the byte limit, a window of them by size). So an idle
	 * region always turns up, however many were hit.
	 */
	for (l = c->lru.next; budget; ) {
		struct mrmgr_region *r;

		if (l == &c->lru) {
			l = l->next; /* round the clock */
			if (l == &c->lru)
				break;
			continue;
		}
		r = region_of(l);
		if (r == first) {
			if (lapped)
				break;
			lapped = 1; /* a full turn: every idle one was used */
			if (!shortfall && first_new)
				break; /* the oldest only made, not hit */
		}
		l = l->next;
		/* A sum below zero (a double put) is reported and undone by
		 * the checked sum: then the region is idle after all. */
		if (mrmgr__region_look(r, c->nstripes, &used) &&
		    mrmgr__region_refs_checked(c, r, "evicting")) {
			/* Paid for by the get that took it: no budget. */
			move_to_back(c, &c->held, r);
			continue;
		}
		budget--;
		if (used) {
			r->spared = round; /* a second chance */
			if (!first)
				first = r;
			if (used == 1 && !first_new)
				first_new = r;
			move_to_back(c, &c->lru, r);
			if (l == &c->lru) /* it was the newest */
				l = &r->lru;
		} else if (r->spared == round) {
			if (consider(&spared, r) && lapped)
				break;
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
			move_to_back(c, &c->lru, r);
			if (consider(&p, r))
				break;
		}
	}
	if (!shortfall && !p.fit && !p.big && first_new)
		return first_new;
	if (!p.fit && !p.big)
		p = spared;
	if (!p.fit && !p.big) /* every idle region was used: the oldest */
		return first_new ? first_new : first;
	return p.fit ? p.fit : p.big;
}
