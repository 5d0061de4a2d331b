/*
 * libmrmgr_hooks.so as the only source (and as the fallback when
 * userfaultfd is refused). This program links the shared libraries with
 * the hooks first, as an application would.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor_helpers.h"

#define LEN (64 * KiB)
#define PAGE ((size_t)4096)

static struct mrmgr_cache_attr hooks_only = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
	.max_bytes = 1ull << 32,
	.monitor = MRMGR_MONITOR_HOOKS,
};

static void open_hooks(struct fixture *f)
{
	need_identity();
	fx_open(f, NULL, &hooks_only);
	struct mrmgr_monitor_info m = minfo(f->cache);
	cr_assert_eq(m.hooks_error, 0, "hooks: %s", strerror(m.hooks_error));
	cr_assert_eq(m.sources, MRMGR_MONITOR_SRC_HOOKS);
}

static mrmgr_region_t *get_write(struct fixture *f, char *p, size_t len, int expect)
{
	mrmgr_region_t *r;
	char b = 'W';

	cr_assert_eq(mrmgr_get(f->cache, p, len, RW, &r), 0);
	cr_assert_eq(mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
				     (uint64_t)(uintptr_t)p, &b, 1), expect);
	return r;
}

/* Get, change with fn, get again: the second must be fresh. */
static void check(void (*fn)(char *p), const char *what)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *p = area_map(LEN, 0);

	open_hooks(&f);
	r1 = get_write(&f, p, LEN, 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	fn(p);
	memset(p, 'n', LEN);
	r2 = get_write(&f, p, LEN, 0);
	cr_assert_neq(mrmgr_region_rkey(r2), key1, "%s: not seen", what);
	mrmgr_put(r2);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	area_unmap(p, LEN);
}

static void ev_munmap(char *p)
{
	cr_assert_eq(munmap(p, LEN), 0);
	cr_assert_eq(mmap(p, LEN, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0), (void *)p);
}

static void ev_fixed(char *p)
{
	cr_assert_eq(mmap(p + PAGE, PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), (void *)(p + PAGE));
}

static void ev_move(char *p)
{
	void *q = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_eq(mremap(p, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, q), q);
	cr_assert_eq(mmap(p, PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0), (void *)p);
	munmap(q, PAGE);
}

static void ev_shrink(char *p)
{
	cr_assert_eq(mremap(p, LEN, LEN - PAGE, 0), (void *)p);
	cr_assert_eq(mmap(p + LEN - PAGE, PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
		     (void *)(p + LEN - PAGE));
}

static void ev_dontneed(char *p)
{
	cr_assert_eq(madvise(p + 2 * PAGE, PAGE, MADV_DONTNEED), 0);
}

Test(hooks, munmap) { check(ev_munmap, "munmap"); }
Test(hooks, mmap_fixed) { check(ev_fixed, "mmap(MAP_FIXED)"); }
Test(hooks, mremap_move) { check(ev_move, "mremap move"); }
Test(hooks, mremap_shrink) { check(ev_shrink, "mremap shrink"); }
Test(hooks, madvise_dontneed) { check(ev_dontneed, "MADV_DONTNEED"); }

Test(hooks, free_and_malloc_of_4MiB_blocks)
{
	struct fixture f;

	open_hooks(&f);
	/* Each block its own mapping (no dynamic threshold). */
	mallopt(M_MMAP_THRESHOLD, (int)MiB);
	for (int i = 0; i < 20; i++) {
		char *p = malloc(4 * MiB);

		cr_assert_not_null(p);
		memset(p, i, 4 * MiB);
		mrmgr_put(get_write(&f, (char *)(((uintptr_t)p + PAGE) & ~(PAGE - 1)),
				    PAGE, 0));
		free(p);
	}
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	cr_assert_geq(minfo(f.cache).invalidations, 19);
	fx_close(&f);
}

Test(hooks, sbrk_shrink)
{
	struct fixture f;
	char *base, *p;

	mallopt(M_MMAP_THRESHOLD, 32 * MiB);
	free(malloc(16 * MiB)); /* a large top: malloc will not move the break */
	open_hooks(&f);
	base = sbrk(0);
	p = (char *)(((uintptr_t)base + PAGE - 1) & ~(PAGE - 1));
	cr_assert_neq(sbrk((p - base) + (intptr_t)LEN), (void *)-1);
	memset(p, 1, LEN);
	mrmgr_put(get_write(&f, p, LEN, 0));
	cr_assert_neq(sbrk(-((p - base) + (intptr_t)LEN)), (void *)-1);
	cr_assert_eq(sbrk((p - base) + (intptr_t)LEN), base);
	memset(p, 2, LEN);
	mrmgr_put(get_write(&f, p, LEN, 0));
	cr_assert_neq(sbrk(-((p - base) + (intptr_t)LEN)), (void *)-1);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
}

/* Issue 11 case 6: a truncate (from any process) replaces even private
 * copies of a file's pages and no hook sees it: not cached, and a get
 * after a truncate gets the pages mapped now. */
Test(hooks, private_file_mapping_is_not_cached)
{
	struct fixture f;
	char path[] = "/tmp/mrmgr-hooks-XXXXXX";
	int fd = mkstemp(path);
	mrmgr_region_t *r;
	char *p;

	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(ftruncate(fd, LEN), 0);
	p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	memset(p, 1, LEN);
	open_hooks(&f);
	r = get_write(&f, p, LEN, 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "a private file mapping is not cached");
	cr_assert(minfo(f.cache).unwatched_causes & MRMGR_MONITOR_UNWATCHED_FILE);
	/* Truncate and extend: the private pages are gone, new ones come. */
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(ftruncate(fd, LEN), 0);
	memset(p, 2, LEN);
	mrmgr_put(get_write(&f, p, LEN, 0));
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, LEN);
	close(fd);
}

Test(hooks, shared_memory_is_not_cached)
{
	struct fixture f;
	char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	memset(p, 1, LEN);
	open_hooks(&f);
	mrmgr_put(get_write(&f, p, LEN, 0));
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	cr_assert_eq(minfo(f.cache).unwatched, 1);
	fx_close(&f);
	munmap(p, LEN);
}

/* What the documentation says the hooks cannot see, shown. */
Test(hooks, raw_syscalls_are_invisible_to_hooks)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *p = area_map(LEN, 0);

	open_hooks(&f);
	r1 = get_write(&f, p, LEN, 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	cr_assert_eq(syscall(SYS_munmap, p, LEN), 0);
	cr_assert_eq((void *)syscall(SYS_mmap, p, LEN, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
				     -1, 0), (void *)p);
	memset(p, 'n', LEN);
	r2 = get_write(&f, p, LEN, ESTALE);
	cr_assert_eq(mrmgr_region_rkey(r2), key1);
	mrmgr_put(r2);
	cr_assert_eq(mrmgr_invalidate(f.cache, p, LEN), 0);
	fx_close(&f);
	area_unmap(p, LEN);
}

/* Auto mode takes the hooks (two-sided) when they are preloaded: it does
 * not even try userfaultfd, refused here anyway. */
Test(hooks, fallback_when_userfaultfd_is_refused)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	char *p = map_rw(LEN, 0);

	need_identity();
	refuse_userfaultfd();
	fx_open(&f, NULL, NULL);
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert(m.uffd_error == 0 || m.uffd_error == EPERM);
	/* The patched libc, where it runs here, is preferred to the hooks:
	 * both see both sides. */
	cr_assert(m.sources == MRMGR_MONITOR_SRC_HOOKS ||
		  m.sources == MRMGR_MONITOR_SRC_PATCH, "sources %#x", m.sources);
	r1 = get_write(&f, p, LEN, 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	remap_fixed(p, LEN, 'z');
	r2 = get_write(&f, p, LEN, 0);
	cr_assert_neq(mrmgr_region_rkey(r2), key1);
	mrmgr_put(r2);
	fx_close(&f);
	munmap(p, LEN);
}
