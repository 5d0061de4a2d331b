/*
 * The stale check (MRMGR_CHECK=stale, MRMGR_CACHE_CHECK_STALE,
 * lib/core/stale.c). Stale hits are provoked on purpose with the monitor
 * off (MRMGR_MONITOR_NONE caches everything and follows nothing): the
 * check catches each (error line, stale_hits) and hands out a fresh
 * registration, which the simulated HCA's page identity confirms; the
 * same run without the check writes through the stale one. With
 * pagemap's page frames hidden (the test hook, or CAP_SYS_ADMIN
 * dropped for real) it catches what it says it can and stays blind
 * where it says it is.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monitor_helpers.h"
#include "stale.h"

#define PG ((size_t)4096)
#define NPG 16
#define LEN (NPG * PG)

static struct mrmgr_cache_attr attr_of(uint32_t monitor, uint64_t flags)
{
	return (struct mrmgr_cache_attr){
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES |
			     MRMGR_CACHE_ATTR_MONITOR | MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = 1ull << 32,
		.monitor = monitor,
		.flags = flags,
	};
}

/* Error lines, kept for the assertions. */
static char said[4096];
static int errors;
static void catch_log(enum mrmgr_log_level lvl, const char *msg, void *arg)
{
	(void)arg;
	if (lvl == MRMGR_LOG_ERROR) {
		size_t n = strlen(said);

		errors++;
		snprintf(said + n, sizeof(said) - n, "%s\n", msg);
	}
}

static uint32_t get_put(struct fixture *f, char *p, int write_ok)
{
	mrmgr_region_t *r;
	uint32_t k;
	char b = 'W';

	cr_assert_eq(mrmgr_get(f->cache, p, LEN, RW, &r), 0);
	k = mrmgr_region_rkey(r);
	if (write_ok >= 0)
		cr_assert_eq(mrmgr_sim_write(f->pd, k, (uint64_t)(uintptr_t)p +
					     3 * PG, &b, 1) == 0, write_ok,
			     "the write through rkey %#x: %s", k,
			     write_ok ? "stale" : "not stale");
	mrmgr_put(r);
	return k;
}

/* The provoked stale hit: registered, then the memory replaced (the same
 * address, new pages, touched) where the monitor does not look. */
static void provoke(struct fixture *f, char *p, uint32_t *k1, uint32_t *k2,
		    int write_ok)
{
	*k1 = get_put(f, p, 1);
	cr_assert_eq(get_put(f, p, -1), *k1, "not cached");
	remap_fixed(p, LEN, 'n');
	*k2 = get_put(f, p, write_ok);
}

Test(stale, caught_with_the_monitor_off)
{
	struct mrmgr_cache_attr a = attr_of(MRMGR_MONITOR_NONE, MRMGR_CACHE_CHECK_STALE);
	struct fixture f;
	char *p = map_rw(LEN, 'a');
	uint32_t k1, k2;

	need_identity();
	mrmgr_set_log_handler(catch_log, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, &a);
	provoke(&f, p, &k1, &k2, 1);
	cr_assert_neq(k2, k1, "the stale registration was handed out");
	cr_assert_eq(cstats(f.cache).stale_hits, 1);
	cr_assert_geq(cstats(f.cache).stale_checks, 3);
	cr_assert_eq(errors, 3, "one report (3 lines): %d", errors);
	cr_log_info("%s", said);
	cr_assert(strstr(said, "STALE HIT"));
	cr_assert(strstr(said, "page frame"));
	cr_assert(strstr(said, "mode none"));
	cr_assert(strstr(said, "got 3 times"), "the history: %s", said);
	/* The fresh one is cached and checked in its turn: quiet. */
	cr_assert_eq(get_put(&f, p, 1), k2);
	cr_assert_eq(cstats(f.cache).stale_hits, 1);
	/* A second stale hit is counted, not said at error level again. */
	remap_fixed(p, LEN, 'm');
	cr_assert_neq(get_put(&f, p, 1), k2);
	cr_assert_eq(cstats(f.cache).stale_hits, 2);
	cr_assert_eq(errors, 3);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(p, LEN);
}

/* The control: the same without the check is the silent corruption. */
Test(stale, without_the_check_the_write_is_stale)
{
	struct mrmgr_cache_attr a = attr_of(MRMGR_MONITOR_NONE, 0);
	struct fixture f;
	char *p = map_rw(LEN, 'a');
	uint32_t k1, k2;

	need_identity();
	unsetenv("MRMGR_CHECK");
	fx_open(&f, NULL, &a);
	provoke(&f, p, &k1, &k2, 0);
	cr_assert_eq(k2, k1);
	cr_assert_eq(cstats(f.cache).stale_hits, 0);
	cr_assert_eq(cstats(f.cache).stale_checks, 0);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 1);
	fx_close(&f);
	munmap(p, LEN);
}

Test(stale, turned_on_by_the_environment)
{
	static const char *const values[] = { "stale", "puts,stale", "all",
					      "STALE" };

	need_identity();
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		struct mrmgr_cache_attr a = attr_of(MRMGR_MONITOR_NONE, 0);
		struct fixture f;
		char *p = map_rw(LEN, 'a');
		uint32_t k1, k2;

		setenv("MRMGR_CHECK", values[i], 1);
		fx_open(&f, NULL, &a);
		provoke(&f, p, &k1, &k2, 1);
		cr_assert_neq(k2, k1, "MRMGR_CHECK=%s", values[i]);
		cr_assert_eq(cstats(f.cache).stale_hits, 1);
		fx_close(&f);
		munmap(p, LEN);
	}
	setenv("MRMGR_CHECK", "1", 1); /* the put check only */
	{
		struct mrmgr_cache_attr a = attr_of(MRMGR_MONITOR_NONE, 0);
		struct fixture f;
		char *p = map_rw(LEN, 'a');
		uint32_t k1, k2;

		fx_open(&f, NULL, &a);
		provoke(&f, p, &k1, &k2, 0);
		cr_assert_eq(cstats(f.cache).stale_checks, 0);
		fx_close(&f);
		munmap(p, LEN);
	}
}

/* With a monitor that follows the change: checked, and nothing to say. */
Test(stale, quiet_where_the_monitor_follows)
{
	struct mrmgr_cache_attr a = attr_of(MRMGR_MONITOR_AUTO, MRMGR_CACHE_CHECK_STALE);
	struct fixture f;
	char *p = map_rw(LEN, 'a');
	uint32_t k1, k2;

	need_identity();
	mrmgr_set_log_handler(catch_log, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, &a);
	provoke(&f, p, &k1, &k2, 1);
	cr_assert_neq(k2, k1);
	cr_assert(madvise(p, LEN, MADV_DONTNEED) == 0);
	memset(p, 'd', LEN);
	get_put(&f, p, 1);
	cr_assert_eq(cstats(f.cache).stale_hits, 0);
	cr_assert_geq(cstats(f.cache).stale_checks, 4);
	cr_assert_eq(errors, 0, "%s", said);
	fx_close(&f);
	munmap(p, LEN);
}

/*
 * Without page frames: a page gone (not touched since) and a mapping of
 * something else are caught; an anonymous page replaced by another that
 * was touched is not, as the warning at creation says.
 */
static void blind_cases(void)
{
	struct mrmgr_cache_attr a = attr_of(MRMGR_MONITOR_NONE, MRMGR_CACHE_CHECK_STALE);
	struct fixture f;
	char *p = map_rw(LEN, 'a');
	char path[] = "/tmp/mrmgr-stale-XXXXXX";
	uint32_t k, k2;
	int fd;

	mrmgr_set_log_handler(catch_log, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, &a);
	/* Gone: DONTNEED, not touched. */
	k = get_put(&f, p, -1);
	cr_assert_eq(madvise(p + 5 * PG, PG, MADV_DONTNEED), 0);
	k2 = get_put(&f, p, -1);
	cr_assert_neq(k2, k, "a page gone was not seen");
	cr_assert_eq(cstats(f.cache).stale_hits, 1);
	cr_assert(strstr(said, "pagemap flags"), "%s", said);
	/* Another mapping: a private file mapping over a page. */
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(ftruncate(fd, (off_t)PG), 0);
	cr_assert_eq(mmap(p + 7 * PG, PG, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_FIXED, fd, 0), p + 7 * PG);
	p[7 * PG] = 'f';
	cr_assert_neq(get_put(&f, p, -1), k2, "a file mapped over it was not seen");
	cr_assert_eq(cstats(f.cache).stale_hits, 2);
	close(fd);
	/* Blind: anonymous for anonymous, touched. */
	char *q = map_rw(LEN, 'q');
	k = get_put(&f, q, -1);
	remap_fixed(q, LEN, 'n');
	cr_assert_eq(get_put(&f, q, -1), k, "seen after all: update the docs");
	cr_assert_eq(cstats(f.cache).stale_hits, 2);
	fx_close(&f);
	munmap(p, LEN);
	munmap(q, LEN);
}

Test(stale, without_page_frames_by_the_test_hook)
{
	mrmgr__stale_test_no_pfn = 1;
	blind_cases();
}

/* The same for real: CAP_SYS_ADMIN dropped before pagemap is opened
 * (the kernel decides at open whether the reader sees frames). Run as
 * any user: without root it is the case already. */
Test(stale, without_page_frames_after_dropping_cap_sys_admin)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	cr_assert_eq(syscall(SYS_capget, &h, d), 0);
	d[CAP_SYS_ADMIN / 32].effective &= ~(1u << (CAP_SYS_ADMIN % 32));
	d[CAP_SYS_ADMIN / 32].permitted &= ~(1u << (CAP_SYS_ADMIN % 32));
	cr_assert_eq(syscall(SYS_capset, &h, d), 0);
	cr_assert_not(mrmgr_sim_page_identity_available(),
		      "pagemap still shows frames");
	blind_cases();
}

/* In a child the check reads the child's pagemap (a descriptor opened
 * by the parent would show the parent's pages): a stale hit there is
 * caught as in the parent. */
Test(stale, caught_in_a_forked_child)
{
	struct mrmgr_cache_attr a = attr_of(MRMGR_MONITOR_NONE, MRMGR_CACHE_CHECK_STALE);
	struct fixture f;
	char *p = map_rw(LEN, 'a');
	uint32_t k1, k2;
	int status;
	pid_t pid;

	need_identity();
	fx_open(&f, NULL, &a);
	(void)get_put(&f, p, -1); /* the parent's pagemap is open */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) { /* no cr_assert here: the child reports by status */
		char *q = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct mrmgr_stats st;
		mrmgr_region_t *r;
		int bad = q == MAP_FAILED;

		for (int i = 0; i < 2 && !bad; i++) {
			if (i)
				memset(mmap(q, LEN, PROT_READ | PROT_WRITE,
					    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
					    -1, 0), 'n', LEN);
			else
				memset(q, 'c', LEN);
			bad |= mrmgr_get(f.cache, q, LEN, RW, &r) != 0;
			if (bad)
				break;
			k2 = mrmgr_region_rkey(r);
			if (!i)
				k1 = k2;
			mrmgr_put(r);
		}
		bad |= mrmgr_cache_query_stats(f.cache, &st, sizeof(st)) != 0;
		_exit(bad ? 2 : k2 != k1 && st.stale_hits == 1 ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child's stale hit was not caught");
	fx_close(&f);
	munmap(p, LEN);
}
