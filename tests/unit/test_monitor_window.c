/*
 * The userfaultfd watch's window, held open: what changes memory between
 * classifying the extent a get is about to cache and registering it (and
 * between registering and the second look) must never leave a region or a
 * known extent over memory userfaultfd does not watch.
 *
 * The test hook mrmgr__watch_test_between (monitor.h) runs at those
 * points (and after the second look, before the extent is known) inside
 * the get, under the monitor lock; it changes memory with
 * raw system calls, as another thread could at that moment. Each case
 * then refills what it punched, gets there, changes it with no event
 * (the refill is not registered unless the library registered it), and
 * gets again: the write through that region must land.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor_helpers.h"
#include "monitor.h"

#define PAGE ((size_t)4096)
#define PAGES 4

/* What the hook does at each phase: punch, refill or replace pages. */
enum act { NONE, PUNCH, REFILL, REPLACE_REST };

static struct window {
	char *p;                  /* PAGES pages, one VMA between guards */
	size_t page;              /* the page punched and refilled */
	enum act at[3];           /* per phase */
	int calls[3];
	uint64_t vs, vl;          /* the extent the watch saw */
} W;

static void raw_unmap(char *a, size_t len)
{
	cr_assert_eq(syscall(SYS_munmap, a, len), 0);
}

static void raw_map(char *a, size_t len, int flags, int fill)
{
	void *q = (void *)syscall(SYS_mmap, a, len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);

	cr_assert_eq(q, (void *)a, "mmap at %p: %s", (void *)a, strerror(errno));
	memset(a, fill, len);
}

static void hook(int phase, uint64_t vs, uint64_t vl)
{
	char *pg = W.p + W.page * PAGE;

	/* Once per phase: later gets of the case run undisturbed. */
	if (W.calls[phase]++)
		return;
	W.vs = vs;
	W.vl = vl;
	switch (W.at[phase]) {
	case PUNCH:
		raw_unmap(pg, PAGE);
		break;
	case REFILL:
		raw_map(pg, PAGE, MAP_FIXED_NOREPLACE, 'r');
		break;
	case REPLACE_REST:
		/* Everything registered goes, piece by piece (events that
		 * miss the punched page), then one new mapping takes the
		 * whole extent, the punched page with it. */
		for (size_t i = 0; i < PAGES; i++)
			if (i != W.page)
				raw_unmap(W.p + i * PAGE, PAGE);
		raw_map(W.p, PAGES * PAGE, MAP_FIXED_NOREPLACE, 'v');
		break;
	default:
		break;
	}
}

static struct mrmgr_cache_attr uffd_attr(void)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR |
			     MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = 1ull << 32, .monitor = MRMGR_MONITOR_UFFD,
		.flags = MRMGR_CACHE_NO_MERGE,
	};
	return a;
}

/* PAGES pages of one VMA, kept apart from any neighbour by PROT_NONE
 * guards, so the extent the watch sees is exactly these pages. */
static char *one_vma(void)
{
	/* Low, from a reservation of its own: the page a case punches is
	 * never the hole another thread's mmap(NULL) takes first
	 * (doc/design/testing.md, "No hole another thread can take"). */
	return area_map(PAGES * PAGE, 's');
}

static void setup(struct fixture *f, enum act before, enum act after,
		  size_t page)
{
	struct mrmgr_cache_attr a = uffd_attr();

	need_identity();
	fx_open(f, NULL, &a);
	if (!uffd_on(f->cache))
		cr_skip_test("userfaultfd unavailable here");
	memset(&W, 0, sizeof(W));
	W.p = one_vma();
	W.page = page;
	W.at[MRMGR__WATCH_TEST_BEFORE_REGISTER] = before;
	W.at[MRMGR__WATCH_TEST_AFTER_REGISTER] = after;
	mrmgr__watch_test_between = hook;
}

/* Get [a, +len), write one byte at w through it: 0 or ESTALE. */
static int get_write(struct fixture *f, char *a, size_t len, char *w, char b)
{
	mrmgr_region_t *r;
	int ret;

	cr_assert_eq(mrmgr_get(f->cache, a, len, RW, &r), 0);
	ret = mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
			      (uint64_t)(uintptr_t)w, &b, 1);
	if (!ret)
		cr_assert_eq(*w, b, "the write went to other pages");
	mrmgr_put(r);
	return ret;
}

/* The refilled page changes with no event unless it is registered; a get
 * after that must not be handed the registration from before. */
static void change_and_check(struct fixture *f, char *a, size_t len)
{
	char *pg = W.p + W.page * PAGE;

	cr_assert_eq(get_write(f, a, len, pg, 'x'), 0);
	raw_map(pg, PAGE, MAP_FIXED, 'n');
	cr_assert_eq(get_write(f, a, len, pg, 'y'), 0,
		     "a stale registration was handed out");
	cr_assert_eq(sstats(f->ctx).stale_accesses, 0);
	mrmgr__watch_test_between = NULL;
	fx_close(f);
	area_unmap(W.p, PAGES * PAGE);
}

/*
 * The trace: the get of page 0 classifies [0, 4) as one VMA; page
 * 3 is punched before the registration (nothing registered there: no
 * event); UFFDIO_REGISTER skips the hole. Page 3 comes back unregistered
 * (it cannot merge with registered neighbours); a get there must not be
 * joined to the extent through the known-extent shortcut.
 */
Test(window, hole_outside_the_request_before_register)
{
	struct fixture f;
	mrmgr_region_t *r;

	setup(&f, PUNCH, NONE, 3);
	cr_assert_eq(mrmgr_get(f.cache, W.p, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(W.calls[0], 1, "the hook ran");
	cr_assert_eq(W.vs, (uint64_t)(uintptr_t)W.p);
	cr_assert_eq(W.vl, (uint64_t)(uintptr_t)W.p + PAGES * PAGE - 1);
	raw_map(W.p + 3 * PAGE, PAGE, MAP_FIXED_NOREPLACE, 'r');
	change_and_check(&f, W.p + 3 * PAGE, PAGE);
}

/* The same hole, refilled between the registration and the second look:
 * the extent reads the same as before, one page of it unregistered. */
Test(window, hole_outside_the_request_refilled_after_register)
{
	struct fixture f;
	mrmgr_region_t *r;

	setup(&f, PUNCH, REFILL, 3);
	cr_assert_eq(mrmgr_get(f.cache, W.p, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(W.calls[1], 1, "the hook ran after the registration");
	change_and_check(&f, W.p + 3 * PAGE, PAGE);
}

/* A hole inside the request itself, refilled before the second look: the
 * registration pins the refilled page, which nothing watches. */
Test(window, hole_inside_the_request_refilled_after_register)
{
	struct fixture f;

	setup(&f, PUNCH, REFILL, 1);
	change_and_check(&f, W.p, PAGES * PAGE);
}

/*
 * The request's page is a hole at the registration; then the registered
 * rest is unmapped (events, none overlapping the request) and one new
 * mapping takes the whole extent: it reads as one VMA, exactly the extent,
 * and none of it is registered.
 */
Test(window, whole_extent_replaced_after_register)
{
	struct fixture f;

	setup(&f, PUNCH, REPLACE_REST, 1);
	change_and_check(&f, W.p + PAGE, PAGE);
}

/*
 * After the second look passed and before the extent is known: page 3,
 * registered, is punched (an unmap event, outside the request, so the
 * get's own region is cached) and refilled after the get, unregistered.
 * watch.c's argument: no event at or after the window opened is drained
 * before known_add() (the cache's lock), and the next drain drops every
 * known extent an event overlaps (queue.c, mrmgr__mon_known_drop()), so a
 * get of page 3 classifies and registers it afresh instead of joining
 * the extent through the shortcut. Shown to fail without that drop
 * (queue.c's per-event mrmgr__mon_known_drop() removed, temporarily): "a
 * stale registration was handed out".
 */
Test(window, hole_outside_the_request_after_second_look)
{
	struct fixture f;
	mrmgr_region_t *r;

	setup(&f, NONE, NONE, 3);
	W.at[MRMGR__WATCH_TEST_AFTER_SECOND_LOOK] = PUNCH;
	cr_assert_eq(mrmgr_get(f.cache, W.p, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(W.calls[MRMGR__WATCH_TEST_AFTER_SECOND_LOOK], 1,
		     "the hook ran after the second look");
	cr_assert_eq(W.vl, (uint64_t)(uintptr_t)W.p + PAGES * PAGE - 1);
	raw_map(W.p + 3 * PAGE, PAGE, MAP_FIXED_NOREPLACE, 'r');
	change_and_check(&f, W.p + 3 * PAGE, PAGE);
}

/*
 * The registry's commit (watch.c, mrmgr__watch_commit()): "the new entry
 * joins the range before the provisional one leaves it, so nothing is
 * unregistered in between". No window to hold open (one thread, under
 * the monitor lock): a cached page is replaced with no call of ours, and
 * only userfaultfd reports it if its VMA is still registered. Shown to
 * fail with the two steps swapped (temporarily): the provisional entry,
 * alone, unregisters the VMA, the region's entry joins a range the
 * kernel no longer watches, and "a stale registration was handed out".
 */
Test(registry, commit_joins_before_the_provisional_entry_leaves)
{
	struct fixture f;

	setup(&f, NONE, NONE, 0);
	change_and_check(&f, W.p, PAGE);
}

/* Whether the kernel has the VMA at a registered with userfaultfd (the
 * library registers write-protect mode: "uw" in smaps' VmFlags). */
static int uffd_registered(const char *a)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, ret = -1;

	cr_assert_not_null(f);
	while (ret < 0 && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = (uintptr_t)a >= lo && (uintptr_t)a < hi;
		else if (in && !strncmp(line, "VmFlags:", 8))
			ret = strstr(line, " uw") != NULL;
	}
	fclose(f);
	cr_assert_geq(ret, 0, "no VmFlags for %p", (void *)a);
	return ret;
}

/*
 * The registry's budget (watch.c): "Counted first: the budget refuses
 * before the kernel is asked." With the budget spent, a get in another
 * VMA is served unwatched and that VMA must not be left registered
 * (nothing would ever unregister it). Shown to fail with
 * mrmgr__uffd_register() moved before watch_join() (temporarily): "a
 * refused range was left registered".
 */
Test(registry, the_budget_refuses_before_the_kernel_is_asked)
{
	struct fixture f;
	mrmgr_region_t *r;
	char *q;
	uint64_t unwatched;

	setup(&f, NONE, NONE, 0);
	cr_assert_eq(mrmgr_get(f.cache, W.p, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert(uffd_registered(W.p), "the first VMA is registered");
	q = one_vma();
	mrmgr__watch_budget_override = minfo(f.cache).watched_runs;
	unwatched = minfo(f.cache).unwatched;
	cr_assert_eq(mrmgr_get(f.cache, q, PAGE, RW, &r), 0);
	mrmgr__watch_budget_override = 0;
	mrmgr_put(r);
	cr_assert_eq(minfo(f.cache).unwatched, unwatched + 1, "refused by the budget");
	cr_assert(minfo(f.cache).unwatched_causes & MRMGR_MONITOR_UNWATCHED_BUDGET);
	cr_assert(!uffd_registered(q), "a refused range was left registered");
	mrmgr__watch_test_between = NULL;
	fx_close(&f);
	area_unmap(q, PAGES * PAGE);
	area_unmap(W.p, PAGES * PAGE);
}

/* ------------------------------------------------------------ filter */

/*
 * The known extent against the watch filter, in the default mode (no
 * hook needed: one thread does it). A get in chunk 0 of an 8 MiB VMA
 * learns the VMA's extent; the filter (2 MiB chunks) holds chunk 0 only.
 * A page of chunk 3 is unmapped (the patched munmap reports it, and the
 * filter drops it: nothing was ever cached there) and a private file
 * mapping takes its place. A get there must classify it again (a file
 * mapping is never cached: truncating the file replaces even its private
 * pages), not trust the extent learnt before the change.
 */
Test(filter, known_extent_outlives_a_filtered_change)
{
	struct fixture f;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32, .monitor = MRMGR_MONITOR_AUTO,
	};
	const size_t chunk = 2 * MiB, len = 4 * chunk;
	char path[] = "/tmp/mrmgr-window-XXXXXX";
	mrmgr_region_t *r;
	char *raw, *x, *pg;
	int fd;

	need_identity();
	fx_open(&f, NULL, &a);
	if (!(minfo(f.cache).sources & MRMGR_MONITOR_SRC_PATCH))
		cr_skip_test("the default mode's patched libc is not in force");
	/* 8 MiB on a chunk boundary, in a mapping too large for the hole
	 * the monitor's self-test left (a 33 MiB malloc it watched and
	 * freed): chunk 3 is nobody's but this test's. */
	raw = mmap(NULL, 48 * MiB, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(raw, MAP_FAILED);
	x = (char *)(((uintptr_t)raw + chunk - 1) & ~(uintptr_t)(chunk - 1));
	memset(x, 's', len);
	pg = x + 3 * chunk + 16 * PAGE;
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(ftruncate(fd, PAGE), 0);

	cr_assert_eq(mrmgr_get(f.cache, x, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(munmap(pg, PAGE), 0);
	cr_assert_eq(mmap(pg, PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd, 0), (void *)pg);
	memset(pg, 'p', PAGE); /* a private copy of the file's page */
	cr_assert_eq(get_write(&f, pg, PAGE, pg, 'x'), 0);
	cr_assert(minfo(f.cache).unwatched_causes & MRMGR_MONITOR_UNWATCHED_FILE,
		  "a private file mapping was trusted as anonymous memory");
	/* Truncation replaces the private copy: no call of ours sees it. */
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(ftruncate(fd, PAGE), 0);
	cr_assert_eq(get_write(&f, pg, PAGE, pg, 'y'), 0,
		     "a stale registration was handed out");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	close(fd);
	munmap(raw, 48 * MiB);
}

/*
 * The known extent grows over a VMA only as far as the filter held
 * before each query: misses in chunks 0, 200 and 400 of a 1.5 GiB VMA
 * (the filter widening after each query) leave chunk 700 unfiltered, so
 * a private file mapping put there, with no event, is still asked about
 * and not trusted as anonymous memory.
 */
Test(filter, known_extent_grows_only_over_filtered_chunks)
{
	struct fixture f;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32, .monitor = MRMGR_MONITOR_AUTO,
	};
	const size_t chunk = 2 * MiB, span = 770 * chunk;
	static const unsigned int at[] = { 0, 200, 400 };
	char path[] = "/tmp/mrmgr-window-XXXXXX";
	mrmgr_region_t *r;
	char *raw, *x, *pg;
	int fd;

	need_identity();
	fx_open(&f, NULL, &a);
	if (!(minfo(f.cache).sources & MRMGR_MONITOR_SRC_PATCH))
		cr_skip_test("the default mode's patched libc is not in force");
	raw = mmap(NULL, span, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	cr_assert_neq(raw, MAP_FAILED);
	x = (char *)(((uintptr_t)raw + chunk - 1) & ~(uintptr_t)(chunk - 1));
	pg = x + 700 * chunk + 16 * PAGE;
	memset(pg, 's', PAGE);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(ftruncate(fd, PAGE), 0);

	for (unsigned int i = 0; i < MRMGR__ARRAY_SIZE(at); i++) {
		memset(x + at[i] * chunk, 's', PAGE);
		cr_assert_eq(mrmgr_get(f.cache, x + at[i] * chunk, PAGE, RW, &r), 0);
		mrmgr_put(r);
	}
	cr_assert_eq(munmap(pg, PAGE), 0);
	cr_assert_eq(mmap(pg, PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd, 0), (void *)pg);
	memset(pg, 'p', PAGE);
	cr_assert_eq(get_write(&f, pg, PAGE, pg, 'x'), 0);
	cr_assert(minfo(f.cache).unwatched_causes & MRMGR_MONITOR_UNWATCHED_FILE,
		  "a private file mapping was trusted as anonymous memory");
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(ftruncate(fd, PAGE), 0);
	cr_assert_eq(get_write(&f, pg, PAGE, pg, 'y'), 0,
		     "a stale registration was handed out");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	close(fd);
	munmap(raw, span);
}
