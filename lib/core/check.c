/*
 * Puts that were never got: detecting a double mrmgr_put().
 *
 * A region's count is the sum of its stripes (region.h), and the fast
 * put only subtracts from the caller's stripe, so one put too many is
 * invisible where it happens. It shows later, for free, wherever the
 * cache adds the stripes up under its lock (eviction, invalidation, the
 * last put of a detached region, destroy, statistics): a sum below zero.
 * There the extra puts are reported (a log line naming the region),
 * counted (mrmgr_stats::double_puts) and undone, so the region is
 * deregistered when its true last user lets go and mrmgr_cache_destroy()
 * does not answer EBUSY for ever. A put on a region already released
 * (FREE) is the same mistake one step later: it leaves the sum below zero
 * and is undone the same way.
 *
 * Why a sum below zero is proof: once a region is marked not live (every
 * word's bit, mrmgr__region_set_state()), each get that will ever count
 * has already added to its word, and no new get can succeed; puts only
 * ever subtract what a get added. So with the lock held, a sum read after
 * the mark is at least the true count, which is never negative unless a
 * put had no get. mrmgr__region_leave() reads each word as its own mark
 * finds it: a get on a stripe counts only before that stripe's mark, and
 * puts after it are left out, so that sum is also at least the true
 * count. Lock-free readers that back off add and subtract on the same
 * word, which can only make the sum larger for a moment.
 *
 * The checked mode (MRMGR_CHECK=1, or MRMGR_CACHE_CHECK in the attribute
 * flags) catches the mistake at the put itself: every put of the cache
 * takes its lock and is refused when the sum is not positive, i.e. when
 * nobody can be holding the reference being dropped. It costs the lock
 * on every put; the default costs nothing on the put path but a load of
 * one process-wide word.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cache.h"
#include "log.h"

/* Set once any cache checks its puts; read by every mrmgr_put(). */
int mrmgr__check_puts;

static void report(struct mrmgr_cache *c, struct mrmgr_region *r,
		   int64_t extra, const char *where)
{
	c->st.double_puts += (uint64_t)extra;
	mrmgr__err("mrmgr_put: region %p [%#llx, +%llu) of cache %p was put "
		   "%lld time%s more than it was got (a double put?), seen "
		   "%s: the extra put%s ignored (counted in double_puts)",
		   (void *)r, (unsigned long long)mrmgr__region_start(r),
		   (unsigned long long)mrmgr__region_len(r), (void *)c,
		   (long long)extra, extra == 1 ? "" : "s", where,
		   extra == 1 ? " is" : "s are");
}

/* n < 0 for a region whose words are marked: report and undo. */
static int64_t undo(struct mrmgr_cache *c, struct mrmgr_region *r, int64_t n,
		    const char *where)
{
	report(c, r, -n, where);
	/* Undo them: any stripe will do, only the sum counts. */
	__atomic_fetch_add(mrmgr__ref_word(r, 0), (uint64_t)-n * MRMGR__REF_ONE,
			   __ATOMIC_SEQ_CST);
	return 0;
}

int64_t mrmgr__region_refs_fix(struct mrmgr_cache *c, struct mrmgr_region *r,
			       int64_t n, const char *where)
{
	return mrmgr__likely(n >= 0) ? n : undo(c, r, n, where);
}

int64_t mrmgr__region_refs_checked(struct mrmgr_cache *c,
				   struct mrmgr_region *r, const char *where)
{
	int64_t n = mrmgr__region_refs(r, c->nstripes);
	int live;

	if (mrmgr__likely(n >= 0))
		return n;
	/* A live region's words are not marked: its sum may be off while
	 * gets and puts run on other stripes. Mark, add up, unmark. */
	live = mrmgr__region_state(r) == MRMGR__REGION_LIVE;
	if (live) {
		mrmgr__region_set_state(r, MRMGR__REGION_EVICTING);
		n = mrmgr__region_refs(r, c->nstripes);
	}
	if (n < 0)
		n = undo(c, r, n, where);
	if (live)
		mrmgr__region_set_state(r, MRMGR__REGION_LIVE);
	return n;
}

/*
 * MRMGR_CHECK: words separated by commas. 1 or puts: MRMGR_CACHE_CHECK;
 * stale: MRMGR_CACHE_CHECK_STALE (stale.c); all: both; 0 or none:
 * neither. Unknown words are ignored, with a warning when say is set.
 */
unsigned int mrmgr__check_env_flags(int say)
{
	static const struct {
		const char *word;
		unsigned int flags;
	} words[] = {
		{ "0", 0 }, { "none", 0 },
		{ "1", MRMGR_CACHE_CHECK }, { "puts", MRMGR_CACHE_CHECK },
		{ "stale", MRMGR_CACHE_CHECK_STALE },
		{ "all", MRMGR_CACHE_CHECK | MRMGR_CACHE_CHECK_STALE },
	};
	const char *s = getenv("MRMGR_CHECK");
	unsigned int flags = 0;

	while (s && *s) {
		size_t n = strcspn(s, ","), i;

		for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
			if (strlen(words[i].word) == n &&
			    !strncasecmp(s, words[i].word, n))
				break;
		if (i < sizeof(words) / sizeof(words[0]))
			flags |= words[i].flags;
		else if (say)
			mrmgr__warn("MRMGR_CHECK: ignoring \"%.*s\" (known: 1 "
				    "or puts, stale, all, 0 or none)", (int)n, s);
		s += n + (s[n] == ',');
	}
	return flags;
}

void mrmgr__check_init(struct mrmgr_cache *c)
{
	unsigned int env = mrmgr__check_env_flags(1);

	/* The stale check is a feature of its own (stale.c), in the list
	 * when it was asked for; a cache of several PDs has none. */
	if (((c->flags | env) & MRMGR_CACHE_CHECK_STALE) && !c->stale)
		mrmgr__warn("cache %p: the stale check (MRMGR_CHECK=stale) is "
			    "not available for caches of several PDs: off",
			    (void *)c);
	if (!c->stale)
		c->flags &= ~(uint64_t)MRMGR_CACHE_CHECK_STALE;
	c->flags |= env & MRMGR_CACHE_CHECK;
	if (c->flags & MRMGR_CACHE_CHECK) {
		__atomic_store_n(&mrmgr__check_puts, 1, __ATOMIC_RELAXED);
		mrmgr__info("cache %p checks every mrmgr_put()", (void *)c);
	}
}

