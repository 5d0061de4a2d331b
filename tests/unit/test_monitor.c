/*
 * The memory-event monitor's guarantee, event kind by event kind: after
 * the call that changes memory returns, the next get in the same thread
 * returns a registration of the pages mapped now. Checked on the simulated
 * HCA's page identity: a write through a stale registration is ESTALE.
 *
 * Every kind runs through libc and through raw syscall(), on a region that
 * is idle and one that is held, with the change covering the region
 * (full) or one page of it (partial).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor_helpers.h"

#define LEN (64 * KiB)
#define PAGE ((size_t)4096)

static struct mrmgr_cache_attr big = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
};
/* Raw syscall() changes reach only userfaultfd, which is opt-in. */
static struct mrmgr_cache_attr big_uffd = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
	.max_bytes = 1ull << 32, .monitor = MRMGR_MONITOR_UFFD,
};

/* A write through r at every page of [p, p+len) must land in p. */
static void write_all(struct fixture *f, mrmgr_region_t *r, char *p, size_t len,
		      char byte, const char *what)
{
	for (size_t off = 0; off < len; off += PAGE) {
		int ret = mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
					  (uint64_t)(uintptr_t)(p + off), &byte, 1);

		cr_assert_eq(ret, 0, "%s: write at +%zu: %s", what, off, strerror(ret));
		cr_assert_eq(p[off], byte, "%s: the write did not reach +%zu", what, off);
	}
}

/* ------------------------------------------------------------ primitives */

static int x_munmap(void *p, size_t l, int raw)
{
	return raw ? (int)syscall(SYS_munmap, p, l) : munmap(p, l);
}

static void *x_mmap(void *p, size_t l, int flags, int raw)
{
	int prot = PROT_READ | PROT_WRITE;

	flags |= MAP_PRIVATE | MAP_ANONYMOUS;
	return raw ? (void *)syscall(SYS_mmap, p, l, prot, flags, -1, 0)
		   : mmap(p, l, prot, flags, -1, 0);
}

static void *x_mremap(void *p, size_t ol, size_t nl, int flags, void *dest, int raw)
{
	return raw ? (void *)syscall(SYS_mremap, p, ol, nl, flags, dest)
		   : mremap(p, ol, nl, flags, dest);
}

static int x_madvise(void *p, size_t l, int adv, int raw)
{
	return raw ? (int)syscall(SYS_madvise, p, l, adv) : madvise(p, l, adv);
}

static void map_back(char *p, size_t l, int raw)
{
	cr_assert_eq(x_mmap(p, l, MAP_FIXED_NOREPLACE, raw), (void *)p,
		     "could not map again at %p", (void *)p);
}

/* ------------------------------------------------------------ event kinds */

enum kind { MUNMAP, MAP_FIXED_OVER, MREMAP_MOVE, MREMAP_SHRINK, DONTNEED, FREE };

/*
 * The area is three LENs; the region is the middle one. Change all of it
 * or one page, then leave the area mapped and the region rewritten.
 */
static void event(enum kind k, char *area, int full, int raw)
{
	char *e = full ? area + LEN : area + LEN + PAGE;
	size_t el = full ? LEN : PAGE;

	switch (k) {
	case MUNMAP:
		cr_assert_eq(x_munmap(e, el, raw), 0);
		map_back(e, el, raw);
		break;
	case MAP_FIXED_OVER:
		cr_assert_eq(x_mmap(e, el, MAP_FIXED, raw), (void *)e);
		break;
	case MREMAP_MOVE: {
		void *q = x_mmap(NULL, el, 0, 0);

		cr_assert_neq(q, MAP_FAILED);
		cr_assert_eq(x_mremap(e, el, el, MREMAP_MAYMOVE | MREMAP_FIXED, q, raw), q);
		map_back(e, el, raw);
		munmap(q, el);
		break;
	}
	case MREMAP_SHRINK: {
		/* Shrink the region (inside the area's one mapping) to one
		 * page (full) or by one page (partial). */
		char *r = area + LEN;
		size_t keep = full ? PAGE : LEN - PAGE;

		cr_assert_eq(x_mremap(r, LEN, keep, 0, NULL, raw), (void *)r);
		map_back(r + keep, LEN - keep, raw);
		break;
	}
	case DONTNEED:
		cr_assert_eq(x_madvise(e, el, MADV_DONTNEED, raw), 0);
		break;
	case FREE:
		cr_assert_eq(x_madvise(e, el, MADV_FREE, raw), 0);
		break;
	}
	memset(area + LEN, 'B', LEN);
}

static void run_case(enum kind k, int raw, int in_use, int full)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *area = area_map(3 * LEN, 'A'), *reg = area + LEN;

	need_identity();
	fx_open(&f, NULL, raw ? &big_uffd : &big);
	cr_assert_eq(mrmgr_get(f.cache, reg, LEN, RW, &r1), 0);
	write_all(&f, r1, reg, LEN, 'a', "before");
	uint32_t key1 = mrmgr_region_rkey(r1);
	if (!in_use)
		mrmgr_put(r1);
	uint64_t live = sstats(f.ctx).live_mrs;

	event(k, area, full, raw);

	cr_assert_eq(mrmgr_get(f.cache, reg, LEN, RW, &r2), 0);
	if (uffd_on(f.cache)) {
		cr_assert_neq(mrmgr_region_rkey(r2), key1,
			      "the changed region was handed out again");
		struct mrmgr_monitor_info m = minfo(f.cache);
		cr_assert_geq(m.events, 1);
		cr_assert_geq(m.invalidations, 1);
	}
	write_all(&f, r2, reg, LEN, 'W', "after");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	if (in_use) {
		cr_assert_eq(sstats(f.ctx).live_mrs, live + 1,
			     "a held region stays registered");
		mrmgr_put(r1);
		cr_assert_eq(sstats(f.ctx).live_mrs, live,
			     "the detached region goes at its last put");
	}
	mrmgr_put(r2);
	fx_close(&f);
	area_unmap(area, 3 * LEN);
}

#define CASES(kind, name)                                                     \
	Test(name, libc_idle_full) { run_case(kind, 0, 0, 1); }               \
	Test(name, libc_idle_partial) { run_case(kind, 0, 0, 0); }            \
	Test(name, libc_in_use_full) { run_case(kind, 0, 1, 1); }             \
	Test(name, libc_in_use_partial) { run_case(kind, 0, 1, 0); }          \
	Test(name, syscall_idle_full) { run_case(kind, 1, 0, 1); }            \
	Test(name, syscall_idle_partial) { run_case(kind, 1, 0, 0); }         \
	Test(name, syscall_in_use_full) { run_case(kind, 1, 1, 1); }          \
	Test(name, syscall_in_use_partial) { run_case(kind, 1, 1, 0); }

CASES(MUNMAP, munmap)
CASES(MAP_FIXED_OVER, mmap_fixed)
CASES(MREMAP_MOVE, mremap_move)
CASES(MREMAP_SHRINK, mremap_shrink)
CASES(DONTNEED, madv_dontneed)
CASES(FREE, madv_free)

/* The control: without a monitor the same sequence is a stale write, so
 * the checks above can fail. */
Test(control, no_monitor_hands_out_stale_registration)
{
	struct fixture f;
	struct mrmgr_cache_attr a = big;
	mrmgr_region_t *r1, *r2;
	char *area = area_map(3 * LEN, 'A');
	char w = 'W';

	need_identity();
	a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	a.monitor = MRMGR_MONITOR_NONE;
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, area + LEN, LEN, RW, &r1), 0);
	mrmgr_put(r1);
	event(MUNMAP, area, 1, 1);
	cr_assert_eq(mrmgr_get(f.cache, area + LEN, LEN, RW, &r2), 0);
	cr_assert_eq(r2, r1);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r2),
				     (uint64_t)(uintptr_t)(area + LEN), &w, 1), ESTALE);
	mrmgr_put(r2);
	fx_close(&f);
	area_unmap(area, 3 * LEN);
}

/* ------------------------------------------------------------ loops */

Test(sequence, same_thread_unmap_map_get_write_repeated)
{
	struct fixture f;
	char *p = area_map(LEN, 0);

	need_identity();
	fx_open(&f, NULL, &big_uffd); /* half the changes are raw */
	for (int i = 0; i < 1000; i++) {
		mrmgr_region_t *r;
		int raw = i & 1;

		cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
		mrmgr_put(r);
		cr_assert_eq(x_munmap(p, LEN, raw), 0);
		map_back(p, LEN, raw);
		memset(p, 'n', PAGE);
		cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
		write_all(&f, r, p, PAGE, 'W', "iteration");
		mrmgr_put(r);
	}
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	area_unmap(p, LEN);
}

struct handoff {
	struct fixture f;
	char *p;
	int turn; /* 0: mapper's, 1: getter's, 2: done */
	pthread_mutex_t m;
	pthread_cond_t cv;
};

static void *getter(void *arg)
{
	struct handoff *h = arg;

	for (;;) {
		mrmgr_region_t *r;

		pthread_mutex_lock(&h->m);
		while (h->turn == 0)
			pthread_cond_wait(&h->cv, &h->m);
		if (h->turn == 2) {
			pthread_mutex_unlock(&h->m);
			return NULL;
		}
		pthread_mutex_unlock(&h->m);
		cr_assert_eq(mrmgr_get(h->f.cache, h->p, LEN, RW, &r), 0);
		write_all(&h->f, r, h->p, PAGE, 'G', "other thread");
		mrmgr_put(r);
		pthread_mutex_lock(&h->m);
		h->turn = 0;
		pthread_cond_broadcast(&h->cv);
		pthread_mutex_unlock(&h->m);
	}
}

/* Another thread that learns of the return (here through a mutex) is
 * covered too. */
Test(sequence, other_thread_observing_the_return)
{
	struct handoff h = { .turn = 0 };
	pthread_t t;

	need_identity();
	pthread_mutex_init(&h.m, NULL);
	pthread_cond_init(&h.cv, NULL);
	h.p = area_map(LEN, 0);
	fx_open(&h.f, NULL, &big_uffd); /* half the changes are raw */
	pthread_create(&t, NULL, getter, &h);
	for (int i = 0; i < 300; i++) {
		cr_assert_eq(x_munmap(h.p, LEN, i & 1), 0);
		map_back(h.p, LEN, i & 1);
		memset(h.p, 'm', PAGE);
		pthread_mutex_lock(&h.m);
		h.turn = 1;
		pthread_cond_broadcast(&h.cv);
		while (h.turn == 1)
			pthread_cond_wait(&h.cv, &h.m);
		pthread_mutex_unlock(&h.m);
	}
	pthread_mutex_lock(&h.m);
	h.turn = 2;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.m);
	pthread_join(t, NULL);
	cr_assert_eq(sstats(h.f.ctx).stale_accesses, 0);
	fx_close(&h.f);
	area_unmap(h.p, LEN);
}

/* ------------------------------------------------------------ heap */

static void get_write_put(struct fixture *f, char *p, size_t len, const char *what)
{
	mrmgr_region_t *r;

	cr_assert_eq(mrmgr_get(f->cache, p, len, RW, &r), 0, "%s", what);
	write_all(f, r, (char *)(((uintptr_t)p + PAGE - 1) & ~(PAGE - 1)), PAGE,
		  'H', what);
	mrmgr_put(r);
}

static void brk_case(int raw)
{
	struct fixture f;
	char *base, *p;

	need_identity();
	/* Give malloc a large untrimmed top, so nothing it does during the
	 * test moves the break after ours. */
	mallopt(M_TRIM_THRESHOLD, 512 * MiB);
	mallopt(M_MMAP_THRESHOLD, 32 * MiB);
	free(malloc(16 * MiB));
	fx_open(&f, NULL, &big);
	base = sbrk(0);
	p = (char *)(((uintptr_t)base + PAGE - 1) & ~(PAGE - 1));
	cr_assert_neq(sbrk((intptr_t)(p - base) + (intptr_t)LEN), (void *)-1);
	memset(p, 1, LEN);
	get_write_put(&f, p, LEN, "heap");
	/* Give it back, then take the same addresses again. */
	if (raw)
		cr_assert_eq((char *)syscall(SYS_brk, base), base);
	else
		cr_assert_neq(sbrk(-((intptr_t)(p - base) + (intptr_t)LEN)), (void *)-1);
	if (raw) /* glibc caches the break: tell it */
		cr_assert_eq(brk(base), 0);
	cr_assert_eq(sbrk((intptr_t)(p - base) + (intptr_t)LEN), base);
	memset(p, 2, LEN);
	get_write_put(&f, p, LEN, "heap again");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	cr_assert_neq(sbrk(-((intptr_t)(p - base) + (intptr_t)LEN)), (void *)-1);
	fx_close(&f);
}

Test(heap, sbrk_shrink) { brk_case(0); }
Test(heap, raw_brk_shrink) { brk_case(1); }

Test(heap, free_and_malloc_of_mmapped_chunks)
{
	struct fixture f;

	need_identity();
	need_glibc_malloc();
	fx_open(&f, NULL, &big);
	/* Each block its own mapping (no dynamic threshold). */
	mallopt(M_MMAP_THRESHOLD, (int)MiB);
	for (int i = 0; i < 20; i++) {
		char *p = malloc(4 * MiB);

		cr_assert_not_null(p);
		memset(p, i, 4 * MiB);
		get_write_put(&f, p, 4 * MiB, "malloc'd block");
		free(p);
	}
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	if (uffd_on(f.cache))
		cr_assert_geq(minfo(f.cache).invalidations, 19);
	fx_close(&f);
}

Test(heap, trim_on_free)
{
	struct fixture f;

	need_identity();
	need_glibc_malloc();
	/* Keep 1 MiB blocks on the main heap and trim it at 128 KiB. */
	mallopt(M_MMAP_THRESHOLD, 32 * MiB);
	mallopt(M_TRIM_THRESHOLD, 128 * KiB);
	fx_open(&f, NULL, &big);
	for (int i = 0; i < 10; i++) {
		char *p = malloc(MiB);

		cr_assert_not_null(p);
		memset(p, i, MiB);
		get_write_put(&f, p, MiB, "heap block");
		free(p); /* the top of the heap goes back with brk() */
	}
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
}

Test(heap, malloc_trim)
{
	struct fixture f;

	need_identity();
	need_glibc_malloc();
	mallopt(M_MMAP_THRESHOLD, 32 * MiB);
	mallopt(M_TRIM_THRESHOLD, 512 * MiB);
	fx_open(&f, NULL, &big);
	for (int i = 0; i < 10; i++) {
		char *keep, *p = malloc(MiB);

		keep = malloc(64); /* pins the top so only madvise can trim */
		cr_assert_not_null(p);
		memset(p, i, MiB);
		get_write_put(&f, p, MiB, "heap block");
		free(p);
		malloc_trim(0); /* madvise(MADV_DONTNEED) of the free block */
		p = malloc(MiB);
		memset(p, i, MiB);
		get_write_put(&f, p, MiB, "after trim");
		free(p);
		free(keep);
	}
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
}

/* ------------------------------------------------------------ unwatchable */

static void expect_uncached(struct fixture *f, char *p, size_t len)
{
	mrmgr_region_t *r;
	uint64_t unwatched = minfo(f->cache).unwatched;
	uint64_t live = sstats(f->ctx).live_mrs;

	cr_assert_eq(mrmgr_get(f->cache, p, len, RW, &r), 0);
	write_all(f, r, p, len, 'S', "shared");
	mrmgr_put(r);
	cr_assert_eq(sstats(f->ctx).live_mrs, live, "not cached: gone at its put");
	if (uffd_on(f->cache))
		cr_assert_eq(minfo(f->cache).unwatched, unwatched + 1);
}

Test(unwatchable, sysv_shm_is_not_cached_and_shmdt_is_safe)
{
	struct fixture f;
	int id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
	char *p, *q;

	need_identity();
	cr_assert_geq(id, 0);
	p = shmat(id, NULL, 0);
	cr_assert_neq(p, (void *)-1);
	shmctl(id, IPC_RMID, NULL);
	memset(p, 1, LEN);
	fx_open(&f, NULL, &big);
	expect_uncached(&f, p, LEN);
	cr_assert_eq(shmdt(p), 0);
	id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
	q = shmat(id, p, 0);
	cr_assert_eq(q, p);
	shmctl(id, IPC_RMID, NULL);
	memset(q, 2, LEN);
	expect_uncached(&f, q, LEN);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	shmdt(q);
	fx_close(&f);
}

Test(unwatchable, shared_memory_and_madv_remove)
{
	struct fixture f;
	char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	need_identity();
	cr_assert_neq(p, MAP_FAILED);
	memset(p, 1, LEN);
	fx_open(&f, NULL, &big);
	expect_uncached(&f, p, LEN);
	/* MADV_REMOVE (shared memory only) frees the pages: nothing cached,
	 * so nothing stale. */
	cr_assert_eq(madvise(p, LEN, MADV_REMOVE), 0);
	memset(p, 2, LEN);
	expect_uncached(&f, p, LEN);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, LEN);
}

Test(unwatchable, private_file_mapping_is_not_cached)
{
	struct fixture f;
	char path[] = "/tmp/mrmgr-monitor-XXXXXX";
	int fd = mkstemp(path);
	char *p;

	need_identity();
	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(ftruncate(fd, LEN), 0);
	p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	memset(p, 1, LEN);
	fx_open(&f, NULL, &big);
	expect_uncached(&f, p, LEN);
	fx_close(&f);
	munmap(p, LEN);
	close(fd);
}

/* ------------------------------------------------------------ precision */

Test(precision, unrelated_changes_keep_the_region)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *area = map_rw(3 * LEN, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, area + LEN, LEN, RW, &r1), 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	/* Neighbours change; the region's pages do not. */
	cr_assert_eq(madvise(area, LEN, MADV_DONTNEED), 0);
	cr_assert_eq(munmap(area + 2 * LEN, LEN), 0);
	cr_assert_eq(mrmgr_get(f.cache, area + LEN, LEN, RW, &r2), 0);
	cr_assert_eq(mrmgr_region_rkey(r2), key1,
		     "a change next to the region must not invalidate it");
	mrmgr_put(r2);
	fx_close(&f);
	munmap(area, 2 * LEN);
}

Test(precision, mremap_growing_in_place_keeps_the_region)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *area = area_map(4 * LEN, 0); /* the hole stays free to grow into */

	cr_assert_eq(munmap(area + 2 * LEN, 2 * LEN), 0);
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, area, 2 * LEN, RW, &r1), 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	cr_assert_eq(mremap(area, 2 * LEN, 4 * LEN, 0), (void *)area);
	cr_assert_eq(mrmgr_get(f.cache, area, LEN, RW, &r2), 0);
	cr_assert_eq(mrmgr_region_rkey(r2), key1);
	mrmgr_put(r2);
	fx_close(&f);
	area_unmap(area, 4 * LEN);
}

Test(precision, every_cache_sees_the_event)
{
	struct fixture f1, f2;
	mrmgr_region_t *a, *b;
	char *p = map_rw(LEN, 0);

	need_identity();
	fx_open(&f1, NULL, &big);
	fx_open(&f2, NULL, &big);
	cr_assert_eq(mrmgr_get(f1.cache, p, LEN, RW, &a), 0);
	cr_assert_eq(mrmgr_get(f2.cache, p, LEN, RW, &b), 0);
	mrmgr_put(a);
	mrmgr_put(b);
	remap_fixed(p, LEN, 'x');
	cr_assert_eq(mrmgr_get(f1.cache, p, LEN, RW, &a), 0);
	cr_assert_eq(mrmgr_get(f2.cache, p, LEN, RW, &b), 0);
	write_all(&f1, a, p, LEN, '1', "first cache");
	write_all(&f2, b, p, LEN, '2', "second cache");
	mrmgr_put(a);
	mrmgr_put(b);
	fx_close(&f1);
	fx_close(&f2);
	munmap(p, LEN);
}

/* Private MAP_HUGETLB memory is watched (UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
 * needs free huge pages (e.g. echo 8 > /proc/sys/vm/nr_hugepages). */
Test(hugetlb, private_huge_pages_unmap_and_map_again)
{
	const size_t huge = 2 * MiB;
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *p = mmap(NULL, huge, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);

	if (p == MAP_FAILED)
		cr_skip_test("no free 2 MiB huge pages");
	need_identity();
	memset(p, 1, huge);
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, p + PAGE, PAGE, RW, &r1), 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	int cached = sstats(f.ctx).live_mrs == 1;
	mrmgr_put(r1);
	if (uffd_on(f.cache) &&
	    (minfo(f.cache).uffd_features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM))
		cr_assert(cached && sstats(f.ctx).live_mrs == 1,
			  "private huge pages are watched, so cached");
	cr_assert_eq(munmap(p, huge), 0);
	cr_assert_eq(mmap(p, huge, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_FIXED_NOREPLACE,
			  -1, 0), (void *)p);
	memset(p, 2, huge);
	cr_assert_eq(mrmgr_get(f.cache, p + PAGE, PAGE, RW, &r2), 0);
	cr_assert_neq(mrmgr_region_rkey(r2), key1);
	write_all(&f, r2, p + PAGE, PAGE, 'W', "huge page");
	mrmgr_put(r2);
	fx_close(&f);
	munmap(p, huge);
}
