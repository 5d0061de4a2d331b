/*
 * Growth headroom's written argument, held open (lib/ext/headroom.c):
 * the mapping's bounds it reads are policy, never trusted for safety;
 * memory may change between that read and the registration, and such a
 * change is either reported (the filter already holds its chunk: the
 * event invalidates what was registered over it) or seen by the watch,
 * which classifies the widened span afresh before anything pins it.
 *
 * The test hook mrmgr__headroom_test_window (grow.h) runs exactly there,
 * with the cache's lock held; it changes memory in the headroom through
 * libc's mmap(), as another thread could at that moment. Default mode:
 * the patched libc, a two-sided source, under which headroom is on.
 *
 * Shown to fail without the protection: with the watch trusting a known
 * extent that holds only the span's start, so that the headroom part is
 * not classified afresh (watch.c, trusted_watch(): known_find(m, s, s),
 * temporarily), headroom_window/shared_memory_where_the_filter_is_clear
 * fails ("a region was cached over memory that is not watched"). Both
 * watches classify the widened span: the rereg's (core/rereg.c) and the
 * publish's (core/release.c); handing only the rereg's the old span is
 * caught by the second, and the case still passes.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <unistd.h>

#include "grow_helpers.h"
#include "monitor_helpers.h"
#include "grow.h"

#define CHUNK ((uintptr_t)2 * MiB) /* the event filter's (lib/monitor/queue.c) */

static struct {
	char *at;      /* what the hook replaces */
	size_t len;
	int flags;     /* MAP_SHARED or MAP_PRIVATE */
	int calls;
	uint64_t s, l; /* the widened span the hook saw */
} W;

static void hook(uint64_t s, uint64_t l)
{
	void *q;

	if (W.calls++)
		return;
	W.s = s;
	W.l = l;
	q = mmap(W.at, W.len, PROT_READ | PROT_WRITE,
		 W.flags | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	cr_assert_eq(q, (void *)W.at, "mmap at %p: %s", (void *)W.at, strerror(errno));
	memset(W.at, 'w', W.len);
}

/* The default mode: the patched libc. */
static struct mrmgr_cache_attr dattr(void)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
	};
	return a;
}

/*
 * A 1 MiB read-write mapping inside a PROT_NONE reservation (so its
 * bounds are exact): at a chunk's start plus 256 KiB (every address the
 * cases touch in one filter chunk), or 64 KiB below a chunk boundary (the
 * first region in one chunk, the headroom's change in the next).
 */
static char *mapping(char **res, int across)
{
	char *r = mmap(NULL, 4 * CHUNK, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *b, *buf;

	cr_assert_neq(r, MAP_FAILED);
	b = (char *)(((uintptr_t)r + 2 * CHUNK - 1) & ~(CHUNK - 1));
	buf = across ? b - 64 * KiB : b + 256 * KiB;
	cr_assert_eq(mmap(buf, 1 * MiB, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), (void *)buf);
	memset(buf, 'm', 1 * MiB);
	*res = r;
	return buf;
}

/*
 * A 64 KiB region at buf, then a get of 68 KiB: growth, widened to
 * 136 KiB. In the window, [+100 KiB, +108 KiB) of the headroom becomes
 * another mapping (flags).
 */
static void grow_through_the_window(struct fixture *f, char *buf, int flags)
{
	mrmgr_region_t *r;

	cr_assert_eq(mrmgr_get(f->cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	W.at = buf + 100 * KiB;
	W.len = 8 * KiB;
	W.flags = flags;
	mrmgr__headroom_test_window = hook;
	cr_assert_eq(mrmgr_get(f->cache, buf, 68 * KiB, RW, &r), 0);
	mrmgr__headroom_test_window = NULL;
	if (!W.calls) {
		mrmgr_put(r);
		cr_skip_test("no headroom in this mode: it needs a two-sided "
			     "source (the patched libc steps aside under a sanitizer)");
	}
	cr_assert_eq(W.s, (uint64_t)(uintptr_t)buf);
	cr_assert_eq(W.l, (uint64_t)(uintptr_t)buf + 136 * KiB - 1,
		     "the hook sees the widened span");
	write_lands(f->pd, mrmgr_region_rkey(r), buf + 68 * KiB - 8, 'g');
	mrmgr_put(r);
}

/* After the window: a get inside the shared memory must not be a hit on
 * a region over memory nothing watches. */
static void shared_case(int across)
{
	struct fixture f;
	struct mrmgr_cache_attr a = dattr();
	char *res, *buf = mapping(&res, across);
	mrmgr_region_t *r;
	uint64_t unwatched, regs;

	need_identity();
	fx_open(&f, &sim_big, &a);
	grow_through_the_window(&f, buf, MAP_SHARED);
	unwatched = minfo(f.cache).unwatched;
	regs = cstats(f.cache).registrations;
	cr_assert_eq(mrmgr_get(f.cache, W.at, PG, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).registrations, regs + 1,
		     "a region was cached over memory that is not watched");
	cr_assert_eq(minfo(f.cache).unwatched, unwatched + 1,
		     "shared memory is served uncached");
	write_lands(f.pd, mrmgr_region_rkey(r), W.at, 's');
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(res, 4 * CHUNK);
}

/* The change is reported: the filter holds its chunk since the first
 * get, and the event invalidates what the grown get registered over it. */
Test(headroom_window, shared_memory_where_the_filter_holds) { shared_case(0); }

/* The change is not reported (no region in its chunk yet: the filter
 * drops the event); only the watch's fresh classification of the
 * widened span sees it. */
Test(headroom_window, shared_memory_where_the_filter_is_clear) { shared_case(1); }

/* Private memory replaced in the window: every write through the key
 * handed out for the whole widened span lands, the new pages included. */
Test(headroom_window, private_memory_replaced)
{
	struct fixture f;
	struct mrmgr_cache_attr a = dattr();
	char *res, *buf = mapping(&res, 1);
	mrmgr_region_t *r;

	need_identity();
	fx_open(&f, &sim_big, &a);
	grow_through_the_window(&f, buf, MAP_PRIVATE);
	cr_assert_eq(mrmgr_get(f.cache, buf, 136 * KiB, RW, &r), 0);
	for (size_t off = 0; off < 136 * KiB; off += PG)
		write_lands(f.pd, mrmgr_region_rkey(r), buf + off, 'p');
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(res, 4 * CHUNK);
}
