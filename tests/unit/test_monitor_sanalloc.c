/*
 * The sanitizer allocator source's parts, in the ordinary build: a
 * sanitizer simulated with the patch engine's test flag, and an
 * allocator hooks interface standing in for the sanitizer's that keeps
 * the hooks the library installs, so the test can call them as the
 * sanitizer's allocator would. What the whole does under a real
 * sanitizer is test_san_stale's and test_monitor_modes' in build-asan.
 *
 *   - the free hook (the chunk leaves for quarantine) and the malloc hook
 *     (a chunk is handed out) drop every registration over the chunk's
 *     pages, a wider one included;
 *   - a chunk in 2 MiB blocks no cache registered stops at the filter
 *     (nothing pushed);
 *   - memory the program maps anew where the allocator released pages
 *     with a raw munmap is reported after the mmap (in the default mode
 *     without a sanitizer it is not: the raw call is the program's own,
 *     excluded).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor_helpers.h"
#include "monitor.h"
#include "patch.h"
#include "source.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define PAGE ((size_t)4096)
#define LEN (16 * PAGE)

static void (*hook_malloc)(const volatile void *, size_t);
static void (*hook_free)(const volatile void *);
static size_t chunk_len;

static int keep_hooks(void (*m)(const volatile void *, size_t),
		      void (*f)(const volatile void *))
{
	hook_malloc = m;
	hook_free = f;
	return 1;
}

static size_t chunk_size(const volatile void *p)
{
	(void)p;
	return chunk_len;
}

static void open_sanitized(struct fixture *f)
{
	mrmgr__patch_test_flags |= MRMGR__PATCH_TEST_SANITIZER;
	mrmgr__san_test_iface.install = keep_hooks;
	mrmgr__san_test_iface.size = chunk_size;
	need_identity();
	fx_open(f, NULL, NULL);
	cr_assert_eq(minfo(f->cache).sources,
		     MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_SANITIZER);
	cr_assert_not_null(hook_malloc);
	cr_assert_not_null(hook_free);
}

/* Caches [p, p + n) and checks it is cached. */
static void cache(struct fixture *f, char *p, size_t n)
{
	mrmgr_region_t *r;

	memset(p, 'a', n);
	cr_assert_eq(mrmgr_get(f->cache, p, n, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f->ctx).live_mrs, 1, "not cached");
}

/* The next get of [p, p + n) must register again (a miss), and a write
 * through it land in the pages mapped now. */
static void registers_again(struct fixture *f, char *p, size_t n,
			    const char *what)
{
	uint64_t hits = cstats(f->cache).hits;
	mrmgr_region_t *r;
	char b = 'w';

	memset(p, 'n', n);
	cr_assert_eq(mrmgr_get(f->cache, p, n, RW, &r), 0);
	cr_assert_eq(cstats(f->cache).hits, hits,
		     "%s: the old registration was handed out again", what);
	cr_assert_eq(mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
				     (uint64_t)(uintptr_t)p + n - 1, &b, 1), 0,
		     "%s: stale write", what);
	mrmgr_put(r);
}

Test(hooks, free_hook_drops_the_chunks_registration)
{
	struct fixture f;
	char *p = map_rw(LEN, 1);
	uint64_t before;

	open_sanitized(&f);
	cache(&f, p, LEN);
	before = __atomic_load_n(&mrmgr__san_reports, __ATOMIC_RELAXED);
	chunk_len = 100; /* one byte on the region's page is enough */
	hook_free(p + 3 * PAGE + 8);
	cr_assert_eq(__atomic_load_n(&mrmgr__san_reports, __ATOMIC_RELAXED),
		     before + 1, "not reported");
	registers_again(&f, p, LEN, "after the free hook");
	fx_close(&f);
	munmap(p, LEN);
}

/* A wider registration (here the program's own, over a chunk the
 * allocator hands out inside it) is dropped when the chunk is handed
 * out: its pages may have been released while it was free. */
Test(hooks, malloc_hook_drops_a_wider_registration)
{
	struct fixture f;
	char *p = map_rw(LEN, 1);

	open_sanitized(&f);
	cache(&f, p, LEN);
	hook_malloc(p + 5 * PAGE, 3 * PAGE);
	registers_again(&f, p, LEN, "after the malloc hook");
	fx_close(&f);
	munmap(p, LEN);
}

/* A chunk in blocks no cache ever registered stops at the filter: the
 * hooks' cost on every malloc and free. */
Test(hooks, chunk_nothing_registered_stops_at_the_filter)
{
	struct fixture f;
	char *p = map_rw(LEN, 1);
	char *far = (char *)(((uintptr_t)p + (1ull << 30)) & ~(uintptr_t)0x1fffff);
	uint64_t before;

	open_sanitized(&f);
	cache(&f, p, LEN);
	before = __atomic_load_n(&mrmgr__san_reports, __ATOMIC_RELAXED);
	chunk_len = 64 * 1024;
	hook_malloc(far, 64 * 1024);
	hook_free(far);
	cr_assert_eq(__atomic_load_n(&mrmgr__san_reports, __ATOMIC_RELAXED),
		     before, "pushed a chunk nothing registered");
	hook_malloc(p, 64);
	cr_assert_eq(__atomic_load_n(&mrmgr__san_reports, __ATOMIC_RELAXED),
		     before + 1, "the filter let a registered block's chunk go");
	fx_close(&f);
	munmap(p, LEN);
}

/* The allocator's raw munmap, then the program's mmap() at that address:
 * reported after the mmap under a sanitizer. */
static void raw_unmap_then_map(int sanitized)
{
	struct fixture f;
	char *p = area_map(LEN, 1);
	uint64_t hits;
	mrmgr_region_t *r;

	if (sanitized) {
		open_sanitized(&f);
	} else {
		need_identity();
		if (dlsym(RTLD_DEFAULT, "__sanitizer_install_malloc_and_free_hooks"))
			cr_skip_test("a real sanitizer: not without one");
		fx_open(&f, NULL, NULL);
		if (!(minfo(f.cache).sources & MRMGR_MONITOR_SRC_PATCH))
			cr_skip_test("the patched libc does not run here");
	}
	cache(&f, p, LEN);
	cr_assert_eq(syscall(SYS_munmap, p, LEN), 0);
	cr_assert_eq(mmap(p, LEN, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
		     (void *)p);
	if (sanitized) {
		registers_again(&f, p, LEN, "mapped again after a raw munmap");
	} else {
		hits = cstats(f.cache).hits;
		cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
		cr_assert_eq(cstats(f.cache).hits, hits + 1,
			     "the default mode follows a raw munmap now: "
			     "update doc/monitor.md");
		mrmgr_put(r);
	}
	fx_close(&f);
	area_unmap(p, LEN);
}

Test(fresh, mmap_after_a_raw_munmap_is_reported_under_a_sanitizer)
{
	raw_unmap_then_map(1);
}

Test(fresh, mmap_after_a_raw_munmap_is_not_without)
{
	raw_unmap_then_map(0);
}
