/*
 * Memory calls the process defines itself (doc/monitor.md, "Memory calls
 * the process defines itself"): this program is linked with
 * libforeign_calls.so ahead of libc, which defines mmap, mmap64, munmap,
 * mremap and sbrk with system calls of its own, as gperftools' tcmalloc
 * does, and madvise, posix_madvise, brk, shmat and shmdt too. Every change below goes through it (its call counter says so),
 * and the default mode must follow it: the next get registers the pages
 * mapped now, checked on the simulated HCA's page identity. Before issue
 * 26 (03d73fe) these gets were hits on the old registration.
 *
 * The real tcmalloc: the under_tcmalloc tests run this program again
 * with libtcmalloc_minimal.so.4 preloaded (skipped where it is not
 * installed). A library loaded later: libforeign_late.so, dlopen'd with
 * RTLD_DEEPBIND, whose own call site binds to its own munmap.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monitor_helpers.h"
#include "intercept.h"
#include "monitor.h"

#define PAGE ((size_t)4096)
#define LEN (16 * PAGE)

extern unsigned long foreign_calls_made;
extern char **environ;

#define TCMALLOC "/usr/lib/" MULTIARCH "/libtcmalloc_minimal.so.4"
#ifndef MULTIARCH
#if defined(__x86_64__)
#define MULTIARCH "x86_64-linux-gnu"
#else
#define MULTIARCH "aarch64-linux-gnu"
#endif
#endif

/* Built with a sanitizer (build-asan): its runtime intercepts the memory
 * calls and the patched libc steps aside (doc/monitor.md). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

static struct mrmgr_cache_attr auto_attr = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
	.max_bytes = 1ull << 32,
	.monitor = MRMGR_MONITOR_AUTO,
};

static int write_page(struct fixture *f, mrmgr_region_t *r, char *p, char b)
{
	return mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
			       (uint64_t)(uintptr_t)p, &b, 1);
}

/* Cache [p, p + n), let change() replace its pages, get it again: a miss
 * whose writes land in the pages mapped now. */
static void follows(struct fixture *f, char *p, size_t n,
		    void (*change)(char *, size_t), const char *what)
{
	mrmgr_region_t *r;
	uint64_t hits;

	memset(p, 'a', n);
	cr_assert_eq(mrmgr_get(f->cache, p, n, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f->ctx).live_mrs, 1, "%s: not cached", what);
	change(p, n);
	memset(p, 'n', n);
	hits = cstats(f->cache).hits;
	cr_assert_eq(mrmgr_get(f->cache, p, n, RW, &r), 0);
	cr_assert_eq(cstats(f->cache).hits, hits,
		     "%s: the old registration was handed out again", what);
	for (size_t off = 0; off < n; off += PAGE)
		cr_assert_eq(write_page(f, r, p + off, 'w'), 0,
			     "%s: stale write at +%zu", what, off);
	mrmgr_put(r);
	cr_assert_eq(sstats(f->ctx).stale_accesses, 0);
}

/* Memory nothing maps again at the same address (a move's target, a
 * buffer only got); what a change unmaps and maps again is area_map()'s
 * (monitor_helpers.h): its holes are never another mmap's choice. */
static char *map_anon(size_t n)
{
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	return p;
}

static void ch_munmap(char *p, size_t n)
{
	cr_assert_eq(munmap(p, n), 0);
	cr_assert_eq(mmap(p, n, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
		     (void *)p);
}

static void ch_fixed(char *p, size_t n)
{
	cr_assert_eq(mmap(p, n, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     (void *)p);
}

static void ch_fixed64(char *p, size_t n)
{
	cr_assert_eq(mmap64(p, n, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     (void *)p);
}

static void ch_mremap_move(char *p, size_t n)
{
	char *q = map_anon(n);

	cr_assert_eq(mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, q), (void *)q);
	cr_assert_eq(mmap(p, n, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
		     (void *)p);
	munmap(q, n);
}

static void ch_mremap_shrink(char *p, size_t n)
{
	cr_assert_eq(mremap(p, n, n / 2, 0), (void *)p);
	cr_assert_eq(mmap(p + n / 2, n / 2, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
		     (void *)(p + n / 2));
}

static void ch_madvise(char *p, size_t n)
{
	cr_assert_eq(madvise(p, n, MADV_DONTNEED), 0);
}

static void ch_posix_madvise(char *p, size_t n)
{
	cr_assert_eq(posix_madvise(p, n, POSIX_MADV_DONTNEED), 0);
}

/* SysV memory attached over the cached pages (SHM_REMAP): the next get
 * registers the segment's pages (uncached: shared memory). */
static void ch_shmat_remap(char *p, size_t n)
{
	int id = shmget(IPC_PRIVATE, n, IPC_CREAT | 0600);

	cr_assert_geq(id, 0);
	cr_assert_eq(shmat(id, p, SHM_REMAP), (void *)p);
	cr_assert_eq(shmctl(id, IPC_RMID, NULL), 0);
}

static void open_auto(struct fixture *f)
{
	need_identity();
	fx_open(f, NULL, &auto_attr);
	if (!(minfo(f->cache).sources & MRMGR_MONITOR_SRC_PATCH))
		cr_skip_test("the patched libc does not run here (sources %#x)",
			     minfo(f->cache).sources);
}

static void run_change(void (*change)(char *, size_t), const char *what)
{
	struct fixture f;
	char *p;
	unsigned long before = foreign_calls_made;

	open_auto(&f);
	p = area_map(LEN, 0);
	follows(&f, p, LEN, change, what);
	cr_assert_gt(foreign_calls_made, before,
		     "%s did not go through the library's own definition", what);
	area_unmap(p, LEN);
	fx_close(&f);
}

Test(follow, found_and_said)
{
	struct fixture f;
	struct mrmgr_monitor_info mi;
	const uint32_t want = MRMGR_MONITOR_CALL_MMAP | MRMGR_MONITOR_CALL_MMAP64 |
			      MRMGR_MONITOR_CALL_MUNMAP | MRMGR_MONITOR_CALL_MREMAP |
			      MRMGR_MONITOR_CALL_MADVISE |
			      MRMGR_MONITOR_CALL_POSIX_MADVISE |
			      MRMGR_MONITOR_CALL_BRK | MRMGR_MONITOR_CALL_SBRK |
			      MRMGR_MONITOR_CALL_SHMAT | MRMGR_MONITOR_CALL_SHMDT;

	open_auto(&f);
	mi = minfo(f.cache);
	cr_assert_eq(mi.foreign_calls & want, want, "found %#x", mi.foreign_calls);
	cr_assert_eq(mi.foreign_followed, mi.foreign_calls);
	cr_assert_eq(mi.foreign_error, 0);
	cr_assert_gt(mi.foreign_sites, 0);
	/* Under a sanitizer its runtime comes first, and defines mmap (its
	 * interceptor, followed like any definition). */
	cr_assert(strstr(mi.foreign_object, "libforeign_calls") ||
			  (UNDER_SANITIZER && strstr(mi.foreign_object, "san")),
		  "object %s", mi.foreign_object);
	cr_assert_eq(mi.sources, MRMGR_MONITOR_SRC_PATCH |
			 (UNDER_SANITIZER ? MRMGR_MONITOR_SRC_SANITIZER : 0));
	fx_close(&f);
}

Test(follow, munmap) { run_change(ch_munmap, "munmap"); }
Test(follow, mmap_fixed_over) { run_change(ch_fixed, "mmap(MAP_FIXED)"); }
Test(follow, mmap64_fixed_over) { run_change(ch_fixed64, "mmap64(MAP_FIXED)"); }
Test(follow, mremap_move) { run_change(ch_mremap_move, "mremap move"); }
Test(follow, mremap_shrink) { run_change(ch_mremap_shrink, "mremap shrink"); }
Test(follow, madvise_dontneed) { run_change(ch_madvise, "madvise(MADV_DONTNEED)"); }
Test(follow, posix_madvise_dontneed)
{
	run_change(ch_posix_madvise, "posix_madvise(POSIX_MADV_DONTNEED)");
}
Test(follow, shmat_remap) { run_change(ch_shmat_remap, "shmat(SHM_REMAP)"); }

/* The library's own brk: the break lowered, then raised again. */
Test(follow, brk_shrink)
{
	struct fixture f;
	char *p;
	mrmgr_region_t *r;
	uint64_t hits;
	unsigned long before = foreign_calls_made;

	open_auto(&f);
	p = (char *)syscall(SYS_brk, 0);
	cr_assert_eq(brk(p + LEN), 0);
	memset(p, 'a', LEN);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "not cached");
	cr_assert_eq(brk(p), 0);
	cr_assert_eq(brk(p + LEN), 0);
	memset(p, 'n', LEN);
	hits = cstats(f.cache).hits;
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).hits, hits, "brk shrink not followed");
	for (size_t off = 0; off < LEN; off += PAGE)
		cr_assert_eq(write_page(&f, r, p + off, 'w'), 0, "stale at +%zu", off);
	mrmgr_put(r);
	cr_assert_gt(foreign_calls_made, before, "brk bypassed the library");
	fx_close(&f);
	(void)brk(p);
}

/*
 * shmdt: shared memory is never cached, so what is followed is the
 * change itself: both sides reach the monitor (its change count), as
 * they must for a get in flight over the segment.
 */
Test(follow, shmdt)
{
	struct fixture f;
	int id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
	unsigned long before = foreign_calls_made;
	uint64_t changes;
	char *p;

	open_auto(&f);
	cr_assert_geq(id, 0);
	p = shmat(id, NULL, 0);
	cr_assert_neq(p, (void *)-1);
	cr_assert_eq(shmctl(id, IPC_RMID, NULL), 0);
	changes = minfo(f.cache).changes;
	cr_assert_eq(shmdt(p), 0);
	cr_assert_gt(minfo(f.cache).changes, changes, "shmdt not followed");
	cr_assert_gt(foreign_calls_made, before, "shmdt bypassed the library");
	fx_close(&f);
}

/* The library's own break: sbrk shrink, the heap grown back. */
Test(follow, sbrk_shrink)
{
	struct fixture f;
	char *base, *p;
	mrmgr_region_t *r;
	uint64_t hits;

	open_auto(&f);
	base = sbrk(0);
	cr_assert_neq(sbrk((intptr_t)LEN), (void *)-1);
	p = base;
	memset(p, 'a', LEN);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_neq(sbrk(-(intptr_t)LEN), (void *)-1);
	cr_assert_neq(sbrk((intptr_t)LEN), (void *)-1);
	memset(p, 'n', LEN);
	hits = cstats(f.cache).hits;
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).hits, hits, "sbrk shrink not followed");
	for (size_t off = 0; off < LEN; off += PAGE)
		cr_assert_eq(write_page(&f, r, p + off, 'w'), 0, "stale at +%zu", off);
	mrmgr_put(r);
	fx_close(&f);
	(void)sbrk(-(intptr_t)LEN);
}

/* One line says what was found and what the library did, however many
 * caches start: info, since it follows. */
static int said_info, said_warn;

static void count(enum mrmgr_log_level l, const char *msg, void *arg)
{
	(void)arg;
	said_info += l == MRMGR_LOG_INFO && strstr(msg, "defined outside libc") &&
		     strstr(msg, "libforeign_calls.so: mmap, mmap64, munmap, "
			    "mremap, madvise, posix_madvise, brk, sbrk, shmat, shmdt") &&
		     strstr(msg, "followed");
	said_warn += l == MRMGR_LOG_WARN;
}

Test(follow, said_once_at_info_level)
{
	struct fixture f, g;

	mrmgr_set_log_handler(count, NULL, MRMGR_LOG_INFO);
	open_auto(&f);
	fx_open(&g, NULL, &auto_attr);
	cr_assert_eq(said_info, 1, "said %d times", said_info);
	cr_assert_eq(said_warn, 0);
	fx_close(&g);
	fx_close(&f);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

/* A library loaded later whose calls bind to its own munmap: found at
 * the next miss, and followed from then on. */
Test(follow, library_loaded_later)
{
	struct fixture f;
	int (*late)(void *, size_t);
	void *h;
	char *p;
	mrmgr_region_t *r;
	uint64_t hits;

	if (UNDER_SANITIZER)
		cr_skip_test("the sanitizers' runtimes refuse RTLD_DEEPBIND");
	open_auto(&f);
	h = dlopen("libforeign_late.so", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
	cr_assert_not_null(h, "%s", dlerror());
	late = (int (*)(void *, size_t))dlsym(h, "late_munmap");
	cr_assert_not_null(late);
	p = area_map(LEN, 0);
	memset(p, 'a', LEN);
	/* This miss finds the new library. */
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert(strstr(minfo(f.cache).foreign_object, "libforeign") != NULL);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(late(p, LEN), 0);
	cr_assert_eq(mmap(p, LEN, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
		     (void *)p);
	memset(p, 'n', LEN);
	hits = cstats(f.cache).hits;
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	cr_assert_eq(cstats(f.cache).hits, hits,
		     "munmap by a library loaded later was not followed");
	cr_assert_eq(write_page(&f, r, p, 'w'), 0, "stale write");
	mrmgr_put(r);
	area_unmap(p, LEN);
	fx_close(&f);
}

/* A miss asks whether an object was loaded since the last check with no
 * loader call (the last object's l_next, pinned at the first check:
 * follow_quiet.c); once one was, it asks the loader's
 * counters again. Either way, quiet means nothing was loaded. */
Test(follow, quiet_until_an_object_is_loaded)
{
	struct fixture f;
	char *p, *q;
	mrmgr_region_t *r;
	void *h;

	open_auto(&f);
	p = map_anon(LEN);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert(mrmgr__follow_quiet());
	cr_assert(mrmgr__follow_by_tail(),
		  "the last object is pinned and watched");
	h = dlopen("libforeign_late.so", RTLD_NOW | RTLD_LOCAL);
	cr_assert_not_null(h, "%s", dlerror());
	cr_assert_not(mrmgr__follow_quiet(), "an object was loaded: not quiet");
	cr_assert(mrmgr__follow_by_tail(), "nothing checked since");
	/* The next miss's check rescans (a hit checks nothing: another
	 * buffer); the counters from then on. */
	q = map_anon(LEN);
	cr_assert_eq(mrmgr_get(f.cache, q, LEN, RW, &r), 0);
	mrmgr_put(r);
	/* Quiet again: that miss's check rescanned (what a rescan follows:
	 * library_loaded_later). */
	cr_assert(mrmgr__follow_quiet());
	cr_assert_not(mrmgr__follow_by_tail());
	munmap(p, LEN);
	munmap(q, LEN);
	fx_close(&f);
}

/* Where following fails, the patched libc no longer vouches: the default
 * mode takes userfaultfd (the kernel's view), or caches nothing. */
Test(follow, not_followed_is_never_cached_blind)
{
	struct fixture f;
	char *p;

	if (UNDER_SANITIZER)
		cr_skip_test("its check maps the unmapped address again, which "
			     "under ASan something else had mapped first (the "
			     "fallback itself is test_monitor_modes' "
			     "sanitizer::*_falls_back_with_a_warning)");
	mrmgr__follow_test_fail = 1;
	need_identity();
	fx_open(&f, NULL, &auto_attr);
	cr_assert_neq(minfo(f.cache).foreign_error, 0);
	cr_assert_eq(minfo(f.cache).sources & MRMGR_MONITOR_SRC_PATCH, 0,
		     "the patched libc vouches while calls bypass it");
	p = area_map(LEN, 0);
	if (minfo(f.cache).sources & MRMGR_MONITOR_SRC_UFFD) {
		follows(&f, p, LEN, ch_munmap, "munmap under userfaultfd");
	} else {
		mrmgr_region_t *r;

		cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
		mrmgr_put(r);
		cr_assert_eq(sstats(f.ctx).live_mrs, 0, "cached behind a blind monitor");
	}
	area_unmap(p, LEN);
	fx_close(&f);
}

/* ------------------------------------------------------------ tcmalloc */

static int under_tcmalloc(void)
{
	return getenv("MRMGR_TEST_UNDER_TCMALLOC") != NULL;
}

/* This program again, with the real tcmalloc preloaded (it comes ahead
 * of libforeign_calls.so then), for the under_tcmalloc tests. */
Test(follow, real_tcmalloc_preloaded)
{
	char *argv[] = { "test_monitor_follow", "--filter=under_tcmalloc/*",
			 "--jobs=1", NULL };
	char **envp, self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	size_t k = 0, e = 0;
	pid_t pid;
	int st;

	if (under_tcmalloc())
		cr_skip_test("the inner run");
	if (UNDER_SANITIZER)
		cr_skip_test("a sanitizer's runtime must come first: no allocator "
			     "can be preloaded ahead of it");
	if (access(TCMALLOC, R_OK))
		cr_skip_test(TCMALLOC " not installed (libtcmalloc-minimal4)");
	cr_assert_gt(n, 0);
	self[n] = 0;
	while (environ[e])
		e++;
	envp = calloc(e + 3, sizeof(*envp));
	cr_assert_not_null(envp);
	for (size_t i = 0; i < e; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) &&
		    strncmp(environ[i], "CRITERION", 9) &&
		    strncmp(environ[i], "BXFI", 4)) /* Criterion's worker */
			envp[k++] = environ[i];
	envp[k++] = "LD_PRELOAD=" TCMALLOC;
	envp[k++] = "MRMGR_TEST_UNDER_TCMALLOC=1";
	n = posix_spawn(&pid, self, NULL, NULL, argv, envp);
	free(envp);
	cr_assert_eq(n, 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the under_tcmalloc tests failed (status %#x)", st);
}

static void tc_change(void (*change)(char *, size_t), const char *what)
{
	struct fixture f;
	struct mrmgr_monitor_info mi;
	char *p;

	if (!under_tcmalloc())
		cr_skip_test("run by follow/real_tcmalloc_preloaded");
	open_auto(&f);
	mi = minfo(f.cache);
	cr_assert(strstr(mi.foreign_object, "tcmalloc"), "first definer %s",
		  mi.foreign_object);
	cr_assert_eq(mi.foreign_error, 0);
	cr_assert_eq(mi.foreign_followed, mi.foreign_calls);
	p = area_map(LEN, 0);
	follows(&f, p, LEN, change, what);
	area_unmap(p, LEN);
	fx_close(&f);
}

Test(under_tcmalloc, munmap) { tc_change(ch_munmap, "munmap"); }
Test(under_tcmalloc, mmap_fixed_over) { tc_change(ch_fixed, "mmap(MAP_FIXED)"); }
Test(under_tcmalloc, mremap_move) { tc_change(ch_mremap_move, "mremap move"); }
Test(under_tcmalloc, mremap_shrink) { tc_change(ch_mremap_shrink, "mremap shrink"); }
