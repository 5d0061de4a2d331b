/*
 * The release table (lib/intercept/release_table.h), one run per advice
 * value, for the interposer this program is built for: libc's patched
 * entries (test_release_table), or libmrmgr_hooks.so linked ahead of
 * libc (test_release_table_hooks, RELEASE_TABLE_HOOKS).
 *
 *  - follows_the_table: a madvise() the kernel refuses before it looks
 *    at the pages (an unaligned start: EINVAL) still goes through the
 *    interposer, which decides by the table alone: the cached
 *    registration of the range is dropped exactly when the table says
 *    the advice releases. Nothing happens to the pages, so every value
 *    runs, HWPOISON and unknown ones included.
 *  - the_kernel_agrees: the advice applied for real to registered pages
 *    (where that is safe); then an RDMA write on the simulated HCA,
 *    which checks each registered page's identity, through what the
 *    cache hands out now: never stale. For "keeps" the registration must
 *    still be the cached one, so a wrong "keeps" in the table fails here.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <criterion/parameterized.h>
#include <dlfcn.h>
#include <stdio.h>
#include <sys/mman.h>

#include "monitor_helpers.h"
#include "release_table.h"

#define PG ((size_t)4096)
#define NPG 16

struct entry {
	int adv;
	int effect;
	int run; /* safe to apply to real pages */
	char name[24]; /* by value: each run is a new process (BoxFort) */
};

#define ROW(v, n, e, w) { v, e, v != 100 && v != 101, n },
static struct entry table[] = {
	MRMGR__ADVICE_TABLE(ROW)
	/* Unknown values: conservative, they release. */
	{ 5, MRMGR__RELEASES, 0, "(5: unknown)" },
	{ 26, MRMGR__RELEASES, 0, "(26: unknown)" },
	{ 99, MRMGR__RELEASES, 0, "(99: unknown)" },
	{ 104, MRMGR__RELEASES, 0, "(104: unknown)" },
	{ 1 << 20, MRMGR__RELEASES, 0, "(2^20: unknown)" },
};
#undef ROW

#ifdef RELEASE_TABLE_HOOKS
#define MONITOR MRMGR_MONITOR_HOOKS
#define SOURCE MRMGR_MONITOR_SRC_HOOKS
#else
#define MONITOR MRMGR_MONITOR_PATCH
#define SOURCE MRMGR_MONITOR_SRC_PATCH
#endif

static struct mrmgr_cache_attr one_source = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
	.max_bytes = 1ull << 32,
	.monitor = MONITOR,
};

static int real_sanitizer(void)
{
	return dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init") ||
	       dlsym(RTLD_DEFAULT, "__msan_init") || dlsym(RTLD_DEFAULT, "__hwasan_init");
}

static void open_one(struct fixture *f)
{
	uint32_t src;

	fx_open(f, NULL, &one_source);
	src = minfo(f->cache).sources;
	/* Under a sanitizer the patched libc runs beside its allocator's
	 * hooks (doc/monitor.md, "Under a sanitizer"). */
	if (SOURCE == MRMGR_MONITOR_SRC_PATCH && real_sanitizer())
		src &= ~(uint32_t)MRMGR_MONITOR_SRC_SANITIZER;
	cr_assert_eq(src, SOURCE, "the one source is not running (sources %#x)",
		     src);
}

/* The key of a registration of [p, p + NPG pages), got and put. */
static uint32_t key_of(struct fixture *f, char *p)
{
	mrmgr_region_t *r;
	uint32_t k;

	cr_assert_eq(mrmgr_get(f->cache, p, NPG * PG, RW, &r), 0);
	k = mrmgr_region_rkey(r);
	mrmgr_put(r);
	return k;
}

ParameterizedTestParameters(table, follows_the_table)
{
	return cr_make_param_array(struct entry, table,
				   sizeof(table) / sizeof(table[0]));
}

ParameterizedTest(struct entry *e, table, follows_the_table)
{
	struct fixture f;
	char *p = map_rw(NPG * PG, 'a');
	uint32_t k;

	open_one(&f);
	cr_assert_eq(mrmgr__advice_releases(e->adv), e->effect);
	k = key_of(&f, p);
	cr_assert_eq(key_of(&f, p), k, "not cached to begin with");
	cr_assert_eq(madvise(p + 1, 2 * PG, e->adv), -1, "%s", e->name);
	cr_assert_eq(errno, EINVAL);
	if (e->effect == MRMGR__RELEASES)
		cr_assert_neq(key_of(&f, p), k, "MADV_%s releases: not followed",
			      e->name);
	else
		cr_assert_eq(key_of(&f, p), k, "MADV_%s keeps: followed", e->name);
	fx_close(&f);
	munmap(p, NPG * PG);
}

ParameterizedTestParameters(table, the_kernel_agrees)
{
	return cr_make_param_array(struct entry, table,
				   sizeof(table) / sizeof(table[0]));
}

ParameterizedTest(struct entry *e, table, the_kernel_agrees)
{
	struct fixture f;
	char *p = map_rw(NPG * PG, 'a');
	mrmgr_region_t *r;
	uint32_t k;
	char b = 'W';
	int ret;

	if (!e->run)
		cr_skip_test("MADV_%s is not applied to real pages", e->name);
	need_identity();
	for (size_t i = 0; i < NPG; i++) /* no two alike: nothing for KSM */
		snprintf(p + i * PG, PG, "page %zu of %p", i, (void *)p);
	/* The sim faults pages in but does not pin them as an HCA does:
	 * mlock() keeps reclaim (COLD, PAGEOUT) off them as a pin would.
	 * Only there: DONTNEED refuses locked memory, never pinned memory. */
	if (e->adv == 20 || e->adv == 21)
		cr_assert_eq(mlock(p, NPG * PG), 0, "%s", strerror(errno));
	open_one(&f);
	k = key_of(&f, p);
	errno = 0;
	ret = madvise(p + 2 * PG, 4 * PG, e->adv);
	cr_log_info("MADV_%s: %d (%s)", e->name, ret, ret ? strerror(errno) : "done");
	if (e->adv == 102 && !ret) /* GUARD_INSTALL: take the guards off */
		cr_assert_eq(madvise(p + 2 * PG, 4 * PG, 103), 0);
	memset(p, 'n', NPG * PG); /* fault in whatever is mapped now */
	cr_assert_eq(mrmgr_get(f.cache, p, NPG * PG, RW, &r), 0);
	if (e->effect == MRMGR__KEEPS)
		cr_assert_eq(mrmgr_region_rkey(r), k, "MADV_%s keeps: followed",
			     e->name);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r),
				     (uint64_t)(uintptr_t)p + 3 * PG, &b, 1), 0,
		     "MADV_%s: the write through the cache's registration was "
		     "stale", e->name);
	cr_assert_eq(p[3 * PG], 'W');
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, NPG * PG);
}
