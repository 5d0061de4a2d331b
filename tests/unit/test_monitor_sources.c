/*
 * The monitor's sources and their failures: the external notification
 * API and its bounded queue, a userfaultfd that does not deliver or is
 * refused (seccomp, unprivileged), the VMA budget, fork().
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monitor_helpers.h"
#include "monitor.h"
#include "patch.h"

#define LEN (64 * KiB)
#define PAGE ((size_t)4096)

static struct mrmgr_cache_attr attr_mode(uint32_t mode)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32,
		.monitor = mode,
	};
	return a;
}

static int write1(struct fixture *f, mrmgr_region_t *r, char *p, char b)
{
	return mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
			       (uint64_t)(uintptr_t)p, &b, 1);
}

/* Remap p, get it again, and check the write lands: returns the write's
 * result (0, or ESTALE for a stale registration). */
static int remap_get_write(struct fixture *f, char *p, mrmgr_region_t **out)
{
	mrmgr_region_t *r;
	int ret;

	remap_fixed(p, LEN, 'n');
	cr_assert_eq(mrmgr_get(f->cache, p, LEN, RW, &r), 0);
	ret = write1(f, r, p, 'W');
	if (out)
		*out = r;
	else
		mrmgr_put(r);
	return ret;
}

/* ------------------------------------------------------------ external */

Test(external, notify_invalidates_and_is_required)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_EXTERNAL);
	mrmgr_region_t *r1, *r2;
	char *p = map_rw(LEN, 0);

	need_identity();
	fx_open(&f, NULL, &a);
	cr_assert_eq(minfo(f.cache).sources, MRMGR_MONITOR_SRC_EXTERNAL);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r1), 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	/* Not reported: the program broke its promise, and it shows. */
	cr_assert_eq(remap_get_write(&f, p, &r2), ESTALE);
	cr_assert_eq(mrmgr_region_rkey(r2), key1);
	mrmgr_put(r2);
	/* Reported (a page of it is enough): a fresh registration. */
	remap_fixed(p, LEN, 'm');
	cr_assert_eq(mrmgr_notify_unmap(p + 5 * PAGE, 1), 0);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r2), 0);
	cr_assert_neq(mrmgr_region_rkey(r2), key1);
	cr_assert_eq(write1(&f, r2, p, 'W'), 0);
	mrmgr_put(r2);
	cr_assert_eq(minfo(f.cache).invalidations, 1);
	cr_assert_geq(minfo(f.cache).notify_events, 1);
	fx_close(&f);
	munmap(p, LEN);
}

Test(external, notify_bad_input)
{
	cr_assert_eq(mrmgr_notify_unmap((void *)0x1000, 0), EINVAL);
	cr_assert_eq(mrmgr_notify_unmap((void *)(uintptr_t)-4096, 8192), EINVAL);
	cr_assert_eq(mrmgr_notify_unmap(NULL, SIZE_MAX), 0, "everything is fine");
}

static mrmgr_cache_t *sig_cache;
static char *sig_p;

static void on_signal(int sig)
{
	(void)sig;
	(void)mrmgr_notify_unmap(sig_p, LEN);
}

Test(external, notify_from_a_signal_handler)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_EXTERNAL);
	mrmgr_region_t *r1, *r2;

	sig_p = map_rw(LEN, 0);
	fx_open(&f, NULL, &a);
	sig_cache = f.cache;
	signal(SIGUSR1, on_signal);
	cr_assert_eq(mrmgr_get(f.cache, sig_p, LEN, RW, &r1), 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	raise(SIGUSR1);
	cr_assert_eq(mrmgr_get(f.cache, sig_p, LEN, RW, &r2), 0);
	cr_assert_neq(mrmgr_region_rkey(r2), key1);
	mrmgr_put(r2);
	fx_close(&f);
	munmap(sig_p, LEN);
}

Test(external, queue_overflow_invalidates_everything)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_EXTERNAL);
	mrmgr_region_t *r1, *r2;
	char *area = map_rw(4 * MiB, 0);
	/* The region and the events in one 2 MiB block: events in a block
	 * where nothing was registered stop at the monitor's filter and
	 * never reach the queue (the test failed whenever the mapping put
	 * p + LEN past a 2 MiB boundary, about 1 run in 32). */
	char *p = (char *)(((uintptr_t)area + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r1), 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	/* Many events that do not touch the region, more than the queue
	 * holds, before the cache looks again. */
	for (int i = 0; i < 10000; i++)
		cr_assert_eq(mrmgr_notify_unmap(p + LEN, PAGE), 0);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r2), 0);
	cr_assert_neq(mrmgr_region_rkey(r2), key1,
		      "fell behind: everything must be invalidated");
	mrmgr_put(r2);
	cr_assert_eq(minfo(f.cache).overflows, 1);
	fx_close(&f);
	munmap(area, 4 * MiB);
}

Test(external, none_mode_caches_everything)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_NONE);
	mrmgr_region_t *r;
	char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	fx_open(&f, NULL, &a);
	cr_assert_eq(minfo(f.cache).sources, 0);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "shared memory cached: no monitor asked");
	fx_close(&f);
	munmap(p, LEN);
}

Test(external, bad_mode_and_environment)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(99);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *c;

	cr_assert_eq(mrmgr_sim_open(NULL, &ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(mrmgr_cache_create(pd, &a, &c), EINVAL);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);

	/* The program's choice wins; the variable fills what it left unset. */
	setenv("MRMGR_MONITOR", "external", 1);
	a = attr_mode(MRMGR_MONITOR_UFFD);
	fx_open(&f, NULL, &a);
	cr_assert_eq(minfo(f.cache).mode, MRMGR_MONITOR_UFFD, "the attribute wins");
	fx_close(&f);
	fx_open(&f, NULL, NULL);
	unsetenv("MRMGR_MONITOR");
	cr_assert_eq(minfo(f.cache).mode, MRMGR_MONITOR_EXTERNAL, "the variable fills");
	fx_close(&f);
}

/* ------------------------------------------------------------ no source */

/* With nothing watching: correct results, nothing cached. */
static void check_no_caching(struct fixture *f)
{
	char *p = map_rw(LEN, 0);
	mrmgr_region_t *r;

	for (int i = 0; i < 5; i++) {
		cr_assert_eq(mrmgr_get(f->cache, p, LEN, RW, &r), 0);
		cr_assert_eq(write1(f, r, p, 'W'), 0);
		mrmgr_put(r);
		cr_assert_eq(sstats(f->ctx).live_mrs, 0, "nothing watched: nothing cached");
		remap_fixed(p, LEN, 'x');
	}
	cr_assert_eq(minfo(f->cache).unwatched, 5);
	cr_assert_eq(cstats(f->cache).uncached, 5);
	cr_assert_eq(sstats(f->ctx).stale_accesses, 0);
	munmap(p, LEN);
}

Test(no_source, delivery_self_test_fails)
{
	struct fixture f;
	/* userfaultfd is opt-in: auto never tries it (doc/monitor.md). */
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_UFFD);

	mrmgr__mon_test_flags = MRMGR__MON_TEST_DROP_EVENTS;
	mrmgr__patch_test_flags = MRMGR__PATCH_TEST_UNKNOWN_PROLOGUE; /* no libc patching */
	fx_open(&f, NULL, &a);
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.uffd_error, ETIMEDOUT);
	cr_assert_eq(m.sources, 0);
	check_no_caching(&f);
	fx_close(&f);
}

Test(no_source, userfaultfd_refused)
{
	struct fixture f;
	/* userfaultfd is opt-in: auto never tries it (doc/monitor.md). */
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_UFFD);

	mrmgr__mon_test_flags = MRMGR__MON_TEST_UFFD_EPERM;
	mrmgr__patch_test_flags = MRMGR__PATCH_TEST_UNKNOWN_PROLOGUE; /* no libc patching */
	fx_open(&f, NULL, &a);
	cr_assert_eq(minfo(f.cache).uffd_error, EPERM);
	check_no_caching(&f);
	fx_close(&f);
}

Test(no_source, seccomp_refuses_userfaultfd)
{
	struct fixture f;
	/* userfaultfd is opt-in: auto never tries it (doc/monitor.md). */
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_UFFD);

	refuse_userfaultfd();
	cr_assert_eq(syscall(__NR_userfaultfd, 0), -1);
	mrmgr__patch_test_flags = MRMGR__PATCH_TEST_UNKNOWN_PROLOGUE; /* no libc patching */
	fx_open(&f, NULL, &a);
	cr_assert_eq(minfo(f.cache).uffd_error, EPERM);
	check_no_caching(&f);
	fx_close(&f);
}

Test(no_source, unprivileged_process_uses_user_mode_only)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_UFFD);
	mrmgr_region_t *r1, *r2;
	char *p = map_rw(LEN, 0);
	FILE *sysctl = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
	int unpriv = 1;

	if (getuid() != 0)
		cr_skip_test("needs root to drop to an unprivileged user");
	if (sysctl) {
		if (fscanf(sysctl, "%d", &unpriv) != 1)
			unpriv = 1;
		fclose(sysctl);
	}
	cr_assert_eq(setresgid(65534, 65534, 65534), 0);
	cr_assert_eq(setresuid(65534, 65534, 65534), 0);
	fx_open(&f, NULL, &a);
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.uffd_error, 0, "userfaultfd: %s", strerror(m.uffd_error));
	if (!unpriv)
		cr_assert(m.uffd_flags & MRMGR_MONITOR_UFFD_USER_MODE_ONLY);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r1), 0);
	uint32_t key1 = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	remap_fixed(p, LEN, 'u');
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r2), 0);
	cr_assert_neq(mrmgr_region_rkey(r2), key1);
	mrmgr_put(r2);
	fx_close(&f);
	munmap(p, LEN);
}

/* ------------------------------------------------------------ VMAs */

/*
 * VMAs that overlap [a, a + len): the test's own mapping only, so the
 * library's own allocations (its region slabs are mappings of their own)
 * do not count.
 */
static int vma_count(const void *a, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	uintptr_t s = (uintptr_t)a, e = s + len;
	unsigned long lo, hi;
	char line[512];
	int n = 0;

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo < e && hi > s)
			n++;
	fclose(f);
	return n;
}

Test(vma, whole_vmas_are_registered_never_split)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_UFFD);
	mrmgr_region_t *r;
	char *p = map_rw(32 * LEN, 0);
	int before;

	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags = MRMGR_CACHE_NO_MERGE;
	fx_open(&f, NULL, &a);
	if (!(minfo(f.cache).sources & MRMGR_MONITOR_SRC_UFFD))
		cr_skip_test("userfaultfd unavailable here");
	before = vma_count(p, 32 * LEN);
	for (int i = 0; i < 16; i++) {
		cr_assert_eq(mrmgr_get(f.cache, p + 2 * i * LEN, LEN, RW, &r), 0);
		mrmgr_put(r);
	}
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.watched_ranges, 16);
	cr_assert_eq(m.watched_runs, 1, "one VMA");
	cr_assert_eq(vma_count(p, 32 * LEN), before,
		     "registration must not split the VMA");
	/* So the program can still move the buffer as one piece. */
	char *q = mremap(p, 32 * LEN, 32 * LEN, MREMAP_MAYMOVE | MREMAP_FIXED,
			 p + 64 * LEN);
	cr_assert_eq(q, p + 64 * LEN, "mremap: %s", strerror(errno));
	cr_assert_eq(mrmgr_get(f.cache, q, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(minfo(f.cache).invalidations, 16, "the move was seen");
	fx_close(&f);
	munmap(q, 32 * LEN);
}

Test(vma, budget_bounds_runs_and_unwatch_unregisters)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_UFFD);
	mrmgr_region_t *r;
	char *p[16];
	int before;

	mrmgr__watch_budget_override = 4;
	fx_open(&f, NULL, &a);
	if (!(minfo(f.cache).sources & MRMGR_MONITOR_SRC_UFFD))
		cr_skip_test("userfaultfd unavailable here");
	/* 16 mappings with holes between them: 16 runs wanted, 4 allowed. */
	char *area = map_rw(32 * LEN, 0);
	for (int i = 0; i < 16; i++) {
		p[i] = area + 2 * i * LEN;
		cr_assert_eq(munmap(p[i] + LEN, LEN), 0);
	}
	before = vma_count(area, 32 * LEN);
	for (int i = 0; i < 16; i++) {
		cr_assert_eq(mrmgr_get(f.cache, p[i], LEN, RW, &r), 0);
		mrmgr_put(r);
	}
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.watched_runs, 4);
	cr_assert_eq(m.unwatched, 12);
	cr_assert_eq(sstats(f.ctx).live_mrs, 4);
	/* Inside a watched VMA: no new run, so it is allowed. */
	cr_assert_eq(mrmgr_get(f.cache, p[0] + PAGE, PAGE, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(minfo(f.cache).watched_runs, 4);
	/* Invalidating unregisters everything. */
	cr_assert_eq(mrmgr_invalidate(f.cache, area, 32 * LEN), 0);
	m = minfo(f.cache);
	cr_assert_eq(m.watched_ranges, 0);
	cr_assert_eq(m.watched_runs, 0);
	cr_assert_eq(vma_count(area, 32 * LEN), before);
	fx_close(&f);
	for (int i = 0; i < 16; i++)
		munmap(p[i], LEN);
}

Test(vma, regions_of_one_vma_share_its_registration)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr_mode(MRMGR_MONITOR_UFFD);
	mrmgr_region_t *r;
	char *p = map_rw(8 * LEN, 0);
	uint32_t key5 = 0;

	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags = MRMGR_CACHE_NO_MERGE;
	fx_open(&f, NULL, &a);
	if (!(minfo(f.cache).sources & MRMGR_MONITOR_SRC_UFFD))
		cr_skip_test("userfaultfd unavailable here");
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(mrmgr_get(f.cache, p + i * LEN, LEN, RW, &r), 0);
		if (i == 5)
			key5 = mrmgr_region_rkey(r);
		mrmgr_put(r);
	}
	cr_assert_eq(minfo(f.cache).watched_runs, 1);
	/* The first region's entry is the shared one: it leaves first. */
	cr_assert_eq(mrmgr_invalidate(f.cache, p, LEN), 0);
	cr_assert_eq(minfo(f.cache).watched_ranges, 7);
	/* The VMA is still watched for the others. */
	cr_assert_eq(madvise(p + 5 * LEN, PAGE, MADV_DONTNEED), 0);
	cr_assert_eq(mrmgr_get(f.cache, p + 5 * LEN, LEN, RW, &r), 0);
	cr_assert_neq(mrmgr_region_rkey(r), key5, "the event must still come");
	mrmgr_put(r);
	/* Nothing cached any more: unregistered, so no more events. */
	cr_assert_eq(mrmgr_invalidate(f.cache, p, 8 * LEN), 0);
	cr_assert_eq(minfo(f.cache).watched_ranges, 0);
	cr_assert_eq(minfo(f.cache).watched_runs, 0);
	uint64_t events = minfo(f.cache).uffd_events;
	cr_assert_eq(madvise(p, LEN, MADV_DONTNEED), 0);
	cr_assert_eq(minfo(f.cache).uffd_events, events);
	fx_close(&f);
	munmap(p, 8 * LEN);
}

/* ------------------------------------------------------------ fork */

/* The child cannot use Criterion's asserts: it reports with its status. */
static int child_body(struct fixture *f, char *p, mrmgr_region_t *held,
		      uint32_t parent_rkey, int parent_uffd)
{
	struct mrmgr_monitor_info m;
	mrmgr_region_t *r;

	if (mrmgr_cache_query_monitor(f->cache, &m, sizeof(m)) || m.fork_purges != 1)
		return 1;
	if (mrmgr_get(f->cache, p, LEN, RW, &r))
		return 2;
	if (r == held || mrmgr_region_rkey(r) == parent_rkey)
		return 3; /* the parent's registration */
	if (write1(f, r, p, 'c'))
		return 4;
	mrmgr_put(r);
	/* The child has a monitor of its own. */
	remap_fixed(p, LEN, 'k');
	if (mrmgr_get(f->cache, p, LEN, RW, &r))
		return 5;
	if (write1(f, r, p, 'd'))
		return 6;
	mrmgr_put(r);
	if (mrmgr_cache_query_monitor(f->cache, &m, sizeof(m)))
		return 7;
	if (parent_uffd && !(m.sources & MRMGR_MONITOR_SRC_UFFD))
		return 8;
	if (parent_uffd && m.events < 1)
		return 9;
	mrmgr_put(held); /* abandoned in the child: nothing happens */
	if (mrmgr_cache_destroy(f->cache))
		return 10;
	return 0;
}

Test(fork, child_uses_the_library_and_never_the_parents_regions)
{
	struct fixture f;
	mrmgr_region_t *held, *idle, *r;
	char *p = map_rw(LEN, 0), *q = map_rw(LEN, 0);
	uint32_t rkey;
	int status, uffd;
	pid_t pid;

	need_identity();
	fx_open(&f, NULL, NULL);
	uffd = !!(minfo(f.cache).sources & MRMGR_MONITOR_SRC_UFFD);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &held), 0);
	cr_assert_eq(mrmgr_get(f.cache, q, LEN, RW, &idle), 0);
	uint32_t idle_key = mrmgr_region_rkey(idle);
	mrmgr_put(idle);
	rkey = mrmgr_region_rkey(held);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(child_body(&f, p, held, rkey, uffd));
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "the child died");
	cr_assert_eq(WEXITSTATUS(status), 0, "child check %d failed", WEXITSTATUS(status));

	/* The parent: the simulated HCA's holds do not survive a fork (like
	 * IBV_FORK_DISABLED), so its caches were purged too. */
	cr_assert_eq(minfo(f.cache).fork_purges, 1);
	cr_assert_eq(mrmgr_get(f.cache, q, LEN, RW, &r), 0);
	cr_assert_neq(mrmgr_region_rkey(r), idle_key);
	cr_assert_eq(write1(&f, r, q, 'p'), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	cr_assert_neq(r, held, "a region held across fork was detached");
	cr_assert_eq(write1(&f, r, p, 'p'), 0);
	mrmgr_put(r);
	mrmgr_put(held);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, LEN);
	munmap(q, LEN);
}

Test(fork, repeated_forks_while_another_thread_unmaps)
{
	struct fixture f;
	char *p = map_rw(LEN, 0);

	need_identity();
	fx_open(&f, NULL, NULL);
	for (int i = 0; i < 20; i++) {
		mrmgr_region_t *r;
		int status;
		pid_t pid;

		cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
		mrmgr_put(r);
		pid = fork();
		if (pid == 0) {
			mrmgr_region_t *c;
			int bad = mrmgr_get(f.cache, p, LEN, RW, &c) ||
				  write1(&f, c, p, 'c');

			_exit(bad);
		}
		remap_fixed(p, LEN, 'r');
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
		cr_assert_eq(write1(&f, r, p, 'W'), 0);
		mrmgr_put(r);
	}
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, LEN);
}
