/*
 * An in-place rereg's written argument, held open (lib/core/rereg.c):
 * after a translation rereg succeeded the device holds the new range's
 * pages; a change that releases some of them before the watch commits
 * refuses the commit, and "a refused commit marks the region dirty; the
 * publish that follows must not cache it either". The publish's own
 * watch (core/release.c) opens its window after the change, so it sees
 * nothing: the mark is the only layer here.
 *
 * The test hook mrmgr__rereg_test_window (core.h) runs exactly there,
 * with the cache's lock held; it replaces a page of the new range
 * through libc's mmap(), as another thread could at that moment. Default
 * mode: the patched libc, which reports the change.
 *
 * Shown to fail without the protection: with rereg.c's
 * `r->watch.dirty = 1` removed (temporarily), every case fails: the later
 * get is a hit on the region that holds the old page ("a region holding
 * a released page was cached").
 *
 * Its second argument, "a failed rereg aborts this watch" (the new
 * range's, taken before the call): under userfaultfd that watch is a
 * provisional entry in the registry (monitor/watch.c), and one left
 * behind keeps its VMAs registered for the process's life.
 * failed_rereg_aborts_its_watch fails without the abort (the
 * mrmgr__mon_watch_abort() call in rereg.c removed, temporarily: "the
 * failed rereg's watch outlived the cache").
 *
 * Its third, "Unwatchable: no in-place growth", has two layers: the
 * rereg's watch classifies the new range before the call, and the
 * publish's classifies it again (core/release.c). Suite classify turns
 * one off with a test flag (core.h) and shows the other alone keeps
 * shared memory out of the cache; each case fails with the remaining
 * layer removed (temporarily): rereg_watch_alone without rereg.c's
 * mrmgr__mon_watch_begin() (watch = 0), publish_watch_alone without
 * release.c's (the publish as under its flag): "a region was cached over
 * shared memory".
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <unistd.h>

#include "grow_helpers.h"
#include "monitor_helpers.h"
#include "core.h"
#include "monitor.h"

static struct {
	char *at; /* the page the hook replaces */
	int calls;
	uint64_t s, l; /* the rereg's new range */
} W;

static void hook(uint64_t s, uint64_t l)
{
	void *q;

	if (W.calls++)
		return;
	W.s = s;
	W.l = l;
	q = mmap(W.at, PG, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	cr_assert_eq(q, (void *)W.at, "mmap at %p: %s", (void *)W.at, strerror(errno));
	memset(W.at, 'w', PG);
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
 * A 64 KiB region at buf, then a get of 68 KiB: growth, rereg'd in place.
 * In the window the page at buf + off is replaced. Then a get of that
 * page must not be a hit on the grown region (it holds the old page),
 * and a write through what it hands out lands in the new one.
 */
static void replaced_in_the_window(size_t off)
{
	struct fixture f;
	struct mrmgr_cache_attr a = dattr();
	char *buf = map_guarded(1 * MiB);
	mrmgr_region_t *r;
	uint64_t regs, uncached;

	need_identity();
	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	memset(&W, 0, sizeof(W));
	W.at = buf + off;
	uncached = cstats(f.cache).uncached;
	mrmgr__rereg_test_window = hook;
	cr_assert_eq(mrmgr_get(f.cache, buf, 68 * KiB, RW, &r), 0);
	mrmgr__rereg_test_window = NULL;
	mrmgr_put(r);
	if (!W.calls) {
		fx_close(&f);
		unmap_guarded(buf, 1 * MiB);
		cr_skip_test("no in-place rereg in this mode");
	}
	cr_assert_eq(W.s, (uint64_t)(uintptr_t)buf, "the hook sees the new range");
	cr_assert_geq(W.l, (uint64_t)(uintptr_t)buf + 68 * KiB - 1);
	/* What the argument says: the publish does not cache it. */
	cr_assert_eq(cstats(f.cache).uncached, uncached + 1,
		     "the publish cached a region whose rereg's commit was refused");
	/* What follows from it (and from the event's invalidation at the
	 * next get's drain, a layer of its own): no hit on the old page. */
	regs = cstats(f.cache).registrations;
	cr_assert_eq(mrmgr_get(f.cache, W.at, PG, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).registrations, regs + 1,
		     "a region holding a released page was cached");
	write_lands(f.pd, mrmgr_region_rkey(r), W.at, 'n');
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	unmap_guarded(buf, 1 * MiB);
}

/* A page the region had before it grew. */
Test(rereg_window, old_page_replaced) { replaced_in_the_window(8 * KiB); }

/* A page the growth added. */
Test(rereg_window, new_page_replaced) { replaced_in_the_window(64 * KiB); }

static uint64_t registry_entries(void)
{
	uint64_t ranges, runs, budget;

	mrmgr__watch_stats(&ranges, &runs, &budget);
	return ranges;
}

/* Under userfaultfd: a translation rereg that fails (the old MR valid)
 * leaves the registry as it found it once the cache is gone. */
Test(rereg_window, failed_rereg_aborts_its_watch)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	char *buf = map_guarded(1 * MiB);
	mrmgr_region_t *r;
	uint64_t before = registry_entries();

	a.monitor = MRMGR_MONITOR_UFFD;
	fx_open(&f, &sim_big, &a);
	if (!uffd_on(f.cache)) {
		fx_close(&f);
		unmap_guarded(buf, 1 * MiB);
		cr_skip_test("userfaultfd is not available here");
	}
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	rereg_fault(f.ctx, IBV_REREG_MR_ERR_INPUT, EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, 68 * KiB, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).rereg_attempts, 1, "the rereg was tried");
	cr_assert_eq(cstats(f.cache).rereg_fallback_input, 1, "and refused");
	write_lands(f.pd, mrmgr_region_rkey(r), buf + 68 * KiB - 8, 'f');
	mrmgr_put(r);
	fx_close(&f);
	cr_assert_eq(registry_entries(), before,
		     "the failed rereg's watch outlived the cache");
	unmap_guarded(buf, 1 * MiB);
}

/*
 * A 64 KiB region, then its next page becomes shared memory and a get
 * takes both: the growth must not be cached (neither in place nor by
 * the merge path), so a later get of the shared page is registered anew,
 * served uncached.
 */
static void grow_over_shared(int *off_flag)
{
	struct fixture f;
	struct mrmgr_cache_attr a = dattr();
	char *buf = map_guarded(1 * MiB);
	mrmgr_region_t *r;
	uint64_t regs, unwatched;

	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags = MRMGR_CACHE_NO_HEADROOM;
	need_identity();
	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mmap(buf + 64 * KiB, PG, PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     (void *)(buf + 64 * KiB));
	*off_flag = 1;
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB + PG, RW, &r), 0);
	*off_flag = 0;
	write_lands(f.pd, mrmgr_region_rkey(r), buf + 64 * KiB, 'g');
	mrmgr_put(r);
	regs = cstats(f.cache).registrations;
	unwatched = minfo(f.cache).unwatched;
	cr_assert_eq(mrmgr_get(f.cache, buf + 64 * KiB, PG, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).registrations, regs + 1,
		     "a region was cached over shared memory");
	cr_assert_eq(minfo(f.cache).unwatched, unwatched + 1,
		     "shared memory is served uncached");
	write_lands(f.pd, mrmgr_region_rkey(r), buf + 64 * KiB, 's');
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	unmap_guarded(buf, 1 * MiB);
}

/* The publish trusts the watch it is handed: the rereg's own watch must
 * refuse the shared page before the call. */
Test(classify, rereg_watch_alone) { grow_over_shared(&mrmgr__publish_test_no_watch); }

/* The rereg watches nothing: the publish's watch must refuse it. */
Test(classify, publish_watch_alone) { grow_over_shared(&mrmgr__rereg_test_no_watch); }
