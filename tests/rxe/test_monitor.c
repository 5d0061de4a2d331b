/*
 * Stale registrations WITHOUT mrmgr_invalidate(): the memory-event monitor
 * on a real device.
 *
 * test_stale.c shows on the device that a registration outliving its pages
 * misdirects RDMA WRITEs, and that mrmgr_invalidate() cures it. Here
 * nobody tells the cache anything: the memory under a cached registration
 * is changed (munmap + mmap at the same address, by libc and by raw
 * syscall; free() + malloc() of 4 MiB blocks; madvise(MADV_DONTNEED);
 * mremap() to a new address with new memory mapped at the old one), then
 * the very same thread calls mrmgr_get() again and RDMA WRITEs a pattern
 * through the returned keys: the bytes must arrive in the NEW memory.
 *
 * The cache runs in its default monitor mode (auto); every test first
 * asserts that a real event source watches the region (userfaultfd in the
 * qemu guest's 6.1 kernel). The "held" variants keep the old region across
 * the change and WRITE through its rkey afterwards: the completion is a
 * success yet the new memory is untouched, which proves the change really
 * left the old registration stale (so each test can fail).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache_helpers.h"

#define LEN (64 * RDMA_KiB)
#define BLOCK (4 * RDMA_MiB)

enum change {
	CH_MUNMAP,      /* munmap + mmap at the same address */
	CH_MUNMAP_RAW,  /* the same by syscall(SYS_munmap / SYS_mmap) */
	CH_DONTNEED,    /* madvise(MADV_DONTNEED): new zero pages */
	CH_MREMAP,      /* mremap to another address, new memory at the old */
};

static const char *const change_name[] = {
	[CH_MUNMAP] = "munmap+mmap",
	[CH_MUNMAP_RAW] = "syscall(SYS_munmap)+syscall(SYS_mmap)",
	[CH_DONTNEED] = "madvise(MADV_DONTNEED)",
	[CH_MREMAP] = "mremap move + mmap at the old address",
};

struct mon {
	struct rdma_fixture f;
	mrmgr_cache_t *cache;  /* default attributes: monitor auto */
	mrmgr_cache_t *local;  /* WRITE sources */
	char *src;
	size_t src_len;
	mrmgr_region_t *src_r;
};

static void mon_open(struct mon *m, size_t src_len)
{
	rdma_fixture_open(&m->f, RDMA_FX_QP);
	m->cache = rxe_cache(&m->f, 0, 0, 0);
	m->local = rxe_cache(&m->f, 0, 0, 0);
	m->src_len = src_len;
	m->src = rdma_map(src_len, 'W');
	m->src_r = rxe_get(m->local, m->src, src_len, IBV_ACCESS_LOCAL_WRITE);
}

static void mon_close(struct mon *m)
{
	mrmgr_put(m->src_r);
	cr_assert_eq(rxe_stats(m->cache).regions_in_use, 0);
	cr_assert_eq(mrmgr_cache_destroy(m->cache), 0);
	cr_assert_eq(mrmgr_cache_destroy(m->local), 0);
	rdma_fixture_close(&m->f); /* fails if an MR leaked */
	munmap(m->src, m->src_len);
}

static struct mrmgr_monitor_info mon_info(mrmgr_cache_t *c)
{
	struct mrmgr_monitor_info i;

	cr_assert_eq(mrmgr_cache_query_monitor(c, &i, sizeof(i)), 0);
	return i;
}

/*
 * The region just obtained must be cached under a real source: without
 * one the cache would not keep it, and these tests would pass vacuously.
 */
static void assert_watched(struct mon *m, const char *what)
{
	struct mrmgr_monitor_info i = mon_info(m->cache);
	const uint32_t real = MRMGR_MONITOR_SRC_UFFD | MRMGR_MONITOR_SRC_HOOKS |
			      MRMGR_MONITOR_SRC_PATCH;

	cr_assert(i.sources & real,
		  "no real memory-event source covers the cache (sources %#x, "
		  "mode %u, uffd_error %d, hooks_error %d)", i.sources, i.mode,
		  i.uffd_error, i.hooks_error);
	cr_assert_eq(i.unwatched, 0, "%s: served uncached", what);
	cr_assert_eq(rxe_stats(m->cache).uncached, 0);
	if (i.sources & MRMGR_MONITOR_SRC_UFFD)
		cr_assert_geq(i.watched_ranges, 1, "%s: no range registered "
			      "with userfaultfd", what);
	cr_log_info("%s: %s watched by %s%s (mode %u, %llu uffd range(s), "
		    "VMA lookup by %s)", m->f.name, what,
		    i.sources & MRMGR_MONITOR_SRC_UFFD ? "userfaultfd" :
		    i.sources & MRMGR_MONITOR_SRC_PATCH ? "patched libc" : "",
		    i.sources & MRMGR_MONITOR_SRC_HOOKS ? " hooks" : "", i.mode,
		    (unsigned long long)i.watched_ranges,
		    i.uffd_flags & MRMGR_MONITOR_UFFD_PROCMAP_QUERY ?
		    "PROCMAP_QUERY" : "/proc/self/maps");
}

static enum ibv_wc_status write_to(struct mon *m, void *dst, uint32_t rkey,
				   size_t len)
{
	return rdma_write(&m->f, m->src, mrmgr_region_lkey(m->src_r),
			  (uintptr_t)dst, rkey, len);
}

/* Replace the pages at buf[0, LEN) as @p ch says; buf stays mapped. */
static void change(enum change ch, char *buf, char **moved)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
	void *q;

	switch (ch) {
	case CH_MUNMAP:
		rdma_remap_same_address(buf, LEN, 'B');
		break;
	case CH_MUNMAP_RAW:
		cr_assert_eq(syscall(SYS_munmap, buf, LEN), 0);
		q = (void *)syscall(SYS_mmap, buf, LEN, prot, flags, -1, 0);
		cr_assert_eq(q, (void *)buf, "raw mmap at the same address");
		memset(buf, 'B', LEN);
		break;
	case CH_DONTNEED:
		cr_assert_eq(madvise(buf, LEN, MADV_DONTNEED), 0);
		rdma_expect_bytes(buf, LEN, 0, "MADV_DONTNEED gave zero pages");
		break;
	case CH_MREMAP:
		/* A reserved target, replaced by the move. */
		*moved = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		cr_assert_neq(*moved, MAP_FAILED);
		q = mremap(buf, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, *moved);
		cr_assert_eq(q, (void *)*moved, "mremap: %s", strerror(errno));
		q = mmap(buf, LEN, prot, flags, -1, 0);
		cr_assert_eq(q, (void *)buf, "mmap at the old address");
		memset(buf, 'B', LEN);
		break;
	}
}

/*
 * Get, WRITE, (put unless @p hold); change the memory; get again with no
 * mrmgr_invalidate(); WRITE a pattern through the new keys: it must be in
 * the new memory.
 */
static void stale_without_invalidate(enum change ch, int hold)
{
	const char *name = change_name[ch];
	struct mon m;
	char *buf, *moved = NULL;
	mrmgr_region_t *r, *r2;

	/* Raw syscall() changes reach only userfaultfd, which is opt-in:
	 * the variable fills the mode the caches leave unset. */
	if (ch == CH_MUNMAP_RAW)
		setenv("MRMGR_MONITOR", "uffd", 1);
	mon_open(&m, LEN);
	unsetenv("MRMGR_MONITOR");
	buf = rdma_map(LEN, 'A');
	r = rxe_get(m.cache, buf, LEN, RXE_RW);
	assert_watched(&m, "the buffer");
	uint32_t old_rkey = mrmgr_region_rkey(r);

	cr_assert_eq(write_to(&m, buf, old_rkey, LEN), IBV_WC_SUCCESS);
	rdma_expect_bytes(buf, LEN, 'W', "WRITE into the first pages");
	if (!hold) {
		mrmgr_put(r);
		cr_assert_eq(rxe_stats(m.cache).regions, 1, "cached after the put");
	}
	struct mrmgr_stats st0 = rxe_stats(m.cache);
	struct mrmgr_monitor_info i0 = mon_info(m.cache);

	change(ch, buf, &moved);
	cr_log_info("%s: %s of %p (region %s), no mrmgr_invalidate()", m.f.name,
		    name, (void *)buf, hold ? "held" : "idle in the cache");

	/* The same thread, at once: no invalidate, no sleep. */
	r2 = rxe_get(m.cache, buf, LEN, RXE_RW);
	struct mrmgr_stats st1 = rxe_stats(m.cache);
	struct mrmgr_monitor_info i1 = mon_info(m.cache);

	rdma_fill_pattern(m.src, LEN, 7 + ch);
	cr_assert_eq(write_to(&m, buf, mrmgr_region_rkey(r2), LEN), IBV_WC_SUCCESS);
	/* The point of it all; the bookkeeping is checked after. */
	rdma_expect_same(buf, m.src, LEN, "WRITE after the change, through "
			 "keys from mrmgr_get without invalidate, lands in the "
			 "new pages");
	cr_log_info("%s: old rkey %#x, new rkey %#x; cache applied %llu "
		    "event(s), invalidated %llu region(s)", m.f.name, old_rkey,
		    mrmgr_region_rkey(r2),
		    (unsigned long long)(i1.events - i0.events),
		    (unsigned long long)(i1.invalidations - i0.invalidations));
	cr_assert_eq(st1.registrations, st0.registrations + 1, "a new registration");
	cr_assert_geq(i1.invalidations, i0.invalidations + 1,
		      "the event invalidated the region");
	if (moved)
		rdma_expect_bytes(moved, LEN, 'W',
				  "the moved pages kept the first WRITE, untouched since");

	if (hold) {
		/* Control: the old MR is registered still (held), and it
		 * covers the old pages, not the new ones. */
		cr_assert_neq(r2, r);
		memset(m.src, 'X', LEN);
		cr_assert_eq(write_to(&m, buf, old_rkey, LEN), IBV_WC_SUCCESS,
			     "the held stale rkey still works on the device...");
		rdma_fill_pattern(m.src, LEN, 7 + ch);
		rdma_expect_same(buf, m.src, LEN, "...but its WRITE misses the "
				 "new pages (the old registration was stale)");
		if (moved)
			rdma_expect_bytes(moved, LEN, 'X', "the stale rkey's WRITE "
					  "went to the old pages, now at the moved address");
		mrmgr_put(r);
	}
	mrmgr_put(r2);
	assert_watched(&m, "the new pages");
	cr_assert_eq(mrmgr_invalidate(m.cache, buf, LEN), 0);
	munmap(buf, LEN);
	if (moved)
		munmap(moved, LEN);
	mon_close(&m);
}

Test(rxe_monitor, munmap_mmap_idle)
{
	stale_without_invalidate(CH_MUNMAP, 0);
}

Test(rxe_monitor, munmap_mmap_held)
{
	stale_without_invalidate(CH_MUNMAP, 1);
}

Test(rxe_monitor, raw_syscall_munmap_mmap_idle)
{
	stale_without_invalidate(CH_MUNMAP_RAW, 0);
}

Test(rxe_monitor, raw_syscall_munmap_mmap_held)
{
	stale_without_invalidate(CH_MUNMAP_RAW, 1);
}

Test(rxe_monitor, madvise_dontneed_idle)
{
	stale_without_invalidate(CH_DONTNEED, 0);
}

Test(rxe_monitor, madvise_dontneed_held)
{
	stale_without_invalidate(CH_DONTNEED, 1);
}

Test(rxe_monitor, mremap_move_idle)
{
	stale_without_invalidate(CH_MREMAP, 0);
}

Test(rxe_monitor, mremap_move_held)
{
	stale_without_invalidate(CH_MREMAP, 1);
}

/* glibc's chunk header: bit 1 of the size word marks an mmap'd chunk. */
static int chunk_is_mmapped(const void *p)
{
	uintptr_t h = (uintptr_t)p - sizeof(size_t);

	/* The header lies before the object, on purpose: hide the pointer's
	 * origin from the compiler's bounds checks. */
	__asm__("" : "+r"(h));
	return (*(const size_t *)h & 2) != 0;
}

/*
 * free() + malloc() of 4 MiB blocks: glibc mmaps such blocks and unmaps
 * them in free() with its own internal call (no libc symbol a hook could
 * interpose); the next malloc() usually maps the same address again.
 * Iterations where it does not are skipped, and said so.
 */
Test(rxe_monitor, free_malloc_4mib_blocks)
{
	enum { ROUNDS = 3 };
	struct mon m;
	int same = 0;

	/*
	 * glibc raises its mmap threshold to the size of an mmap'd chunk
	 * it frees (up to 32 MiB), after which 4 MiB blocks come from the
	 * heap; a fixed threshold keeps them mmap'd, as every round needs.
	 */
	cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 1024 * 1024), 1);
	mon_open(&m, BLOCK);
	for (int round = 0; round < ROUNDS; round++) {
		char *p = malloc(BLOCK), *q;
		mrmgr_region_t *r;

		cr_assert_not_null(p);
		cr_assert(chunk_is_mmapped(p), "a 4 MiB block is mmap'd by glibc");
		memset(p, 'A', BLOCK);
		r = rxe_get(m.cache, p, BLOCK, RXE_RW);
		assert_watched(&m, "the 4 MiB block");
		memset(m.src, 'W', BLOCK);
		cr_assert_eq(write_to(&m, p, mrmgr_region_rkey(r), BLOCK),
			     IBV_WC_SUCCESS);
		rdma_expect_bytes(p, BLOCK, 'W', "WRITE into the first block");
		mrmgr_put(r);
		struct mrmgr_stats st0 = rxe_stats(m.cache);
		struct mrmgr_monitor_info i0 = mon_info(m.cache);

		free(p);
		q = malloc(BLOCK);
		cr_assert_not_null(q);
		if (q != p) {
			cr_log_info("%s: round %d: the new block is at %p, not %p: "
				    "round skipped", m.f.name, round, (void *)q,
				    (void *)p);
			free(q);
			continue;
		}
		same++;
		cr_log_info("%s: round %d: free(%p) + malloc(4 MiB) gave the same "
			    "address (mmap'd: %d), no mrmgr_invalidate()", m.f.name,
			    round, (void *)p, chunk_is_mmapped(q));
		memset(q, 'B', BLOCK);
		r = rxe_get(m.cache, q, BLOCK, RXE_RW);
		rdma_fill_pattern(m.src, BLOCK, 100 + round);
		cr_assert_eq(write_to(&m, q, mrmgr_region_rkey(r), BLOCK),
			     IBV_WC_SUCCESS);
		rdma_expect_same(q, m.src, BLOCK, "WRITE into the new 4 MiB block "
				 "through keys from mrmgr_get without invalidate");
		struct mrmgr_monitor_info i1 = mon_info(m.cache);

		cr_assert_eq(rxe_stats(m.cache).registrations, st0.registrations + 1,
			     "a new registration");
		cr_assert_geq(i1.invalidations, i0.invalidations + 1);
		mrmgr_put(r);
		free(q);
	}
	cr_log_info("%s: %d of %d rounds reused the address", m.f.name, same,
		    ROUNDS);
	mon_close(&m);
	if (same == 0)
		cr_skip_test("malloc never returned the freed block's address");
}

/* ------------------------------------------------------------ issue 11 */

/*
 * Issue 11's cases 1, 2 and 4 with RDMA byte checks. They need a source
 * that sees both sides of a change (the patched libc, or the hooks); where
 * the default mode is userfaultfd alone (a build without the patched libc)
 * they skip. MRMGR_TEST_TORTURE_EVENTS sets the number of gets (default
 * 400).
 */
static int two_sided(mrmgr_cache_t *c)
{
	struct mrmgr_monitor_info i = mon_info(c);

	return i.sources && i.sources != MRMGR_MONITOR_SRC_UFFD;
}

static void need_two_sided(struct mon *m)
{
	if (!two_sided(m->cache)) {
		uint32_t s = mon_info(m->cache).sources;

		mon_close(m);
		cr_skip_test("the default mode is userfaultfd alone here "
			     "(sources %#x): one-sided; passes with the "
			     "patched-libc source", s);
	}
}

static uint64_t gets_wanted(void)
{
	const char *e = getenv("MRMGR_TEST_TORTURE_EVENTS");

	return e && *e ? strtoull(e, NULL, 10) : 400;
}

#define CHECK_LEN ((size_t)4096)

struct mt {
	struct mon *m;
	pthread_mutex_t qp;     /* one QP: WRITEs one at a time */
	uint64_t iters;
	uint64_t bad, writes;
};

/* WRITE a fresh pattern through r into dst and compare, under the QP lock;
 * returns 1 when the bytes arrived. */
static int write_check(struct mt *t, mrmgr_region_t *r, char *dst,
		       unsigned int seed)
{
	int ok;

	pthread_mutex_lock(&t->qp);
	rdma_fill_pattern(t->m->src, CHECK_LEN, seed);
	ok = write_to(t->m, dst, mrmgr_region_rkey(r), CHECK_LEN) ==
		     IBV_WC_SUCCESS &&
	     !memcmp(dst, t->m->src, CHECK_LEN);
	t->writes++;
	pthread_mutex_unlock(&t->qp);
	return ok;
}

/* Case 1: each thread its own 256 KiB buffers, malloc/free, no lock. */
static void *alloc_thread(void *arg)
{
	struct mt *t = arg;
	uint64_t bad = 0;

	for (uint64_t i = 0; i < t->iters; i++) {
		const size_t n = 256 * 1024;
		char *p = malloc(n);
		mrmgr_region_t *r;

		cr_assert_not_null(p);
		memset(p, 'B', n);
		r = rxe_get(t->m->cache, p, n, RXE_RW);
		bad += !write_check(t, r, p + n - CHECK_LEN, (unsigned int)i);
		mrmgr_put(r);
		free(p);
	}
	__atomic_fetch_add(&t->bad, bad, __ATOMIC_RELAXED);
	return NULL;
}

Test(rxe_monitor, two_threads_malloc_free_same_size, .timeout = 900)
{
	static struct mt t;
	struct mon m;
	pthread_t th[2];

	cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
	mon_open(&m, LEN);
	need_two_sided(&m);
	memset(&t, 0, sizeof(t));
	t.m = &m;
	pthread_mutex_init(&t.qp, NULL);
	t.iters = gets_wanted() / 2;
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, alloc_thread, &t), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_log_info("%s: %llu WRITEs, %llu not in the new pages", m.f.name,
		    (unsigned long long)t.writes, (unsigned long long)t.bad);
	cr_assert_eq(t.bad, 0, "WRITEs that landed in freed pages");
	mon_close(&m);
}

/* Case 2: a buffer grows page by page (headroom reaches the neighbour)
 * while another thread discards the neighbour and WRITEs into it. */
struct hr {
	struct mt t;
	char *base;
	int stop;
};

static void *neighbour_thread(void *arg)
{
	struct hr *h = arg;
	char *nb = h->base + 64 * 4096;
	uint64_t bad = 0;
	unsigned int seed = 1;

	while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
		mrmgr_region_t *r;

		cr_assert_eq(madvise(nb, 64 * 4096, MADV_DONTNEED), 0);
		memset(nb, 'N', 64 * 4096);
		r = rxe_get(h->t.m->cache, nb, 64 * 4096, RXE_RW);
		bad += !write_check(&h->t, r, nb + 63 * 4096, seed++);
		mrmgr_put(r);
	}
	__atomic_fetch_add(&h->t.bad, bad, __ATOMIC_RELAXED);
	return NULL;
}

Test(rxe_monitor, headroom_next_to_madvise_dontneed, .timeout = 900)
{
	static struct hr h;
	struct mon m;
	pthread_t th;
	uint64_t rounds = gets_wanted() / 64 + 1;

	mon_open(&m, LEN);
	need_two_sided(&m);
	memset(&h, 0, sizeof(h));
	h.t.m = &m;
	pthread_mutex_init(&h.t.qp, NULL);
	h.base = rdma_map(128 * 4096, 'G');
	cr_assert_eq(pthread_create(&th, NULL, neighbour_thread, &h), 0);
	for (uint64_t k = 0; k < rounds; k++) {
		for (size_t n = 1; n <= 64; n++) {
			mrmgr_region_t *r = rxe_get(m.cache, h.base, n * 4096, RXE_RW);

			h.t.bad += !write_check(&h.t, r, h.base + (n - 1) * 4096,
						(unsigned int)n);
			mrmgr_put(r);
		}
		cr_assert_eq(mrmgr_invalidate(m.cache, h.base, 64 * 4096), 0);
	}
	__atomic_store_n(&h.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	cr_log_info("%s: %llu WRITEs, %llu headroom bytes, %llu wrong", m.f.name,
		    (unsigned long long)h.t.writes,
		    (unsigned long long)rxe_stats(m.cache).headroom_bytes,
		    (unsigned long long)h.t.bad);
	cr_assert_gt(rxe_stats(m.cache).headroom_bytes, 0, "headroom is on");
	cr_assert_eq(h.t.bad, 0);
	munmap(h.base, 128 * 4096);
	mon_close(&m);
}

/* Case 4: madvise() fails (a hole) after discarding the part before it;
 * the next get's WRITE must land in the new pages. */
Test(rxe_monitor, failed_madvise_discarded_part)
{
	struct mon m;
	char *p;
	mrmgr_region_t *r;

	mon_open(&m, LEN);
	need_two_sided(&m);
	p = rdma_map(3 * LEN, 'A');
	cr_assert_eq(munmap(p + LEN, LEN), 0);
	r = rxe_get(m.cache, p, LEN, RXE_RW);
	mrmgr_put(r);
	cr_assert_eq(madvise(p, 3 * LEN, MADV_DONTNEED), -1);
	cr_assert_eq(errno, ENOMEM);
	memset(p, 'B', LEN);
	r = rxe_get(m.cache, p, LEN, RXE_RW);
	rdma_fill_pattern(m.src, LEN, 11);
	cr_assert_eq(write_to(&m, p, mrmgr_region_rkey(r), LEN), IBV_WC_SUCCESS);
	rdma_expect_same(p, m.src, LEN, "WRITE after a failed madvise lands in "
			 "the new pages");
	mrmgr_put(r);
	munmap(p, LEN);
	munmap(p + 2 * LEN, LEN);
	mon_close(&m);
}
