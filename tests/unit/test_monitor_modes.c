/*
 * What each monitor mode follows: every kind of change to cached memory
 * against every mode, one test per cell, named <mode>.<change>; the
 * table in doc/monitor.md ("What each mode follows") lists them.
 *
 * A cell caches an area, makes the change (leaving the area mapped again,
 * anonymous, with new contents), gets the area again, and checks what the
 * mode documents:
 *
 *   FOLLOW    the second get registers again (a miss), and a write through
 *             it lands in the pages mapped now;
 *   EXCLUDED  a documented exclusion: the second get is a hit on the old
 *             registration (the test shows the limit, and fails the day
 *             the mode starts following the change: update the table);
 *   KEEP      the change releases no page: no write is stale;
 *   UNCACHED  the mode never caches such memory (the first get is not
 *             cached).
 *
 * Columns: auto (the patched libc), uffd, hooks (test_monitor_modes_hooks,
 * libmrmgr_hooks.so linked ahead of libc), external (the program reports
 * each change with mrmgr_notify_unmap()), and sanitizer: auto under a
 * sanitizer (the patched libc with the sanitizer allocator's hooks),
 * simulated in the ordinary build with a test flag and an allocator
 * hooks interface standing in for the sanitizer's (glibc's allocator
 * underneath, which the patched libc sees); in a sanitizer build the
 * auto column is that column for real.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monitor_helpers.h"

#ifdef MRMGR_TEST_INTERNAL
#include "monitor.h"
#include "patch.h"
#include "source.h"

static int fake_slots = 1;

static int fake_install(void (*m)(const volatile void *, size_t),
			void (*f)(const volatile void *))
{
	(void)m;
	(void)f;
	return fake_slots;
}

static size_t fake_size(const volatile void *p)
{
	(void)p;
	return 1;
}

/* auto under a sanitizer, simulated: the test flag, and (hooks) an
 * allocator hooks interface that takes the hooks; without it the
 * library finds none, as under a sanitizer that has none. */
static void simulate_sanitizer(int hooks)
{
	mrmgr__patch_test_flags |= MRMGR__PATCH_TEST_SANITIZER;
	if (hooks) {
		mrmgr__san_test_iface.install = fake_install;
		mrmgr__san_test_iface.size = fake_size;
	} else {
		mrmgr__san_test_iface.absent = 1; /* a real one's too */
	}
}
#endif

#ifndef SHM_REMAP
#define SHM_REMAP 040000
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 */
#define MADV_GUARD_REMOVE 103
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define PAGE ((size_t)4096)
#define LEN (16 * PAGE)

enum expect { NA = 0, FOLLOW, EXCLUDED, KEEP, UNCACHED };
enum col { C_AUTO, C_UFFD, C_HOOKS, C_EXTERNAL, C_SAN, C_COUNT };

static const char *const expect_name[] = { "n/a", "followed", "excluded",
					   "kept", "not cached" };

#include "monitor_changes.h"

/* ------------------------------------------------------------ rows */

struct row {
	const char *what;
	void (*setup)(struct area *);
	void (*change)(struct area *);
	void (*teardown)(struct area *);
	enum expect e[C_COUNT]; /* auto, uffd, hooks, external, sanitizer */
	/* auto recognises the cause and takes userfaultfd; last, and left out
	 * of the rows that do not set it: gcc 10 (Debian 11) warns about a
	 * missing trailing member even in designated tables, so such rows
	 * name it (AUTO_UFFD) and the rest end with NO_AUTO_UFFD. */
	int auto_uffd;
};

#define AUTO_UFFD 1
#define NO_AUTO_UFFD 0
#define F FOLLOW
#define X EXCLUDED
#define K KEEP
#define U UNCACHED
#define ANON setup_anon
#define GONE teardown_anon

enum rowid {
	R_MUNMAP, R_RAW_MUNMAP, R_MREMAP_MOVE, R_RAW_MREMAP_MOVE,
	R_MREMAP_SHRINK, R_RAW_MREMAP_SHRINK, R_MREMAP_GROW, R_MMAP_FIXED,
	R_RAW_MMAP_FIXED, R_DONTNEED, R_RAW_DONTNEED, R_FREE, R_RAW_FREE,
	R_REMOVE, R_GUARD, R_RAW_GUARD, R_SBRK, R_RAW_BRK, R_FREE_CHUNK,
	R_SHMAT_REMAP, R_RAW_SHMAT_REMAP, R_SHMDT, R_TRUNCATE, R_FORK,
	R_MPROTECT, R_PROCESS_MADVISE, R_IO_URING_DONTNEED, R_ARENA_TRIM,
	R_REALLOC_CHUNK, R_MALLOC_TRIM, R_MEMFD_SHARED, R_GO_SCAVENGE,
	R_URING_LIB_DONTNEED, R_COUNT
};

/*                                  auto uffd hooks ext  san */
static const struct row rows[R_COUNT] = {
	[R_MUNMAP] = { "munmap", ANON, ch_munmap, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_MUNMAP] = { "raw munmap", ANON, ch_raw_munmap, GONE, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_MREMAP_MOVE] = { "mremap move", ANON, ch_mremap_move, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_MREMAP_MOVE] = { "raw mremap move", ANON, ch_raw_mremap_move, GONE, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_MREMAP_SHRINK] = { "mremap shrink", ANON, ch_mremap_shrink, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_MREMAP_SHRINK] = { "raw mremap shrink", ANON, ch_raw_mremap_shrink, GONE, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_MREMAP_GROW] = { "mremap grow in place", setup_growable, ch_mremap_grow, GONE, { K, K, K, K, K }, NO_AUTO_UFFD },
	[R_MMAP_FIXED] = { "mmap MAP_FIXED over", ANON, ch_mmap_fixed, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_MMAP_FIXED] = { "raw mmap MAP_FIXED over", ANON, ch_raw_mmap_fixed, GONE, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_DONTNEED] = { "MADV_DONTNEED", ANON, ch_dontneed, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_DONTNEED] = { "raw MADV_DONTNEED", ANON, ch_raw_dontneed, GONE, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_FREE] = { "MADV_FREE", ANON, ch_free, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_FREE] = { "raw MADV_FREE", ANON, ch_raw_free, GONE, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_REMOVE] = { "MADV_REMOVE (private: EINVAL)", ANON, ch_remove, GONE, { K, K, K, K, K }, NO_AUTO_UFFD },
	[R_GUARD] = { "MADV_GUARD_INSTALL", ANON, ch_guard, GONE, { F, X, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_GUARD] = { "raw MADV_GUARD_INSTALL", ANON, ch_raw_guard, GONE, { X, X, X, F, X }, NO_AUTO_UFFD },
	[R_SBRK] = { "sbrk shrink", setup_heap, ch_sbrk, teardown_heap, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_BRK] = { "raw brk shrink", setup_heap, ch_raw_brk, teardown_heap, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_FREE_CHUNK] = { "free() of an mmap'd chunk", setup_chunk, ch_free_chunk, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_SHMAT_REMAP] = { "shmat(SHM_REMAP) over", ANON, ch_shmat_remap, teardown_shm, { F, X, F, F, F }, NO_AUTO_UFFD },
	[R_RAW_SHMAT_REMAP] = { "raw shmat(SHM_REMAP) over", ANON, ch_raw_shmat_remap, teardown_shm, { X, X, X, F, X }, NO_AUTO_UFFD },
	[R_SHMDT] = { "SysV segment, shmdt", setup_shm, ch_shmdt, GONE, { U, U, U, F, U }, NO_AUTO_UFFD },
	[R_TRUNCATE] = { "private file mapping, truncate", setup_file, ch_truncate, teardown_file, { U, U, U, F, U }, NO_AUTO_UFFD },
	[R_FORK] = { "fork (parent's caches purged)", ANON, ch_fork, GONE, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_MPROTECT] = { "mprotect", ANON, ch_mprotect, GONE, { K, K, K, K, K }, NO_AUTO_UFFD },
	[R_PROCESS_MADVISE] = { "process_madvise(PAGEOUT)", ANON, ch_process_madvise, GONE, { K, K, K, K, K }, NO_AUTO_UFFD },
	[R_IO_URING_DONTNEED] = { "io_uring MADV_DONTNEED", ANON, ch_io_uring_dontneed, GONE, { X, F, X, F, X }, NO_AUTO_UFFD },
	[R_REALLOC_CHUNK] = { "realloc() moving an mmap'd chunk", setup_chunk_blocked, ch_realloc_chunk, teardown_chunk, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_MALLOC_TRIM] = { "malloc_trim() of a free heap chunk", setup_heap_chunk, ch_malloc_trim, teardown_heap_chunk, { F, F, F, F, F }, NO_AUTO_UFFD },
	[R_MEMFD_SHARED] = { "shared memfd mapping, truncated", setup_memfd_shared, ch_memfd_truncate, teardown_file, { U, U, U, F, U }, NO_AUTO_UFFD },
	/* Raw system calls of code auto recognises (liburing, a Go
	 * runtime): it says so and takes userfaultfd. */
	[R_GO_SCAVENGE] = { "a Go runtime's raw madvise (its scavenger)", setup_go, ch_go_scavenge, GONE, { F, F, X, F, F }, AUTO_UFFD },
	[R_URING_LIB_DONTNEED] = { "io_uring MADV_DONTNEED, liburing in the process", setup_uring, ch_io_uring_dontneed, GONE, { F, F, X, F, F }, AUTO_UFFD },
	/* cell_arena(), not cell(): in a thread of its own */
	[R_ARENA_TRIM] = { "a thread arena's heap trimmed", NULL, NULL, NULL, { F, F, X, F, F }, NO_AUTO_UFFD },
};

/* ------------------------------------------------------------ a cell */

/* A sanitizer's runtime in the process (a sanitizer build). */
static int real_sanitizer(void)
{
	return dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init") ||
	       dlsym(RTLD_DEFAULT, "__msan_init") || dlsym(RTLD_DEFAULT, "__hwasan_init");
}

static int write_page(struct fixture *f, mrmgr_region_t *r, char *p, char b)
{
	return mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
			       (uint64_t)(uintptr_t)p, &b, 1);
}

static void cell(enum rowid id, enum col c)
{
	const struct row *w = &rows[id];
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32,
	};
	enum expect e = w->e[c];
	struct area a = { 0 };
	struct fixture f;
	struct mrmgr_stats s1;
	mrmgr_region_t *r;
	uint32_t src;
	int san;

	need_identity();
	switch (c) {
	case C_AUTO:
		ca.monitor = MRMGR_MONITOR_AUTO;
		if (real_sanitizer())
			e = w->e[C_SAN];
		break;
	case C_UFFD:
		ca.monitor = MRMGR_MONITOR_UFFD;
		break;
	case C_HOOKS:
		ca.monitor = MRMGR_MONITOR_HOOKS;
		break;
	case C_EXTERNAL:
		ca.monitor = MRMGR_MONITOR_EXTERNAL;
		break;
	case C_SAN:
		ca.monitor = MRMGR_MONITOR_AUTO;
#ifdef MRMGR_TEST_INTERNAL
		simulate_sanitizer(1);
#endif
		break;
	default:
		break;
	}
	if ((id == R_FREE_CHUNK || id == R_REALLOC_CHUNK || id == R_MALLOC_TRIM) &&
	    real_sanitizer())
		cr_skip_test("glibc's allocator's rows: a sanitizer's allocator "
			     "is another (its hooks are test_san_stale's and "
			     "test_monitor_sanalloc's)");
	w->setup(&a);
	memset(a.p, 'a', a.len);
	fx_open(&f, NULL, &ca);
	src = minfo(f.cache).sources;
	san = c == C_SAN || (c == C_AUTO && real_sanitizer());
	if (san && !w->auto_uffd)
		cr_assert_eq(src, MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_SANITIZER,
			     "auto under a sanitizer must take the patched libc "
			     "with the allocator's hooks (sources %#x)", src);
	if ((c == C_AUTO || san) && w->auto_uffd) {
		cr_assert_neq(minfo(f.cache).raw_runtimes, 0,
			      "%s: not recognised", w->what);
		cr_assert_eq(src & MRMGR_MONITOR_SRC_PATCH, 0,
			     "%s: the patched libc vouches for what it cannot see",
			     w->what);
		if (!src) { /* userfaultfd refused: nothing cached */
			e = UNCACHED;
		} else {
			cr_assert_eq(src, MRMGR_MONITOR_SRC_UFFD);
		}
	} else if ((c == C_AUTO && !san && !(src & MRMGR_MONITOR_SRC_PATCH)) ||
		   (c == C_UFFD && src != MRMGR_MONITOR_SRC_UFFD) ||
		   (c == C_HOOKS && !(src & MRMGR_MONITOR_SRC_HOOKS))) {
		fx_close(&f);
		w->teardown(&a);
		cr_skip_test("this column's source does not run here (sources %#x)",
			     src);
	}
	cr_assert_eq(mrmgr_get(f.cache, a.p, a.len, RW, &r), 0);
	cr_assert_eq(write_page(&f, r, a.p, 'b'), 0);
	mrmgr_put(r);
	if (e == UNCACHED) {
		cr_assert_eq(sstats(f.ctx).live_mrs, 0, "%s: cached", w->what);
		cr_assert_geq(cstats(f.cache).uncached, 1);
		fx_close(&f);
		w->teardown(&a);
		return;
	}
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "%s: not cached before the change",
		     w->what);

	w->change(&a);
	if (c == C_EXTERNAL && e == FOLLOW)
		cr_assert_eq(mrmgr_notify_unmap(a.p, a.len), 0);
	memset(a.p, 'n', a.len);

	s1 = cstats(f.cache);
	cr_assert_eq(mrmgr_get(f.cache, a.p, a.len, RW, &r), 0);
	switch (e) {
	case FOLLOW:
		cr_assert_eq(cstats(f.cache).hits, s1.hits,
			     "%s (%s): the old registration was handed out again",
			     w->what, expect_name[e]);
		for (size_t off = 0; off < a.len; off += PAGE)
			cr_assert_eq(write_page(&f, r, a.p + off, 'w'), 0,
				     "%s: stale write at +%zu", w->what, off);
		cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
		break;
	case EXCLUDED:
		cr_assert_eq(cstats(f.cache).hits, s1.hits + 1,
			     "%s is documented as not followed in this mode, "
			     "and it was: update doc/monitor.md and this table",
			     w->what);
		break;
	case KEEP:
		for (size_t off = 0; off < a.len; off += PAGE)
			cr_assert_eq(write_page(&f, r, a.p + off, 'w'), 0,
				     "%s: stale write at +%zu", w->what, off);
		cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
		break;
	default:
		break;
	}
	mrmgr_put(r);
	fx_close(&f);
	w->teardown(&a);
}

/*
 * A thread arena's heap trimmed: glibc's free() in a thread of its own
 * shrinks the arena's heap with an internal madvise(MADV_DONTNEED) (or an
 * mmap over it) when the freed chunk joins the top, and malloc() hands
 * the address back over new zero pages. The cache is used from this
 * (the main) thread, so its own allocations stay out of that arena.
 */
#define ARENA_N (96 * KiB)

struct arena_steps {
	pthread_barrier_t b;
	char *p, *q;
};

static void *arena_worker(void *arg)
{
	struct arena_steps *x = arg;

	x->p = malloc(ARENA_N);
	if (x->p)
		memset(x->p, 'a', ARENA_N);
	pthread_barrier_wait(&x->b); /* main caches p */
	pthread_barrier_wait(&x->b);
	free(x->p);                  /* the arena's top: trimmed */
	x->q = malloc(ARENA_N);
	if (x->q)
		memset(x->q, 'n', ARENA_N);
	pthread_barrier_wait(&x->b); /* main gets q */
	pthread_barrier_wait(&x->b);
	free(x->q);
	return NULL;
}

static void cell_arena(enum col c)
{
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32,
		.monitor = c == C_UFFD ? MRMGR_MONITOR_UFFD
			 : c == C_HOOKS ? MRMGR_MONITOR_HOOKS
			 : c == C_EXTERNAL ? MRMGR_MONITOR_EXTERNAL
					   : MRMGR_MONITOR_AUTO,
	};
	enum expect e = rows[R_ARENA_TRIM].e[c];
	static struct arena_steps x;
	struct fixture f;
	pthread_t th;
	mrmgr_region_t *r;
	uint64_t hits;
	char *last;
	uint32_t src;

	need_identity();
	if (real_sanitizer())
		cr_skip_test("a sanitizer's allocator has no glibc arenas");
#ifdef MRMGR_TEST_INTERNAL
	if (c == C_SAN)
		simulate_sanitizer(1);
#endif
	cr_assert(mallopt(M_MMAP_THRESHOLD, (int)MiB));
	cr_assert(mallopt(M_TRIM_THRESHOLD, 64 * (int)KiB));
	/* heap_trim keeps M_TOP_PAD (128 KiB by default) above the top. */
	cr_assert(mallopt(M_TOP_PAD, 0));
	fx_open(&f, NULL, &ca);
	src = minfo(f.cache).sources;
	if (c == C_SAN)
		cr_assert_eq(src, MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_SANITIZER,
			     "sources %#x", src);
	if ((c == C_AUTO && !(src & MRMGR_MONITOR_SRC_PATCH)) ||
	    (c == C_UFFD && src != MRMGR_MONITOR_SRC_UFFD) ||
	    (c == C_HOOKS && !(src & MRMGR_MONITOR_SRC_HOOKS))) {
		fx_close(&f);
		cr_skip_test("this column's source does not run here (sources %#x)",
			     src);
	}
	memset(&x, 0, sizeof(x));
	pthread_barrier_init(&x.b, NULL, 2);
	cr_assert_eq(pthread_create(&th, NULL, arena_worker, &x), 0);
	pthread_barrier_wait(&x.b);
	cr_assert_not_null(x.p);
	cr_assert_eq(mrmgr_get(f.cache, x.p, ARENA_N, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "not cached before the change");
	pthread_barrier_wait(&x.b);
	pthread_barrier_wait(&x.b);
	if (c == C_EXTERNAL)
		cr_assert_eq(mrmgr_notify_unmap(x.p, ARENA_N), 0);
	hits = cstats(f.cache).hits;
	last = x.q + ARENA_N - 1;
	if (x.q == x.p) {
		cr_assert_eq(mrmgr_get(f.cache, x.q, ARENA_N, RW, &r), 0);
		if (e == FOLLOW) {
			cr_expect_eq(cstats(f.cache).hits, hits,
				     "a thread arena's trim: the old registration "
				     "was handed out again");
			cr_expect_eq(write_page(&f, r, last, 'w'), 0,
				     "stale write after the arena's trim");
		} else {
			cr_expect_eq(cstats(f.cache).hits, hits + 1,
				     "a thread arena's trim is documented as not "
				     "followed in this mode, and it was: update "
				     "doc/monitor.md and this table");
			cr_expect_eq(write_page(&f, r, last, 'w'), ESTALE,
				     "the trim did not discard the pages");
		}
		mrmgr_put(r);
	}
	pthread_barrier_wait(&x.b);
	pthread_join(th, NULL);
	pthread_barrier_destroy(&x.b);
	fx_close(&f);
	if (x.q != x.p)
		cr_skip_test("glibc did not hand the trimmed address back");
}

#define ROW(id, name) \
	COLS(id, name)

#ifdef MRMGR_TEST_HOOKS_BUILD
#define COLS(id, name) \
	Test(hooks, name) { cell(id, C_HOOKS); }
#elif defined(MRMGR_TEST_INTERNAL)
#define COLS(id, name)                                  \
	Test(auto, name) { cell(id, C_AUTO); }          \
	Test(uffd, name) { cell(id, C_UFFD); }          \
	Test(external, name) { cell(id, C_EXTERNAL); }  \
	Test(sanitizer, name) { cell(id, C_SAN); }
#endif

ROW(R_MUNMAP, munmap)
ROW(R_RAW_MUNMAP, raw_munmap)
ROW(R_MREMAP_MOVE, mremap_move)
ROW(R_RAW_MREMAP_MOVE, raw_mremap_move)
ROW(R_MREMAP_SHRINK, mremap_shrink)
ROW(R_RAW_MREMAP_SHRINK, raw_mremap_shrink)
ROW(R_MREMAP_GROW, mremap_grow_in_place)
ROW(R_MMAP_FIXED, mmap_fixed_over)
ROW(R_RAW_MMAP_FIXED, raw_mmap_fixed_over)
ROW(R_DONTNEED, madv_dontneed)
ROW(R_RAW_DONTNEED, raw_madv_dontneed)
ROW(R_FREE, madv_free)
ROW(R_RAW_FREE, raw_madv_free)
ROW(R_REMOVE, madv_remove_private)
ROW(R_GUARD, madv_guard_install)
ROW(R_RAW_GUARD, raw_madv_guard_install)
ROW(R_SBRK, sbrk_shrink)
ROW(R_RAW_BRK, raw_brk_shrink)
ROW(R_FREE_CHUNK, free_mmapped_chunk)
ROW(R_SHMAT_REMAP, shmat_shm_remap)
ROW(R_RAW_SHMAT_REMAP, raw_shmat_shm_remap)
ROW(R_SHMDT, sysv_segment_shmdt)
ROW(R_TRUNCATE, private_file_truncate)
ROW(R_FORK, fork)
ROW(R_MPROTECT, mprotect)
ROW(R_PROCESS_MADVISE, process_madvise)
ROW(R_IO_URING_DONTNEED, io_uring_madv_dontneed)
ROW(R_REALLOC_CHUNK, realloc_mmapped_chunk)
ROW(R_MALLOC_TRIM, malloc_trim)
ROW(R_MEMFD_SHARED, shared_memfd_truncate)
ROW(R_GO_SCAVENGE, go_runtime_raw_madvise)
ROW(R_URING_LIB_DONTNEED, io_uring_madv_dontneed_liburing)

#ifdef MRMGR_TEST_HOOKS_BUILD
Test(hooks, thread_arena_trim) { cell_arena(C_HOOKS); }
#elif defined(MRMGR_TEST_INTERNAL)
Test(auto, thread_arena_trim) { cell_arena(C_AUTO); }
Test(uffd, thread_arena_trim) { cell_arena(C_UFFD); }
Test(external, thread_arena_trim) { cell_arena(C_EXTERNAL); }
Test(sanitizer, thread_arena_trim) { cell_arena(C_SAN); }
#endif

/* ------------------------------------------------------------ the log */

#ifdef MRMGR_TEST_INTERNAL
static int said_two, said_uffd, said_none, said_warn;

static void count_lines(enum mrmgr_log_level l, const char *msg, void *arg)
{
	(void)arg;
	said_two += l == MRMGR_LOG_INFO &&
		    strstr(msg, "sanitizer allocator's malloc/free hooks follow");
	said_uffd += l == MRMGR_LOG_WARN &&
		     strstr(msg, "allocator's hooks cannot follow the memory (") &&
		     strstr(msg, "one-sided");
	said_warn += l == MRMGR_LOG_WARN;
	said_none += l == MRMGR_LOG_WARN && strstr(msg, "no memory-event source") &&
		     strstr(msg, "libc patching: a sanitizer is in the process") &&
		     strstr(msg, "sanitizer allocator: the sanitizer has no "
				 "allocator hooks");
}

/* auto under a sanitizer with allocator hooks: the patched libc and the
 * hooks, said once at info level however many caches start (the
 * program's output stays what it is without the sanitizer), no warning. */
Test(sanitizer, two_sided_said_once_at_info)
{
	struct fixture f, g;

	simulate_sanitizer(1);
	mrmgr_set_log_handler(count_lines, NULL, MRMGR_LOG_INFO);
	fx_open(&f, NULL, NULL);
	fx_open(&g, NULL, NULL);
	cr_assert_eq(minfo(f.cache).sources,
		     MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_SANITIZER);
	cr_assert_eq(minfo(g.cache).sources,
		     MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_SANITIZER);
	cr_assert_eq(said_two, 1, "said %d times", said_two);
	cr_assert_eq(said_warn, 0, "a warning");
	fx_close(&g);
	fx_close(&f);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

/* Where the allocator cannot be followed (a sanitizer without the hooks
 * interface; all its hook slots taken), auto falls back to userfaultfd
 * and says so once, as a warning naming why and what is not followed. */
static void falls_back(int hooks, const char *why)
{
	struct fixture f, g;

	simulate_sanitizer(hooks);
	fake_slots = 0;
	mrmgr_set_log_handler(count_lines, NULL, MRMGR_LOG_INFO);
	fx_open(&f, NULL, NULL);
	fx_open(&g, NULL, NULL);
	if (minfo(f.cache).uffd_error)
		cr_skip_test("userfaultfd unavailable here: %s",
			     strerror(minfo(f.cache).uffd_error));
	cr_assert_eq(minfo(f.cache).sources, MRMGR_MONITOR_SRC_UFFD);
	cr_assert_eq(minfo(g.cache).sources, MRMGR_MONITOR_SRC_UFFD);
	cr_assert_eq(said_uffd, 1, "said %d times", said_uffd);
	cr_assert_eq(said_two, 0);
	cr_assert(strstr(mrmgr__san_why(), why), "%s", mrmgr__san_why());
	fx_close(&g);
	fx_close(&f);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

Test(sanitizer, no_hooks_interface_falls_back_with_a_warning)
{
	falls_back(0, "no allocator hooks");
}

Test(sanitizer, hook_slots_taken_falls_back_with_a_warning)
{
	falls_back(1, "slots are all taken");
}

/* Where userfaultfd is refused too (a seccomp profile), auto under a
 * sanitizer without allocator hooks caches nothing, and the warning
 * names each reason. */
Test(sanitizer, userfaultfd_refused_caches_nothing_and_says_why)
{
	struct fixture f;
	char *p = map_rw(LEN, 1);
	mrmgr_region_t *r;

	simulate_sanitizer(0);
	refuse_userfaultfd();
	mrmgr_set_log_handler(count_lines, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, NULL);
	cr_assert_eq(minfo(f.cache).sources, 0);
	cr_assert_neq(minfo(f.cache).uffd_error, 0);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "cached with no source");
	cr_assert_eq(said_uffd, 0);
	cr_assert_eq(said_none, 1, "the no-source warning, naming the sanitizer");
	fx_close(&f);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	munmap(p, LEN);
}
#endif
