/*
 * The patch source: libc's own entry points redirected in the process.
 * It installs and passes its self-test; every hooked call, the ones glibc
 * makes inside free(), realloc(), heap trimming and malloc_trim()
 * included, reports the range it changes; return values and errno are
 * those of plain libc; patching while other threads unmap does not
 * crash; the fallback leaves libc as it was.
 *
 * Criterion runs every test in a process of its own, so each one starts
 * with an unpatched libc.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor_helpers.h"
#include "monitor.h"
#include "patch.h"

#define PG ((size_t)4096)

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

static struct mrmgr_cache_attr patch_only = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
	.max_bytes = 1ull << 32,
	.monitor = MRMGR_MONITOR_PATCH,
};

static const char *const names[MRMGR__PT_COUNT] = {
	"munmap", "mremap", "madvise", "mmap", "brk", "shmat", "shmdt", "sbrk",
	"mprotect",
};

/* What the patched libc reports as its sources: under a sanitizer it
 * runs beside the allocator's hooks (doc/monitor.md). */
static uint32_t patch_sources(void)
{
	return MRMGR_MONITOR_SRC_PATCH |
	       (sanitizer_runtime() ? MRMGR_MONITOR_SRC_SANITIZER : 0);
}

static void open_patch(struct fixture *f)
{
	fx_open(f, NULL, &patch_only);
	struct mrmgr_monitor_info m = minfo(f->cache);
	cr_assert_eq(m.patch_error, 0, "patch source: %s", strerror(m.patch_error));
	cr_assert_eq(m.sources, patch_sources());
	cr_assert_eq(m.patch_targets, MRMGR__PT_ALWAYS);
}

/* The first bytes of each target, as libc has them now. */
static void snapshot(unsigned char out[MRMGR__PT_COUNT][16])
{
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);

	cr_assert_not_null(libc);
	for (int t = 0; t < MRMGR__PT_COUNT; t++) {
		void *fn = dlsym(libc, names[t]);

		cr_assert_not_null(fn);
		memcpy(out[t], fn, 16);
	}
	dlclose(libc);
}

/* Events from now on about memory in [p, p + l); mark_addr keeps p
 * (the compiler objects to a freed pointer's value). */
static uint64_t mark;
static uintptr_t mark_addr;
static void watch(void *p, size_t l)
{
	mrmgr__mon_filter_add((uintptr_t)p, (uintptr_t)p + l - 1);
	mark = mrmgr__mon_queue_tail();
	mark_addr = (uintptr_t)p;
}

static int saw(const void *p, size_t l)
{
	return mrmgr__mon_queue_saw(mark, (uintptr_t)p, (uintptr_t)p + l - 1);
}

static char *map_pages(size_t n)
{
	return map_rw(n * PG, 'a');
}

/* ------------------------------------------------------------ install */

Test(patch, installs_and_passes_its_self_test)
{
	unsigned char before[MRMGR__PT_COUNT][16], after[MRMGR__PT_COUNT][16];
	struct fixture f;

	snapshot(before);
	open_patch(&f);
	snapshot(after);
	for (int t = 0; t < MRMGR__PT_COUNT; t++)
		cr_assert_eq(memcmp(before[t], after[t], 16) != 0,
			     t != MRMGR__PT_SBRK, "%s %spatched", names[t],
			     t != MRMGR__PT_SBRK ? "not " : "");
	/* A second cache finds it running. */
	struct fixture g;
	fx_open(&g, NULL, &patch_only);
	cr_assert_eq(minfo(g.cache).sources, patch_sources());
	fx_close(&g);
	fx_close(&f);
}

Test(patch, environment_selects_it)
{
	struct fixture f;

	setenv("MRMGR_MONITOR", "patch", 1);
	fx_open(&f, NULL, NULL);
	unsetenv("MRMGR_MONITOR");
	cr_assert_eq(minfo(f.cache).mode, MRMGR_MONITOR_PATCH);
	cr_assert_eq(minfo(f.cache).sources, patch_sources());
	fx_close(&f);
}

/* ------------------------------------------------------------ delivery */

Test(deliver, munmap_reports_exactly_its_range)
{
	struct fixture f;
	char *p = map_pages(3);

	open_patch(&f);
	watch(p, 3 * PG);
	cr_assert_eq(munmap(p + PG, PG), 0);
	cr_assert(saw(p + PG, PG));
	cr_assert_not(saw(p, PG));
	cr_assert_not(saw(p + 2 * PG, PG));
	munmap(p, 3 * PG);
	fx_close(&f);
}

Test(deliver, mremap_shrink_move_and_fixed)
{
	struct fixture f;
	char *p = map_pages(4), *q = map_pages(2), *r;

	open_patch(&f);
	/* Shrinking in place: only the tail leaves. */
	watch(p, 4 * PG);
	cr_assert_eq(mremap(p, 4 * PG, 2 * PG, 0), p);
	cr_assert(saw(p + 2 * PG, 2 * PG));
	cr_assert_not(saw(p, 2 * PG));
	/* Growing in place without MAYMOVE releases nothing; under a
	 * sanitizer the grown tail is reported as memory mapped anew (its
	 * allocator may have released pages there: doc/monitor.md). */
	watch(p, 4 * PG);
	cr_assert_eq(mremap(p, 2 * PG, 4 * PG, 0), p);
	cr_assert_not(saw(p, 2 * PG));
	cr_assert_eq(saw(p + 2 * PG, 2 * PG), sanitizer_runtime() != NULL);
	/* A move: the old range. */
	watch(p, 4 * PG);
	r = mremap(p, 4 * PG, 64 * PG, MREMAP_MAYMOVE);
	cr_assert_neq(r, MAP_FAILED);
	cr_assert(saw(p, 4 * PG));
	/* MREMAP_FIXED: what was at the destination too. */
	watch(q, 2 * PG);
	cr_assert_eq(mremap(r, PG, PG, MREMAP_MAYMOVE | MREMAP_FIXED, q), q);
	cr_assert(saw(q, 2 * PG));
	munmap(r, 64 * PG);
	munmap(q, 2 * PG);
	fx_close(&f);
}

Test(deliver, madvise_discarding_advice_and_failures)
{
	struct fixture f;
	char *p = map_pages(4);

	open_patch(&f);
	watch(p, 4 * PG);
	cr_assert_eq(madvise(p + PG, PG, MADV_WILLNEED), 0);
	cr_assert_eq(madvise(p, 4 * PG, MADV_NORMAL), 0);
	cr_assert_not(saw(p, 4 * PG), "advice that keeps the pages is not reported");
	cr_assert_eq(madvise(p + PG, PG, MADV_DONTNEED), 0);
	cr_assert(saw(p + PG, PG));
	cr_assert_not(saw(p, PG));
	cr_assert_not(saw(p + 2 * PG, 2 * PG));
	watch(p, 4 * PG);
	cr_assert_eq(madvise(p + 2 * PG, PG, MADV_FREE), 0);
	cr_assert(saw(p + 2 * PG, PG));
	/* A failed call is reported too: part of the range may be gone. */
	cr_assert_eq(munmap(p + 3 * PG, PG), 0);
	watch(p, 4 * PG);
	cr_assert_eq(madvise(p, 4 * PG, MADV_DONTNEED), -1);
	cr_assert_eq(errno, ENOMEM);
	cr_assert(saw(p, PG));
	/* Guard pages (6.13+; reported whether or not the kernel has them). */
	watch(p, 4 * PG);
	(void)madvise(p, PG, MADV_GUARD_INSTALL);
	cr_assert(saw(p, PG));
	munmap(p, 3 * PG);
	fx_close(&f);
}

Test(deliver, mmap_fixed_reports_what_it_replaces)
{
	struct fixture f;
	char *p = map_pages(3);

	open_patch(&f);
	watch(p, 3 * PG);
	cr_assert_eq(mmap(p + PG, PG, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p + PG);
	cr_assert(saw(p + PG, PG));
	cr_assert_not(saw(p, PG));
	cr_assert_not(saw(p + 2 * PG, PG));
	/* MAP_FIXED_NOREPLACE replaces nothing. */
	watch(p, 3 * PG);
	cr_assert_eq(mmap(p, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS |
			  MAP_FIXED_NOREPLACE, -1, 0), MAP_FAILED);
	cr_assert_eq(errno, EEXIST);
	cr_assert_not(saw(p, 3 * PG));
	munmap(p, 3 * PG);
	fx_close(&f);
}

Test(deliver, sbrk_shrink_keeps_glibcs_break)
{
	struct fixture f;
	char *b0, *b1;

	open_patch(&f);
	b0 = sbrk(0);
	cr_assert_eq(sbrk(64 * KiB), b0);
	b1 = sbrk(0);
	cr_assert_eq(b1, b0 + 64 * KiB);
	cr_assert_eq((char *)syscall(SYS_brk, 0), b1, "the kernel's break");
	memset(b0, 1, 64 * KiB);
	watch(b0, 64 * KiB);
	cr_assert_eq(sbrk(-(intptr_t)(64 * KiB)), b1);
	cr_assert(saw(b0, 64 * KiB));
	cr_assert_eq(sbrk(0), b0, "__curbrk follows the hook");
	cr_assert_eq((char *)syscall(SYS_brk, 0), b0);
	/* brk() below the heap's start: the kernel keeps the break, which is
	 * above the request, so glibc returns 0; nothing moved. */
	cr_assert_eq(brk((void *)4096), 0);
	cr_assert_eq(sbrk(0), b0);
	cr_assert_eq((char *)syscall(SYS_brk, 0), b0);
	fx_close(&f);
}

Test(deliver, shmat_remap_and_shmdt)
{
	struct fixture f;
	const size_t len = 16 * PG;
	char *p = map_rw(len + PG, 'p');
	int id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);

	if (id < 0)
		cr_skip_test("shmget: %s", strerror(errno));
	open_patch(&f);
	watch(p, len + PG);
	cr_assert_eq(shmat(id, p, SHM_REMAP), p);
	cr_assert(saw(p, len));
	cr_assert_not(saw(p + len, PG));
	watch(p, len + PG);
	cr_assert_eq(shmdt(p), 0);
	cr_assert(saw(p, len));
	cr_assert_not(saw(p + len, PG));
	shmctl(id, IPC_RMID, NULL);
	munmap(p + len, PG);
	fx_close(&f);
}

/* ------------------------------------------------------------ glibc inside */

Test(glibc, free_and_realloc_of_mmapped_chunks)
{
	struct fixture f;
	char *c, *d;

	need_glibc_malloc();
	cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
	open_patch(&f);
	c = malloc(MiB);
	cr_assert_not_null(c);
	memset(c, 1, MiB);
	watch(c, MiB);
	free(c); /* munmap_chunk: glibc's internal __munmap */
	cr_assert(saw((void *)mark_addr, MiB));
	c = malloc(MiB);
	memset(c, 2, MiB);
	watch(c, MiB);
	d = realloc(c, 16 * MiB); /* mremap_chunk: internal __mremap */
	cr_assert_not_null(d);
	cr_assert(saw((void *)mark_addr, MiB));
	free(d);
	fx_close(&f);
}

#define NCHUNK 4000
static char *chunks[NCHUNK];
static int nchunks;

/* In a thread of its own (so in an arena of its own): 64 KiB chunks
 * until the arena needs a second heap. */
static void *fill_arena(void *arg)
{
	uintptr_t first = 0;

	(void)arg;
	for (nchunks = 0; nchunks < NCHUNK; nchunks++) {
		chunks[nchunks] = malloc(64 * KiB);
		cr_assert_not_null(chunks[nchunks]);
		memset(chunks[nchunks], 3, 64 * KiB);
		if (!first)
			first = (uintptr_t)chunks[nchunks] & ~(uintptr_t)(64 * MiB - 1);
		else if (((uintptr_t)chunks[nchunks] & ~(uintptr_t)(64 * MiB - 1)) != first)
			return (void *)(uintptr_t)(nchunks + 1);
	}
	return NULL;
}

static int mapped(const void *p)
{
	unsigned char v;

	return mincore((void *)((uintptr_t)p & ~(PG - 1)), PG, &v) == 0;
}

Test(glibc, thread_arena_heap_trimmed_and_deleted)
{
	struct fixture f;
	pthread_t t;
	void *ret;
	char *heap1, *heap2;

	need_glibc_malloc();
	cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
	cr_assert_eq(mallopt(M_TRIM_THRESHOLD, 128 * 1024), 1);
	open_patch(&f);
	cr_assert_eq(pthread_create(&t, NULL, fill_arena, NULL), 0);
	cr_assert_eq(pthread_join(t, &ret), 0);
	cr_assert_not_null(ret, "the thread's arena never needed a second heap");
	heap1 = (char *)((uintptr_t)chunks[0] & ~(uintptr_t)(64 * MiB - 1));
	heap2 = (char *)((uintptr_t)chunks[nchunks] & ~(uintptr_t)(64 * MiB - 1));
	cr_assert_neq(heap1, heap2);
	cr_assert((uintptr_t)heap1 > (uintptr_t)sbrk(0), "not the main arena");
	watch(heap1, 64 * MiB);
	watch(heap2, 64 * MiB);
	mark = mrmgr__mon_queue_tail();
	cr_assert(mapped(heap2));
	for (int i = nchunks; i >= 0; i--)
		free(chunks[i]);
	/* delete_heap unmapped the second heap, heap_trim shrank the first. */
	cr_assert_not(mapped(heap2), "glibc kept the second heap");
	cr_assert(saw(heap2, 64 * MiB), "delete_heap's munmap not seen");
	/* heap_trim keeps the top pad above the lowest chunk; the middle
	 * of the first heap went back with shrink_heap's madvise. */
	cr_assert(saw(chunks[nchunks / 2], 64 * KiB), "heap_trim's shrink not seen");
	fx_close(&f);
}

Test(glibc, malloc_trim_of_the_main_arena)
{
	struct fixture f;
	char *a, *b;
	const size_t n = 4 * MiB;

	need_glibc_malloc();
	cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 32 * MiB), 1);
	cr_assert_eq(mallopt(M_TRIM_THRESHOLD, 64 * MiB), 1);
	open_patch(&f);
	a = malloc(n);
	b = malloc(64); /* keeps a away from the top */
	cr_assert_not_null(a);
	cr_assert_not_null(b);
	memset(a, 4, n);
	watch(a, n);
	free(a);
	malloc_trim(0); /* mtrim: internal __madvise(MADV_DONTNEED) */
	cr_assert(saw((char *)mark_addr + PG, n - 2 * PG));
	free(b);
	fx_close(&f);
}

/* ------------------------------------------------------------ errno */

struct outcome {
	long ret;
	int err;
};

/* Calls that fail (or succeed) the same way each time they run. */
static void run_cases(struct outcome *o, int *n)
{
	static char *p, *hole;
	int i = 0;

#define CASE(expr)                                    \
	do {                                          \
		errno = 4242;                         \
		o[i].ret = (long)(expr);              \
		o[i].err = errno;                     \
		i++;                                  \
	} while (0)

	if (!p) {
		p = map_pages(3);
		hole = map_pages(1);
		munmap(hole, PG);
	}
	CASE(munmap(p + 1, PG));
	CASE(munmap(p, 0));
	CASE(munmap((void *)-PG, 2 * PG));
	CASE(munmap(hole, PG));
	CASE(mremap(p + 1, PG, PG, 0) == MAP_FAILED);
	CASE(mremap(p, PG, 2 * PG, 0) == MAP_FAILED);
	CASE(mremap(p, PG, PG, 8) == MAP_FAILED);
	CASE(mremap(p, PG, PG, MREMAP_FIXED, p + 2 * PG) == MAP_FAILED);
	CASE(mremap(p, 0, PG, MREMAP_MAYMOVE) == MAP_FAILED);
	CASE(mremap(hole, PG, PG, 0) == MAP_FAILED);
	CASE(madvise(p, PG, 12345));
	CASE(madvise(hole, PG, MADV_DONTNEED));
	CASE(madvise(p, PG, MADV_WILLNEED));
	CASE(madvise(p + 1, PG, MADV_DONTNEED));
	CASE(mmap(NULL, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1) == MAP_FAILED);
	CASE(mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED);
	CASE(mmap(NULL, PG, PROT_READ, MAP_PRIVATE, -1, 0) == MAP_FAILED);
	CASE(mmap(NULL, PG, PROT_READ, 0, -1, 0) == MAP_FAILED);
	CASE(mmap(hole, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		  -1, 0) == (void *)hole);
	CASE(munmap(hole, PG));
	CASE(brk((void *)4096));
	CASE(sbrk(PTRDIFF_MAX) == (void *)-1);
	CASE(shmat(-1, NULL, 0) == (void *)-1);
	CASE(shmdt(p));
	CASE(shmdt(p + 1));
#undef CASE
	*n = i;
}

Test(results, return_values_and_errno_match_plain_libc)
{
	struct outcome plain[64], patched[64];
	struct fixture f;
	int n1, n2;

	run_cases(plain, &n1);
	open_patch(&f);
	run_cases(patched, &n2);
	cr_assert_eq(n1, n2);
	for (int i = 0; i < n1; i++) {
		cr_assert_eq(patched[i].ret, plain[i].ret, "case %d: returned %ld, libc %ld",
			     i, patched[i].ret, plain[i].ret);
		cr_assert_eq(patched[i].err, plain[i].err, "case %d: errno %d, libc %d",
			     i, patched[i].err, plain[i].err);
	}
	cr_assert_eq(plain[0].err, EINVAL, "the cases do fail");
	cr_assert_eq(plain[12].err, 4242, "success leaves errno alone");
	fx_close(&f);
}

/* ------------------------------------------------------------ threads */

static volatile int stop;
static long failures, loops[2];
static int fail_what, fail_errno; /* the first failure, for the message */

static void failed(int what)
{
	if (__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED) == 0) {
		fail_what = what;
		fail_errno = errno;
	}
}

static void *churn(void *arg)
{
	long id = (long)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		char *p = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		char *q;

		if (p == MAP_FAILED) {
			failed(1);
			continue;
		}
		p[0] = 1;
		if (madvise(p, PG, MADV_DONTNEED))
			failed(2);
		else if (p[0] != 0)
			failed(3);
		q = mremap(p, 4 * PG, 8 * PG, MREMAP_MAYMOVE);
		if (q == MAP_FAILED) {
			failed(4);
			q = p;
		}
		/* (No munmap of the hole left behind: the other thread may
		 * have mapped its own memory there by then.) */
		if (munmap(q, q == p ? 4 * PG : 8 * PG))
			failed(5);
		free(malloc(id ? 200 * KiB : 64));
		__atomic_fetch_add(&loops[id], 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/*
 * Until each churn thread has gone round once more than before[]: it
 * is running (before the install) or it survived the patches (after
 * them). A wait for progress, never a sleep: a loaded machine may not
 * run a thread for a long while. No time bound of its own: the test's
 * .timeout (120 s) catches a thread that never comes round.
 */
static void wait_rounds(const long before[2])
{
	for (int i = 0; i < 2; i++)
		while (__atomic_load_n(&loops[i], __ATOMIC_RELAXED) <= before[i])
			sched_yield();
}

/*
 * The install runs while two threads call every patched function, then
 * the patches are taken out and put back MRMGR_TEST_PATCH_TOGGLES times
 * (default 2000) under the same load: far more live-code rewrites than a
 * process ever sees (one install).
 */
Test(threads, patching_while_other_threads_unmap, .timeout = 120)
{
	struct fixture f;
	pthread_t t[2];
	long before[2];
	const char *env = getenv("MRMGR_TEST_PATCH_TOGGLES");
	int toggles = env ? atoi(env) : 2000;

	/* glibc's threshold; a sanitizer's allocator refuses it. */
	cr_assert(sanitizer_runtime() || mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1);
	for (long i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, churn, (void *)i), 0);
	before[0] = before[1] = 0;
	wait_rounds(before);
	open_patch(&f); /* the install itself, under load */
	for (int k = 0; k < toggles; k++) {
		cr_assert_eq(mrmgr__patch_test_toggle(), 0);
		if (k % 100 == 0)
			sched_yield();
	}
	before[0] = __atomic_load_n(&loops[0], __ATOMIC_RELAXED);
	before[1] = __atomic_load_n(&loops[1], __ATOMIC_RELAXED);
	wait_rounds(before);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(failures, 0, "%ld calls failed; the first: step %d (1 mmap, "
		     "2 madvise, 3 madvise did not discard, 4 mremap, 5 munmap), "
		     "errno %d", failures, fail_what,
		     fail_errno);
	cr_assert_eq(minfo(f.cache).patch_targets, MRMGR__PT_ALWAYS);
	fx_close(&f);
}

/* ------------------------------------------------------------ fallback */

static int warnings;
static void count_warnings(enum mrmgr_log_level l, const char *msg, void *arg)
{
	(void)arg;
	if (l == MRMGR_LOG_WARN && strstr(msg, "patching not used"))
		warnings++;
}

static void check_fallback(unsigned int flag, int err)
{
	unsigned char before[MRMGR__PT_COUNT][16], after[MRMGR__PT_COUNT][16];
	struct fixture f, g;
	mrmgr_region_t *r;
	char *p = map_pages(16);

	mrmgr__patch_test_flags = flag;
	mrmgr_set_log_handler(count_warnings, NULL, MRMGR_LOG_WARN);
	snapshot(before);
	fx_open(&f, NULL, &patch_only);
	fx_open(&g, NULL, &patch_only);
	snapshot(after);
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.patch_error, err, "patch_error %d", m.patch_error);
	cr_assert_eq(m.sources, 0);
	cr_assert_eq(m.patch_targets, 0);
	cr_assert_eq(memcmp(before, after, sizeof(before)), 0, "libc was changed");
	cr_assert_eq(warnings, 1, "%d warnings", warnings);
	/* Nothing watches: nothing is cached. */
	cr_assert_eq(mrmgr_get(f.cache, p, 16 * PG, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(minfo(f.cache).unwatched, 1);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	fx_close(&g);
	fx_close(&f);
	munmap(p, 16 * PG);
}

Test(fallback, unknown_prologue_leaves_libc_untouched)
{
	check_fallback(MRMGR__PATCH_TEST_UNKNOWN_PROLOGUE, ENOEXEC);
}

Test(fallback, failed_self_test_puts_libc_back)
{
	check_fallback(MRMGR__PATCH_TEST_SELFTEST_FAILS, EPROTO);
}

/* ------------------------------------------------------------ auto */

/* Auto mode where userfaultfd is refused: the patch source alone keeps
 * the cache correct across free() and malloc() of the same address. */
Test(auto_mode, patch_source_covers_when_userfaultfd_is_refused)
{
	struct fixture f;
	mrmgr_region_t *r;
	uint32_t key;
	char *c, *d;

	cr_assert(sanitizer_runtime() || mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1);
	mrmgr__mon_test_flags = MRMGR__MON_TEST_UFFD_EPERM;
	fx_open(&f, NULL, NULL);
	struct mrmgr_monitor_info m = minfo(f.cache);
	/* auto does not even try userfaultfd (opt-in, doc/monitor.md) */
	cr_assert(m.uffd_error == 0 || m.uffd_error == EPERM);
	cr_assert_eq(m.sources, patch_sources());
	for (int i = 0; i < 20; i++) {
		c = malloc(MiB);
		memset(c, 5, MiB);
		cr_assert_eq(mrmgr_get(f.cache, c, MiB, RW, &r), 0);
		key = mrmgr_region_rkey(r);
		mrmgr_put(r);
		cr_assert_eq(sstats(f.ctx).live_mrs, 1, "cached");
		free(c);
		d = malloc(MiB);
		memset(d, 6, MiB);
		cr_assert_eq(mrmgr_get(f.cache, d, MiB, RW, &r), 0);
		if (d == c)
			cr_assert_neq(mrmgr_region_rkey(r), key, "stale region");
		mrmgr_put(r);
		free(d);
	}
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
}
