/*
 * The memory-event cases of issue 11, in the default mode, on the
 * simulated HCA with page identity (a write through a registration whose
 * pages are gone is counted as stale):
 *
 *  1. two threads malloc/free same-sized large buffers independently
 *     (and the torture: 2 and 4 threads malloc/free/realloc, and threads
 *     owning neighbouring cells of one mapping, under CPU load);
 *  2. growth headroom next to madvise(MADV_DONTNEED) of the neighbour;
 *  3. external mode + headroom, with the program reporting as
 *     doc/growth.md asks;
 *  4. an arena heap trimmed by glibc, a madvise() that fails half done;
 *  6. the program's own memory calls succeed or fail identically with and
 *     without the cache (mremap after the buffer was extended), and the
 *     VMA footprint stays put;
 *  plus growth (4 KiB x 10,000 in one mapping: at most 20 registrations
 *  counted by the device), and a source that failed for want of
 *  descriptors coming back.
 *
 * Built twice: test_monitor_cases (the default mode as the library
 * decides it) and test_monitor_cases_hooks (libmrmgr_hooks.so linked
 * ahead of libc, so the default mode finds the hooks). Cases that need a
 * source seeing both sides of every change skip where only userfaultfd
 * runs (a build without the patched-libc source); they run after the
 * merge. MRMGR_TEST_TORTURE_EVENTS (events per run) lengthens the
 * torture runs; MRMGR_TEST_ONE_SIDED=1 runs those cases under a
 * one-sided source too, to measure it.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monitor_helpers.h"

#define PAGE ((size_t)4096)

static const struct mrmgr_cache_attr big = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 34,
};

/* A source that sees both sides of every change covers c. */
static int two_sided(mrmgr_cache_t *c)
{
	struct mrmgr_monitor_info m = minfo(c);

	return m.sources && m.sources != MRMGR_MONITOR_SRC_UFFD;
}

/* MRMGR_TEST_ONE_SIDED=1 runs the case anyway, to measure a one-sided
 * source (the assertions then say how often it was stale). */
static void need_two_sided(mrmgr_cache_t *c)
{
	const char *e = getenv("MRMGR_TEST_ONE_SIDED");

	if (!two_sided(c) && !(e && *e == '1'))
		cr_skip_test("the default mode here is userfaultfd alone "
			     "(sources %#x), which sees one side of a change: "
			     "this case needs the patched-libc source (or the "
			     "hooks)", minfo(c).sources);
}

static uint64_t env_events(uint64_t dflt)
{
	const char *e = getenv("MRMGR_TEST_TORTURE_EVENTS");

	return e && *e ? strtoull(e, NULL, 10) : dflt;
}

/* Write one byte through r at p; returns the device's answer. */
static int write_at(struct fixture *f, mrmgr_region_t *r, char *p, char b)
{
	return mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
			       (uint64_t)(uintptr_t)p, &b, 1);
}

/* ------------------------------------------------------------ CPU load */

static volatile int spin_stop;

static void *spinner(void *arg)
{
	(void)arg;
	while (!spin_stop)
		__asm__ volatile("" ::: "memory");
	return NULL;
}

static void load_start(pthread_t th[2])
{
	spin_stop = 0;
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, spinner, NULL), 0);
}

static void load_stop(pthread_t th[2])
{
	spin_stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
}

/* ------------------------------------------------------------ case 1 */

struct alloc_run {
	struct fixture f;
	uint64_t iters;        /* per thread */
	int realloc_too;
	uint64_t stale, gets;
};

/*
 * Each thread its own buffers, no lock around the allocator: malloc, fill,
 * get, write through the region, put, and free (or realloc first). With
 * M_MMAP_THRESHOLD low, every block is a mapping of its own that free()
 * unmaps, so the threads keep getting each other's old addresses back.
 */
static void *alloc_worker(void *arg)
{
	struct alloc_run *a = arg;
	unsigned int seed = (unsigned int)(uintptr_t)pthread_self() ^ 0xa110c;
	static const size_t sizes[] = { 256 * 1024, 512 * 1024 };
	uint64_t stale = 0, gets = 0;

	for (uint64_t i = 0; i < a->iters; i++) {
		size_t n = sizes[rand_r(&seed) % 2];
		char *p = malloc(n);
		mrmgr_region_t *r;
		int ret;

		cr_assert_not_null(p);
		if (a->realloc_too && rand_r(&seed) % 3 == 0) {
			char *q = realloc(p, sizes[rand_r(&seed) % 2] + PAGE);

			cr_assert_not_null(q);
			p = q;
			n = sizes[0];
		}
		memset(p, 'm', n);
		cr_assert_eq(mrmgr_get(a->f.cache, p, n, RW, &r), 0);
		ret = write_at(&a->f, r, p + n - 1, 'w');
		if (ret == ESTALE)
			stale++;
		else
			cr_assert_eq(ret, 0, "write: %s", strerror(ret));
		gets++;
		mrmgr_put(r);
		free(p);
	}
	__atomic_fetch_add(&a->stale, stale, __ATOMIC_RELAXED);
	__atomic_fetch_add(&a->gets, gets, __ATOMIC_RELAXED);
	return NULL;
}

static void alloc_case(int nthreads, uint64_t events, int realloc_too,
		       int load)
{
	static struct alloc_run a;
	pthread_t th[8], ld[2];

	need_identity();
	memset(&a, 0, sizeof(a));
	/* glibc's: chunks from 128 KiB are mmap'd. A sanitizer's allocator
	 * refuses mallopt; there the case runs on its allocator, followed
	 * through its malloc/free hooks (doc/monitor.md). */
	if (!sanitizer_runtime())
		cr_assert(mallopt(M_MMAP_THRESHOLD, 128 * 1024));
	fx_open(&a.f, NULL, &big);
	need_two_sided(a.f.cache);
	a.iters = events / (uint64_t)nthreads;
	a.realloc_too = realloc_too;
	if (load)
		load_start(ld);
	for (int i = 0; i < nthreads; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, alloc_worker, &a), 0);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	if (load)
		load_stop(ld);
	cr_log_info("%d threads: %llu gets, %llu stale (%llu pages the device "
		    "could not hold, whose staleness it cannot tell)", nthreads,
		    (unsigned long long)a.gets, (unsigned long long)a.stale,
		    (unsigned long long)sstats(a.f.ctx).unverified_pages);
	cr_assert_eq(a.stale, 0, "%llu of %llu writes went to freed pages",
		     (unsigned long long)a.stale, (unsigned long long)a.gets);
	cr_assert_eq(sstats(a.f.ctx).stale_accesses, 0);
	/* Not vacuous: the buffers were watched (a get whose merged span
	 * reaches a neighbour another thread is unmapping sees a hole and is
	 * served uncached, which is rare and fine). */
	cr_assert_lt(minfo(a.f.cache).unwatched, a.gets / 20,
		     "the buffers were watched");
	fx_close(&a.f);
}

Test(cases, two_threads_malloc_free_same_size, .timeout = 600)
{
	alloc_case(2, env_events(4000), 0, 0);
}

Test(torture, two_threads_malloc_free_realloc_under_load, .timeout = 1200)
{
	alloc_case(2, env_events(6000), 1, 1);
}

Test(torture, four_threads_malloc_free_realloc_under_load, .timeout = 1200)
{
	alloc_case(4, env_events(6000), 1, 1);
}

/* ------------------------------------------------------------ cells */

#define CELLS 8
#define CELL (16 * PAGE)

struct cells_run {
	struct fixture f;
	char *base;
	uint64_t iters;
	uint64_t stale;
};

struct cells_arg {
	struct cells_run *c;
	int first, count; /* the cells this thread owns */
};

/*
 * Threads own neighbouring cells of one mapping: each grows a get over
 * its cell page by page (growth, with headroom reaching into the
 * neighbours where the mode allows it), discards or replaces its cell,
 * and writes through what it got. No cell is ever touched by two
 * threads; regions may span cells.
 */
static void *cells_worker(void *arg)
{
	struct cells_arg *ca = arg;
	struct cells_run *c = ca->c;
	unsigned int seed = (unsigned int)(uintptr_t)pthread_self() ^ 0xce11;
	uint64_t stale = 0;

	for (uint64_t i = 0; i < c->iters; i++) {
		char *cell = c->base + (size_t)(ca->first + rand_r(&seed) % ca->count) * CELL;
		size_t len = PAGE * (1 + (size_t)(rand_r(&seed) % (CELL / PAGE)));
		mrmgr_region_t *r;
		int ret;

		switch (rand_r(&seed) % 4) {
		case 0:
			cr_assert_eq(madvise(cell, CELL, MADV_DONTNEED), 0);
			break;
		case 1:
			cr_assert_eq(mmap(cell, CELL, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
					  -1, 0), (void *)cell);
			break;
		default:
			break;
		}
		memset(cell, 'c', len);
		cr_assert_eq(mrmgr_get(c->f.cache, cell, len, RW, &r), 0);
		ret = write_at(&c->f, r, cell + len - 1, 'x');
		if (ret == ESTALE)
			stale++;
		else
			cr_assert_eq(ret, 0, "write: %s", strerror(ret));
		mrmgr_put(r);
	}
	__atomic_fetch_add(&c->stale, stale, __ATOMIC_RELAXED);
	return NULL;
}

static void cells_case(int nthreads, uint64_t events)
{
	static struct cells_run c;
	struct cells_arg args[4];
	pthread_t th[4], ld[2];

	need_identity();
	memset(&c, 0, sizeof(c));
	fx_open(&c.f, NULL, &big);
	need_two_sided(c.f.cache);
	c.base = map_rw(CELLS * CELL, 'b');
	c.iters = events / (uint64_t)nthreads;
	load_start(ld);
	for (int i = 0; i < nthreads; i++) {
		args[i] = (struct cells_arg){ &c, i * (CELLS / nthreads),
					      CELLS / nthreads };
		cr_assert_eq(pthread_create(&th[i], NULL, cells_worker, &args[i]), 0);
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	load_stop(ld);
	cr_log_info("cells, %d threads: %llu stale, %llu headroom bytes",
		    nthreads, (unsigned long long)c.stale,
		    (unsigned long long)cstats(c.f.cache).headroom_bytes);
	cr_assert_eq(c.stale, 0);
	cr_assert_eq(sstats(c.f.ctx).stale_accesses, 0);
	fx_close(&c.f);
	munmap(c.base, CELLS * CELL);
}

Test(torture, two_threads_neighbouring_cells_under_load, .timeout = 1200)
{
	cells_case(2, env_events(6000));
}

Test(torture, four_threads_neighbouring_cells_under_load, .timeout = 1200)
{
	cells_case(4, env_events(6000));
}

/* ------------------------------------------------------------ case 2 */

/*
 * Headroom in the default mode: a buffer grown page by page registers
 * past the request; the neighbour, inside the same mapping, is discarded
 * by another thread while that goes on; the neighbour's owner then gets
 * its memory and writes. Headroom must really happen (else the case
 * tests nothing).
 */
struct hr_run {
	struct fixture f;
	char *base;       /* [0, 64 pages): the grower; then the neighbour */
	int stop;
	uint64_t stale;
};

static void *hr_discarder(void *arg)
{
	struct hr_run *h = arg;
	char *nb = h->base + 64 * PAGE;
	uint64_t stale = 0;

	while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
		mrmgr_region_t *r;
		int ret;

		cr_assert_eq(madvise(nb, 64 * PAGE, MADV_DONTNEED), 0);
		memset(nb, 'n', 64 * PAGE);
		cr_assert_eq(mrmgr_get(h->f.cache, nb, 64 * PAGE, RW, &r), 0);
		ret = write_at(&h->f, r, nb + 64 * PAGE - 1, 'd');
		if (ret == ESTALE)
			stale++;
		mrmgr_put(r);
	}
	h->stale = stale;
	return NULL;
}

Test(cases, headroom_next_to_madvise_dontneed, .timeout = 600)
{
	static struct hr_run h;
	pthread_t th;
	uint64_t rounds = env_events(4000) / 64;

	need_identity();
	memset(&h, 0, sizeof(h));
	fx_open(&h.f, NULL, &big);
	need_two_sided(h.f.cache);
	h.base = map_rw(128 * PAGE, 'h');
	cr_assert_eq(pthread_create(&th, NULL, hr_discarder, &h), 0);
	for (uint64_t k = 0; k < rounds; k++) {
		for (size_t n = 1; n <= 64; n++) {
			mrmgr_region_t *r;

			cr_assert_eq(mrmgr_get(h.f.cache, h.base, n * PAGE, RW, &r), 0);
			cr_assert_eq(write_at(&h.f, r, h.base + n * PAGE - 1, 'g'), 0);
			mrmgr_put(r);
		}
		cr_assert_eq(mrmgr_invalidate(h.f.cache, h.base, 64 * PAGE), 0);
	}
	__atomic_store_n(&h.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	cr_assert_gt(cstats(h.f.cache).headroom_bytes, 0, "headroom is on");
	cr_assert_eq(h.stale, 0);
	cr_assert_eq(sstats(h.f.ctx).stale_accesses, 0);
	fx_close(&h.f);
	munmap(h.base, 128 * PAGE);
}

/* Where the default mode is userfaultfd alone, headroom stays off: its
 * REMOVE event comes before the discard and nothing after. */
Test(cases, headroom_only_where_both_sides_are_seen)
{
	struct fixture f;
	char *p = map_rw(256 * PAGE, 1);

	fx_open(&f, NULL, &big);
	for (size_t n = 1; n <= 16; n++) {
		mrmgr_region_t *r;

		cr_assert_eq(mrmgr_get(f.cache, p, n * PAGE, RW, &r), 0);
		mrmgr_put(r);
	}
	if (two_sided(f.cache))
		cr_assert_gt(cstats(f.cache).headroom_bytes, 0);
	else if (minfo(f.cache).sources == MRMGR_MONITOR_SRC_UFFD)
		cr_assert_eq(cstats(f.cache).headroom_bytes, 0);
	fx_close(&f);
	munmap(p, 256 * PAGE);
}

/* ------------------------------------------------------------ case 3 */

/*
 * External mode with headroom: the contract (doc/growth.md) is that the
 * program reports every change to a mapping it passed to mrmgr_get(),
 * not only to the bytes it asked for. A program that does so gets no
 * stale registration for the neighbour that headroom covered.
 */
Test(cases, external_mode_headroom_with_the_contract)
{
	struct fixture f;
	struct mrmgr_cache_attr a = big;
	char *p = map_rw(128 * PAGE, 1), *nb = p + 64 * PAGE;
	mrmgr_region_t *r;

	need_identity();
	a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	a.monitor = MRMGR_MONITOR_EXTERNAL;
	fx_open(&f, NULL, &a);
	for (size_t n = 1; n <= 40; n++) {
		cr_assert_eq(mrmgr_get(f.cache, p, n * PAGE, RW, &r), 0);
		mrmgr_put(r);
	}
	cr_assert_gt(cstats(f.cache).headroom_bytes, 0);
	/* The neighbour is discarded and reported, as the contract asks. */
	cr_assert_eq(madvise(nb, 64 * PAGE, MADV_DONTNEED), 0);
	cr_assert_eq(mrmgr_notify_unmap(nb, 64 * PAGE), 0);
	memset(nb, 2, 64 * PAGE);
	cr_assert_eq(mrmgr_get(f.cache, nb, PAGE, RW, &r), 0);
	cr_assert_eq(write_at(&f, r, nb, 'e'), 0, "the neighbour's first get");
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, 128 * PAGE);
}

/* ------------------------------------------------------------ case 4 */

struct arena_run {
	struct fixture f;
	int stale, same;
};

/* In a thread of its own, malloc() uses a non-main arena, whose heap glibc
 * shrinks (heap_trim: MADV_DONTNEED or mmap over it) with internal calls
 * when its top is freed, whatever M_TRIM_THRESHOLD says. */
static void *arena_worker(void *arg)
{
	struct arena_run *a = arg;

	for (int i = 0; i < 50; i++) {
		char *p = malloc(96 * 1024), *q;
		mrmgr_region_t *r;
		int ret;

		memset(p, 'a', 96 * 1024);
		cr_assert_eq(mrmgr_get(a->f.cache, p, 96 * 1024, RW, &r), 0);
		mrmgr_put(r);
		free(p); /* the arena's top: trimmed */
		q = malloc(96 * 1024);
		a->same += q == p;
		memset(q, 'b', 96 * 1024);
		cr_assert_eq(mrmgr_get(a->f.cache, q, 96 * 1024, RW, &r), 0);
		ret = write_at(&a->f, r, q + 96 * 1024 - 1, 'z');
		a->stale += ret == ESTALE;
		mrmgr_put(r);
		free(q);
	}
	return NULL;
}

Test(cases, arena_heap_trim)
{
	static struct arena_run a;
	pthread_t th;

	need_identity();
	need_glibc_malloc();
	memset(&a, 0, sizeof(a));
	cr_assert(mallopt(M_MMAP_THRESHOLD, 1024 * 1024));
	cr_assert(mallopt(M_TRIM_THRESHOLD, 64 * 1024));
	fx_open(&a.f, NULL, &big);
	need_two_sided(a.f.cache);
	if (minfo(a.f.cache).sources & MRMGR_MONITOR_SRC_HOOKS)
		cr_skip_test("the hooks cannot see glibc's internal heap "
			     "trims (doc/monitor.md); the patched libc can");
	cr_assert_eq(pthread_create(&th, NULL, arena_worker, &a), 0);
	pthread_join(th, NULL);
	cr_log_info("arena: %d of 50 at the same address", a.same);
	cr_assert_eq(a.stale, 0);
	cr_assert_eq(sstats(a.f.ctx).stale_accesses, 0);
	fx_close(&a.f);
}

/* madvise() that fails (a hole in the range) after discarding the part
 * before the hole: the discarded part must not stay cached. */
Test(cases, failed_madvise_discarded_part)
{
	struct fixture f;
	char *p = map_rw(3 * 16 * PAGE, 1);
	mrmgr_region_t *r;

	need_identity();
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	/*
	 * The hole, punched just before the call: punched before the cache
	 * was made, a 64 KiB gap near the top of the mmap area was where the
	 * next small mmap of the library or of ASan landed (about one run in
	 * fifteen under ASan), and the "failing" madvise then succeeded over
	 * it and discarded their memory (a jump into zeroed code). Checked
	 * still a hole, so such a run fails here, saying why.
	 */
	cr_assert_eq(munmap(p + 16 * PAGE, 16 * PAGE), 0);
	cr_assert_eq(msync(p + 16 * PAGE, 16 * PAGE, MS_ASYNC), -1,
		     "the hole was mapped again before the madvise");
	cr_assert_eq(madvise(p, 3 * 16 * PAGE, MADV_DONTNEED), -1);
	cr_assert_eq(errno, ENOMEM);
	memset(p, 2, 16 * PAGE); /* new pages where the old were discarded */
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PAGE, RW, &r), 0);
	cr_assert_eq(write_at(&f, r, p, 'f'), 0, "stale after a failed madvise");
	mrmgr_put(r);
	fx_close(&f);
	munmap(p, 16 * PAGE);
	munmap(p + 32 * PAGE, 16 * PAGE);
}

/* ------------------------------------------------------------ case 5 */

#ifndef SHM_REMAP
#define SHM_REMAP 040000
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif

/* A SysV segment attached over cached anonymous memory (SHM_REMAP): the
 * next get must not return the old registration. */
Test(cases, shmat_shm_remap_over_cached_memory)
{
	struct fixture f;
	char *p = map_rw(16 * PAGE, 1), *s;
	mrmgr_region_t *r;
	int id;

	need_identity();
	fx_open(&f, NULL, &big);
	if (!(minfo(f.cache).sources &
	      (MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_HOOKS))) {
		uint32_t src = minfo(f.cache).sources;

		fx_close(&f);
		cr_skip_test("sources %#x: userfaultfd does not see "
			     "shmat(SHM_REMAP); the patched libc and the hooks "
			     "do (doc/monitor.md, What each mode follows)", src);
	}
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	id = shmget(IPC_PRIVATE, 16 * PAGE, IPC_CREAT | 0600);
	cr_assert_geq(id, 0);
	s = shmat(id, p, SHM_REMAP);
	cr_assert_eq(s, p, "shmat(SHM_REMAP): %s", strerror(errno));
	memset(s, 2, 16 * PAGE);
	cr_assert_eq(mrmgr_get(f.cache, s, 16 * PAGE, RW, &r), 0);
	cr_assert_eq(write_at(&f, r, s, 's'), 0, "stale after shmat(SHM_REMAP)");
	mrmgr_put(r);
	cr_assert_eq(shmdt(s), 0);
	shmctl(id, IPC_RMID, NULL);
	fx_close(&f);
}

/* MADV_GUARD_INSTALL (Linux 6.13) zaps the pages under the guard; after
 * MADV_GUARD_REMOVE new zero pages come: a get must register them.
 * userfaultfd raises no event for it. */
Test(cases, madv_guard_install_over_cached_memory)
{
	struct fixture f;
	char *p = map_rw(16 * PAGE, 1);
	mrmgr_region_t *r;

	need_identity();
	if (madvise(p + 15 * PAGE, PAGE, MADV_GUARD_INSTALL)) {
		munmap(p, 16 * PAGE);
		cr_skip_test("MADV_GUARD_INSTALL: %s (Linux 6.13+)", strerror(errno));
	}
	cr_assert_eq(madvise(p + 15 * PAGE, PAGE, MADV_GUARD_REMOVE), 0);
	memset(p, 1, 16 * PAGE);
	fx_open(&f, NULL, &big);
	if (minfo(f.cache).sources == MRMGR_MONITOR_SRC_UFFD) {
		fx_close(&f);
		cr_skip_test("userfaultfd raises no event for MADV_GUARD_INSTALL; "
			     "the patched libc (and the hooks) report it");
	}
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(madvise(p, 16 * PAGE, MADV_GUARD_INSTALL), 0);
	cr_assert_eq(madvise(p, 16 * PAGE, MADV_GUARD_REMOVE), 0);
	memset(p, 2, 16 * PAGE);
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PAGE, RW, &r), 0);
	cr_assert_eq(write_at(&f, r, p, 'g'), 0, "stale after MADV_GUARD_INSTALL");
	mrmgr_put(r);
	fx_close(&f);
	munmap(p, 16 * PAGE);
}

/* ------------------------------------------------------------ case 6 */

/*
 * One sequence of the program's own memory calls; with a cache, every
 * buffer is also got (cached) after each step. Returns the results, one
 * errno (or 0) per call, which must be the same either way.
 */
#define STEPS 12

static void touch(mrmgr_cache_t *c, void *p, size_t n)
{
	mrmgr_region_t *r;

	if (!c)
		return;
	memset(p, 1, n);
	if (mrmgr_get(c, p, n, RW, &r) == 0)
		mrmgr_put(r);
}

static void sequence(mrmgr_cache_t *c, int res[STEPS])
{
	char *p, *q, *s;
	void *b0;
	int id, i = 0;

#define RES(expr) (res[i++] = (expr) ? errno : 0)
	/* Map 4 pages, cache the first two, map 4 more right after: the
	 * kernel merges them into one VMA unless something stops it. Carved
	 * out of a reservation: a hole mmap(NULL) chose could be taken by
	 * another thread's mmap before the test maps it (the userfaultfd
	 * reader's first steps under ASan did: EEXIST, one run in twenty). */
	p = area_reserve(16 * PAGE);
	RES(mmap(p, 4 * PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p);
	touch(c, p, 2 * PAGE);
	RES(mmap(p + 4 * PAGE, 4 * PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
	    p + 4 * PAGE);
	touch(c, p + 4 * PAGE, 4 * PAGE);
	/* The extended buffer moves as one: fails if it is two VMAs. */
	q = mremap(p, 8 * PAGE, 12 * PAGE, MREMAP_MAYMOVE);
	RES(q == MAP_FAILED);
	if (q == MAP_FAILED)
		q = p;
	touch(c, q, 12 * PAGE < 8 * PAGE ? 0 : 8 * PAGE);
	RES(madvise(q, 8 * PAGE, MADV_DONTNEED));
	touch(c, q, 8 * PAGE);
	RES(mprotect(q + PAGE, PAGE, PROT_READ));
	RES(mprotect(q + PAGE, PAGE, PROT_READ | PROT_WRITE));
	s = mremap(q, 12 * PAGE, 4 * PAGE, 0); /* shrink in place */
	RES(s == MAP_FAILED);
	touch(c, q, 4 * PAGE);
	RES(munmap(q, 12 * PAGE));
	area_unmap(p, 16 * PAGE); /* what is left of the reservation */
	/* The break and a SysV segment. */
	b0 = sbrk(0);
	RES(sbrk(8 * PAGE) == (void *)-1);
	touch(c, (char *)(((uintptr_t)b0 + PAGE - 1) & ~(PAGE - 1)), 4 * PAGE);
	RES(brk(b0));
	id = shmget(IPC_PRIVATE, 4 * PAGE, IPC_CREAT | 0600);
	cr_assert_geq(id, 0);
	s = shmat(id, NULL, 0);
	RES(s == (void *)-1);
	touch(c, s, 4 * PAGE);
	RES(shmdt(s));
	shmctl(id, IPC_RMID, NULL);
#undef RES
	cr_assert_eq(i, STEPS);
}

Test(cases, program_calls_behave_the_same)
{
	struct fixture f;
	int without[STEPS], with[STEPS];

	need_identity();
	mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024);
	sequence(NULL, without);
	fx_open(&f, NULL, &big);
	if (minfo(f.cache).sources == MRMGR_MONITOR_SRC_UFFD) {
		fx_close(&f);
		cr_skip_test("the default mode here is userfaultfd (no patched "
			     "libc in this build), which changes mremap(): see "
			     "uffd_mode_changes_mremap; passes after the merge");
	}
	sequence(f.cache, with);
	for (int i = 0; i < STEPS; i++)
		cr_expect_eq(with[i], without[i],
			     "call %d: %s with the cache, %s without (sources %#x)",
			     i, strerror(with[i]), strerror(without[i]),
			     minfo(f.cache).sources);
	fx_close(&f);
}

/* The measurement behind userfaultfd being opt-in: watched, the first
 * VMA does not merge with memory mapped after it, and the program's
 * mremap() of the extended buffer fails with EFAULT. */
Test(cases, uffd_mode_changes_mremap)
{
	struct fixture f;
	struct mrmgr_cache_attr a = big;
	int without[STEPS], with[STEPS], differ = 0;

	need_identity();
	mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024);
	a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	a.monitor = MRMGR_MONITOR_UFFD;
	sequence(NULL, without);
	fx_open(&f, NULL, &a);
	if (!uffd_on(f.cache)) {
		fx_close(&f);
		cr_skip_test("userfaultfd is not available here");
	}
	sequence(f.cache, with);
	for (int i = 0; i < STEPS; i++)
		differ += with[i] != without[i];
	cr_log_info("userfaultfd mode: mremap after extension: %s (without: %s)",
		    strerror(with[2]), strerror(without[2]));
	cr_assert_eq(without[2], 0);
	cr_assert_eq(with[2], EFAULT, "the reason userfaultfd is not the default");
	cr_assert_gt(differ, 0);
	fx_close(&f);
}

static int vma_count(void)
{
	char buf[65536];
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), n = 0;
	ssize_t k;

	cr_assert_geq(fd, 0);
	while ((k = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < k; i++)
			n += buf[i] == '\n';
	close(fd);
	return n;
}

/* Caching 64 buffers of one mapping adds no VMA (nothing splits it). */
Test(cases, vma_footprint)
{
	struct fixture f;
	char *p = map_rw(64 * 16 * PAGE, 1);
	mrmgr_region_t *r[64];
	int before;

	fx_open(&f, NULL, &big);
	mrmgr_get(f.cache, p, PAGE, RW, &r[0]); /* sources started */
	mrmgr_put(r[0]);
	before = vma_count();
	for (int i = 0; i < 64; i++)
		cr_assert_eq(mrmgr_get(f.cache, p + (size_t)i * 16 * PAGE + PAGE,
				       8 * PAGE, RW, &r[i]), 0);
	cr_assert_leq(vma_count(), before, "VMAs: %d before, %d after",
		      before, vma_count());
	for (int i = 0; i < 64; i++)
		mrmgr_put(r[i]);
	fx_close(&f);
	munmap(p, 64 * 16 * PAGE);
}

/* ------------------------------------------------------------ growth */

/* 4 KiB x 10,000 inside one mapping: headroom makes it O(log n)
 * registrations, counted by the device. */
Test(growth, four_kib_steps_10000_in_one_mapping)
{
	struct fixture f;
	const size_t steps = 10000;
	/* 40 MiB: beyond a usual RLIMIT_MEMLOCK, so the device only checks
	 * the range is mapped (it still counts every call). */
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK,
		.flags = MRMGR_SIM_FLAG_NO_PIN, .memlock_bytes = UINT64_MAX,
	};
	char *p = map_rw(steps * PAGE, 1);
	uint64_t regs;

	fx_open(&f, &sa, &big);
	need_two_sided(f.cache);
	for (size_t n = 1; n <= steps; n++) {
		mrmgr_region_t *r;

		cr_assert_eq(mrmgr_get(f.cache, p, n * PAGE, RW, &r), 0);
		mrmgr_put(r);
	}
	regs = sstats(f.ctx).registrations + sstats(f.ctx).reregs;
	cr_log_info("4 KiB x %zu: %llu registrations (reg + rereg) on the device",
		    steps, (unsigned long long)regs);
	cr_assert_leq(regs, 20);
	fx_close(&f);
	munmap(p, steps * PAGE);
}

/* ------------------------------------------------------------ retries */

/* Issue 13 item 5: no descriptor at the first cache's creation must not
 * leave the process without caching for good. */
Test(retry, descriptor_shortage_is_retried, .timeout = 60)
{
	struct fixture f;
	struct rlimit rl, low;
	char *p = map_rw(64 * PAGE, 1), *q = map_rw(64 * PAGE, 2);
	mrmgr_region_t *r;
	int fds[64], n = 0;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	/* The device and PD first (they may hold descriptors of their own). */
	cr_assert_eq(mrmgr_sim_open(NULL, &f.ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &f.pd), 0);
	low = rl;
	low.rlim_cur = 64;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		n++;
	cr_assert_eq(errno, EMFILE);
	cr_assert_eq(mrmgr_cache_create(f.pd, &big, &f.cache), 0);
	cr_assert_eq(mrmgr_get(f.cache, p, 64 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "nothing could watch it");
	cr_assert_gt(minfo(f.cache).unwatched, 0);
	while (n)
		close(fds[--n]);
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	/* Past the back-off, a wall-clock wait of the library's own: 100 ms
	 * after the failure at creation, or 200 ms after a second failure
	 * if the get above came that late and retried. usleep() sleeps at
	 * least this long however loaded the machine is. */
	usleep(250 * 1000);
	cr_assert_eq(mrmgr_get(f.cache, q, 64 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "cached once descriptors are back "
		     "(sources %#x, retries %llu)", minfo(f.cache).sources,
		     (unsigned long long)minfo(f.cache).retries);
	fx_close(&f);
	munmap(p, 64 * PAGE);
	munmap(q, 64 * PAGE);
}

/* Fill the descriptor table up to a limit of 64; returns how many were
 * opened (close them with unfill()). */
static int fill_fds(int *fds, struct rlimit *saved)
{
	struct rlimit low;
	int n = 0;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, saved), 0);
	low = *saved;
	low.rlim_cur = 64;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		n++;
	cr_assert_eq(errno, EMFILE);
	return n;
}

static void unfill(int *fds, int n, const struct rlimit *saved)
{
	while (n)
		close(fds[--n]);
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, saved), 0);
}

/*
 * Issue 27 item 6: userfaultfd that met a full descriptor table starts
 * when asked again, with no wait: the next cache created after the table
 * is emptied gets a working source, and its gets are cached (uffd mode,
 * and auto under a sanitizer, take this path).
 */
static void starts_when_asked_again(uint32_t mode)
{
	struct fixture f;
	struct mrmgr_cache_attr a = big;
	mrmgr_cache_t *again;
	struct rlimit rl;
	char *p = map_rw(64 * PAGE, 1), *q = map_rw(64 * PAGE, 2);
	char *o = map_rw(64 * PAGE, 3);
	mrmgr_region_t *r;
	int fds[64], n;

	a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	a.monitor = mode;
	cr_assert_eq(mrmgr_sim_open(NULL, &f.ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &f.pd), 0);
	n = fill_fds(fds, &rl);
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &f.cache), 0);
	cr_assert_eq(mrmgr_get(f.cache, p, 64 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "nothing could watch it");
	cr_assert_eq(minfo(f.cache).uffd_error, EMFILE, "uffd_error %d",
		     minfo(f.cache).uffd_error);
	unfill(fds, n, &rl);
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &again), 0);
	cr_assert(minfo(again).sources & MRMGR_MONITOR_SRC_UFFD,
		  "userfaultfd runs once descriptors are back (error %d)",
		  minfo(again).uffd_error);
	cr_assert_eq(mrmgr_get(again, q, 64 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "cached by the new cache "
		     "(unwatched %llu, cause %#x, error %d)",
		     (unsigned long long)minfo(again).unwatched,
		     minfo(again).unwatched_causes,
		     minfo(again).unwatched_error);
	/* The source is the process's: the first cache's next get has it
	 * too, without waiting for its back-off. */
	cr_assert_eq(mrmgr_get(f.cache, o, 64 * PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2, "cached by the first cache");
	cr_assert_eq(mrmgr_cache_destroy(again), 0);
	fx_close(&f);
	munmap(p, 64 * PAGE);
	munmap(q, 64 * PAGE);
	munmap(o, 64 * PAGE);
}

Test(retry, uffd_after_full_table_starts_when_asked_again, .timeout = 60)
{
	starts_when_asked_again(MRMGR_MONITOR_UFFD);
}

#ifdef MRMGR_TEST_INTERNAL
/* auto under a sanitizer whose allocator cannot be followed (no hooks
 * interface) takes userfaultfd: the same. The test flag and seam are
 * internal (this suite's build against the internal library only). */
#include "patch.h"
#include "source.h"

Test(retry, auto_under_a_sanitizer_starts_when_asked_again, .timeout = 60)
{
	mrmgr__patch_test_flags |= MRMGR__PATCH_TEST_SANITIZER;
	mrmgr__san_test_iface.absent = 1;
	starts_when_asked_again(MRMGR_MONITOR_AUTO);
}
#endif

/* ------------------------------------------------------------ what is lost */

static int not_watched_warnings;

static void count_warnings(enum mrmgr_log_level level, const char *msg,
			   void *arg)
{
	(void)arg;
	if (level <= MRMGR_LOG_WARN && strstr(msg, "is not watched"))
		not_watched_warnings++;
}

/* A get nothing can watch says so once per cause, as a warning (not only
 * at debug level), and the monitor report names the cause. */
Test(lost, one_warning_per_cause_and_the_cause_named)
{
	struct fixture f;
	char *sh = mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct mrmgr_monitor_info m;
	mrmgr_region_t *r;

	cr_assert_neq(sh, MAP_FAILED);
	memset(sh, 1, 16 * PAGE);
	mrmgr_set_log_handler(count_warnings, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, &big);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(mrmgr_get(f.cache, sh + i * PAGE, PAGE, RW, &r), 0);
		mrmgr_put(r);
	}
	m = minfo(f.cache);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	cr_assert_eq(m.unwatched, 3);
	if (m.sources) {
		cr_assert(m.unwatched_causes & MRMGR_MONITOR_UNWATCHED_SHARED);
		cr_assert_eq(m.unwatched_error, EPERM);
	} else {
		cr_assert(m.unwatched_causes & MRMGR_MONITOR_UNWATCHED_NO_SOURCE);
	}
	cr_assert_eq(not_watched_warnings, 1, "one warning for one cause, "
		     "got %d", not_watched_warnings);
	fx_close(&f);
	munmap(sh, 16 * PAGE);
}

/* ------------------------------------------------------------ the window */

#ifdef MRMGR_TEST_INTERNAL
/* lib/monitor/change.c, reached through the internal test library. */
void mrmgr__mon_change_begin(uint64_t start, uint64_t last);
void mrmgr__mon_change_end(uint64_t start, uint64_t last);

static void change_begin(void *p, size_t n)
{
	mrmgr__mon_change_begin((uintptr_t)p, (uintptr_t)p + n - 1);
}

static void change_end(void *p, size_t n)
{
	mrmgr__mon_change_end((uintptr_t)p, (uintptr_t)p + n - 1);
}

/*
 * A get between a change's begin and the kernel's unmap registers the old
 * pages: it must not be cached, or a thread that maps the address again
 * before the change's end would hit it. In every mode (external here, so
 * it runs whatever sources this build has).
 */
Test(window, registration_during_a_change_is_not_cached)
{
	struct fixture f;
	struct mrmgr_cache_attr a = big;
	char *p = map_rw(16 * PAGE, 1);
	mrmgr_region_t *r;

	need_identity();
	a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	a.monitor = MRMGR_MONITOR_EXTERNAL;
	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags = MRMGR_CACHE_NO_HEADROOM;
	fx_open(&f, NULL, &a);
	change_begin(p, 16 * PAGE);        /* thread A's munmap() begins */
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PAGE, RW, &r), 0);
	cr_assert_eq(write_at(&f, r, p, 'o'), 0, "the old pages, still mapped");
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "not cached: a change was under way");
	cr_assert_eq(minfo(f.cache).window_uncached, 1);
	remap_fixed(p, 16 * PAGE, 2);      /* the kernel unmaps; B maps again */
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PAGE, RW, &r), 0);
	cr_assert_eq(write_at(&f, r, p, 'n'), 0, "B's get before A's end");
	mrmgr_put(r);
	change_end(p, 16 * PAGE);          /* A's munmap() returns */
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, 16 * PAGE);
}

/* A change on other memory does not stop caching; more changes in flight
 * than there are slots stop it everywhere until they end. */
Test(window, slots_overflow_conservatively)
{
	struct fixture f;
	struct mrmgr_cache_attr a = big;
	char *p = map_rw(16 * PAGE, 1), *q = map_rw(100 * PAGE, 1);
	mrmgr_region_t *r;

	a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	a.monitor = MRMGR_MONITOR_EXTERNAL;
	fx_open(&f, NULL, &a);
	change_begin(q, PAGE);
	cr_assert_eq(mrmgr_get(f.cache, p, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "a change elsewhere: cached");
	for (int i = 1; i < 100; i++)
		change_begin(q + (size_t)i * PAGE, PAGE);
	cr_assert_eq(mrmgr_get(f.cache, p + 8 * PAGE, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "100 in flight, 64 slots: not cached");
	for (int i = 0; i < 100; i++)
		change_end(q + (size_t)i * PAGE, PAGE);
	cr_assert_eq(mrmgr_get(f.cache, p + 4 * PAGE, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2, "all ended: cached again");
	fx_close(&f);
	munmap(p, 16 * PAGE);
	munmap(q, 100 * PAGE);
}

/* A fork child does not inherit changes in flight in its parent (their
 * threads do not exist there): it caches again. */
Test(window, fork_child_starts_with_no_change_in_flight)
{
	char *p = map_rw(16 * PAGE, 1);
	pid_t pid;
	int st;

	change_begin(p, 16 * PAGE);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct fixture f;
		struct mrmgr_cache_attr a = big;
		mrmgr_region_t *r;
		int cached;

		a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
		a.monitor = MRMGR_MONITOR_EXTERNAL;
		fx_open(&f, NULL, &a);
		mrmgr_get(f.cache, p, 16 * PAGE, RW, &r);
		mrmgr_put(r);
		cached = sstats(f.ctx).live_mrs == 1;
		fx_close(&f);
		_exit(cached ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	change_end(p, 16 * PAGE);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the child did not cache: a parent's change stayed in flight");
	munmap(p, 16 * PAGE);
}
#endif
