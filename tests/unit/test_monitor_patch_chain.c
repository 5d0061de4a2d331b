/*
 * The patch source beside another run-time patcher of libc, in both
 * orders: the other one first (libmrmgr chains on top of its jump), and
 * libmrmgr first, then overwritten (noticed, every cache invalidated,
 * chained on top again). Both hooks must see every event -- an munmap or
 * a free() of a cached range from another thread -- and no get may hit a
 * stale region. With the test-only patcher of foreign_patcher.h (each
 * jump form UCX's bistro and libfabric's memhooks write) and, where UCX
 * is installed, with UCX's own libucm and its VM_UNMAPPED events.
 *
 * Criterion runs every test in a process of its own: each starts with an
 * unpatched libc.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "foreign_patcher.h"
#include "monitor_helpers.h"
#include "monitor.h"
#include "patch.h"

#if HAVE_UCX
#include <ucm/api/ucm.h>
#endif

#define PG ((size_t)4096)
/* Every target; the test patcher leaves mprotect alone. */
#define ALL_CHAINED (MRMGR__PT_ALWAYS | (1u << MRMGR__PT_SBRK))

/* ------------------------------------------------------------ helpers */

static uint64_t mark;
static void watch(void *p, size_t l)
{
	mrmgr__mon_filter_add((uintptr_t)p, (uintptr_t)p + l - 1);
	mark = mrmgr__mon_queue_tail();
}

/* Our hooks reported a change overlapping [p, p + l) since watch(). */
static int we_saw(uintptr_t p, size_t l)
{
	return mrmgr__mon_queue_saw(mark, p, p + l - 1);
}

static int overwrite_warnings;
static void count_warnings(enum mrmgr_log_level lv, const char *msg, void *arg)
{
	(void)arg;
	if (lv == MRMGR_LOG_WARN && strstr(msg, "overwrote"))
		overwrite_warnings++;
}

struct job {
	void *p;
	size_t l; /* 0: free(p) */
};

static void *run_job(void *arg)
{
	struct job *j = arg;

	if (j->l)
		cr_assert_eq(munmap(j->p, j->l), 0);
	else
		free(j->p);
	return NULL;
}

/* Unmap (or free, l == 0) p from another thread and wait for it. */
static void elsewhere(void *p, size_t l)
{
	struct job j = { p, l };
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, run_job, &j), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
}

/* The other patcher saw an munmap covering p (as a chunk's free does). */
static int fp_saw_covering(uintptr_t p)
{
	unsigned int n = __atomic_load_n(&fp_nunmapped, __ATOMIC_ACQUIRE);

	for (unsigned int i = n > FP_LOG ? n - FP_LOG : 0; i < n; i++)
		if (fp_unmapped[i % FP_LOG][0] <= p && p < fp_unmapped[i % FP_LOG][1])
			return 1;
	return 0;
}

static int (*other_saw)(uintptr_t p) = fp_saw_covering;

/*
 * The region cached at p (rkey key) was unmapped: memory mapped again at
 * p, filled and asked for (after a get of miss_first when given: the
 * miss that notices an overwrite). When the address came back (required
 * with need_same), the get registered the new pages instead of returning
 * the old region. Unmaps it again; returns whether the address came back.
 */
static int remap_is_fresh(struct fixture *f, char *p, size_t len, uint32_t key,
			  char *miss_first, int need_same, const char *what)
{
	char *q = mmap(p, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mrmgr_region_t *r;
	int same;

	cr_assert_neq(q, MAP_FAILED);
	same = q == p;
	if (need_same)
		cr_assert(same, "the test needs the address back");
	memset(q, 'b', len);
	if (miss_first) {
		cr_assert_eq(mrmgr_get(f->cache, miss_first, len, RW, &r), 0);
		mrmgr_put(r);
	}
	cr_assert_eq(mrmgr_get(f->cache, q, len, RW, &r), 0);
	if (same)
		cr_assert_neq(mrmgr_region_rkey(r), key, "%s", what);
	mrmgr_put(r);
	cr_assert_eq(munmap(q, len), 0);
	return same;
}

/*
 * Cached ranges unmapped or freed by another thread, then memory mapped
 * at the same address and asked for: both hooks saw each unmap, and the
 * get registered the new pages. Returns how many times the address came
 * back (the stale case needs it).
 */
static int exercise(struct fixture *f, int rounds)
{
	const size_t len = 16 * PG;
	mrmgr_region_t *r;
	int same = 0;

	for (int i = 0; i < rounds; i++) {
		char *p = map_rw(len, 'a');
		uintptr_t pa = (uintptr_t)p;
		uint32_t key;

		cr_assert_eq(mrmgr_get(f->cache, p, len, RW, &r), 0);
		key = mrmgr_region_rkey(r);
		mrmgr_put(r);
		watch(p, len);
		elsewhere(p, len);
		cr_assert(other_saw(pa), "the other patcher's hook missed munmap");
		cr_assert(we_saw(pa, len), "our hook missed munmap");
		same += remap_is_fresh(f, p, len, key, NULL, 0,
				       "stale region (munmap)");
	}
	for (int i = 0; i < rounds; i++) {
		char *c = malloc(MiB), *d;
		uintptr_t ca = (uintptr_t)c;
		uint32_t key;

		cr_assert_not_null(c);
		memset(c, 5, MiB);
		cr_assert_eq(mrmgr_get(f->cache, c, MiB, RW, &r), 0);
		key = mrmgr_region_rkey(r);
		mrmgr_put(r);
		watch(c, MiB);
		elsewhere(c, 0);
		cr_assert(other_saw(ca), "the other patcher's hook missed free()'s munmap");
		cr_assert(we_saw(ca, MiB), "our hook missed free()'s munmap");
		d = malloc(MiB);
		cr_assert_not_null(d);
		memset(d, 6, MiB);
		cr_assert_eq(mrmgr_get(f->cache, d, MiB, RW, &r), 0);
		if ((uintptr_t)d == ca) {
			same++;
			cr_assert_neq(mrmgr_region_rkey(r), key, "stale region (free)");
		}
		mrmgr_put(r);
		free(d);
	}
	cr_assert_eq(sstats(f->ctx).stale_accesses, 0);
	return same;
}

/* Calls through the chain give plain libc's results and errno. */
static void check_errno(void)
{
	errno = 0;
	cr_assert_eq(munmap((void *)1, PG), -1);
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_eq(madvise((void *)1, PG, MADV_DONTNEED), -1);
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_eq(mremap((void *)1, PG, PG, 0), MAP_FAILED);
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_eq(shmdt((void *)1), -1);
	cr_assert_eq(errno, EINVAL);
}

/* A break shrink through sbrk() (malloc's path) reaches our hook. */
static void check_sbrk(void)
{
	char *b0 = sbrk(0);

	cr_assert_neq(sbrk(64 * KiB), (void *)-1);
	watch(b0, 64 * KiB);
	cr_assert_eq(sbrk(-(intptr_t)(64 * KiB)), b0 + 64 * KiB);
	cr_assert(we_saw((uintptr_t)b0, 64 * KiB), "sbrk shrink not reported");
	cr_assert_eq(sbrk(0), b0);
}

static void open_default(struct fixture *f)
{
	cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
	mrmgr__mon_test_flags = MRMGR__MON_TEST_UFFD_EPERM;
	fx_open(f, NULL, NULL);
}

/* ------------------------------------------------------------ foreign first */

static void foreign_first(enum fp_form form)
{
	struct fixture f;
	unsigned long before;

	cr_assert_eq(fp_install(form), 0);
	open_default(&f);
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.patch_error, 0, "patch source: %s", strerror(m.patch_error));
	cr_assert_eq(m.sources, MRMGR_MONITOR_SRC_PATCH);
	cr_assert_eq(m.patch_targets, ALL_CHAINED, "targets %#x", m.patch_targets);
	cr_assert_eq(m.patch_chained, ALL_CHAINED & ~(1u << MRMGR__PT_MPROTECT),
		     "chained %#x", m.patch_chained);
	cr_assert_eq(m.patch_overwrites, 0);
	before = fp_calls[FP_MUNMAP];
	cr_assert_gt(exercise(&f, 30), 0, "the address never came back");
	cr_assert_gt(fp_calls[FP_MUNMAP], before);
	check_errno();
	check_sbrk();
	cr_assert_gt(fp_calls[FP_SBRK], 0);
	fx_close(&f);
}

Test(foreign_first, jmp_rel32)
{
	foreign_first(FP_JMP_REL32);
}

Test(foreign_first, movabs_r11_jmp_r11)
{
	foreign_first(FP_MOVABS_R11);
}

Test(foreign_first, movabs_rax_jmp_rax)
{
	foreign_first(FP_MOVABS_RAX);
}

/* Without chaining (the behaviour before it), nothing would be cached. */
Test(foreign_first, unchained_steps_aside)
{
	struct fixture f;

	cr_assert_eq(fp_install(FP_MOVABS_R11), 0);
	mrmgr__patch_test_flags = MRMGR__PATCH_TEST_NO_CHAIN;
	open_default(&f);
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.patch_error, ENOEXEC);
	cr_assert_eq(m.sources, 0);
	fx_close(&f);
}

/* ------------------------------------------------------------ ours first */

static void ours_first(enum fp_form form)
{
	const size_t len = 16 * PG;
	struct fixture f;
	mrmgr_region_t *r;
	uint32_t key;
	char *p;

	open_default(&f);
	mrmgr_set_log_handler(count_warnings, NULL, MRMGR_LOG_WARN);
	cr_assert_eq(minfo(f.cache).patch_chained, 0);
	p = map_rw(len, 'a');
	cr_assert_eq(mrmgr_get(f.cache, p, len, RW, &r), 0);
	key = mrmgr_region_rkey(r);
	mrmgr_put(r);

	/* The other patcher takes the entry points over: from now on our
	 * hooks are bypassed until libmrmgr notices. */
	cr_assert_eq(fp_install(form), 0);
	watch(p, len);
	elsewhere(p, len);
	cr_assert(fp_saw_unmap(p, len));
	cr_assert_not(we_saw((uintptr_t)p, len), "our hook was not bypassed");

	/*
	 * The other patcher's mprotect() that took its write permission
	 * back pushed "everything changed": the next get, the same thread's
	 * get of the memory it mapped after the unmap, does not hit the
	 * region unmapped while we were bypassed -- no miss was needed
	 * first. That get's miss chains on top again.
	 */
	(void)remap_is_fresh(&f, p, len, key, NULL, 0, "stale region");
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.patch_overwrites, 1);
	cr_assert_eq(m.patch_chained, ALL_CHAINED & ~(1u << MRMGR__PT_MPROTECT),
		     "chained %#x", m.patch_chained);
	cr_assert_eq(m.sources, MRMGR_MONITOR_SRC_PATCH);
	cr_assert_eq(overwrite_warnings, 1);

	/* And both see every event from now on. */
	cr_assert_gt(exercise(&f, 30), 0, "the address never came back");
	check_errno();
	check_sbrk();
	cr_assert_eq(minfo(f.cache).patch_overwrites, 1);
	cr_assert_eq(overwrite_warnings, 1, "warned once");
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	fx_close(&f);
}

Test(ours_first, overwritten_by_jmp_rel32)
{
	ours_first(FP_JMP_REL32);
}

Test(ours_first, overwritten_by_movabs_r11)
{
	ours_first(FP_MOVABS_R11);
}

/*
 * A patcher that writes without libc's mprotect: nothing tells us until
 * the next cache miss, whose check of the entry bytes must notice it
 * (and invalidate everything) before the miss's own lookup matters and
 * before any later get. The miss here is of unrelated memory: the
 * region unmapped while we were bypassed is gone after it all the same.
 * Without the per-miss check, the last get hits the stale region.
 */
Test(ours_first, overwritten_without_mprotect_noticed_at_next_miss)
{
	const size_t len = 16 * PG;
	struct fixture f;
	mrmgr_region_t *r;
	uint32_t key;
	char *p, *other;

	open_default(&f);
	mrmgr_set_log_handler(count_warnings, NULL, MRMGR_LOG_WARN);
	p = map_rw(len, 'a');
	/* Not next to p: a miss there must not merge over p's region (the
	 * merged registration would pin the new pages anyway). */
	other = (char *)map_rw(3 * len, 'c') + len;
	cr_assert_eq(mrmgr_get(f.cache, p, len, RW, &r), 0);
	key = mrmgr_region_rkey(r);
	mrmgr_put(r);

	fp_raw_mprotect = 1;
	cr_assert_eq(fp_install(FP_MOVABS_R11), 0);
	fp_raw_mprotect = 0;
	watch(p, len);
	elsewhere(p, len);
	cr_assert(fp_saw_unmap(p, len));
	cr_assert_not(we_saw((uintptr_t)p, len), "our hook was not bypassed");
	/* The address must come back; then the next miss, at other (no
	 * query before it: a query checks too), notices the overwrite. */
	(void)remap_is_fresh(&f, p, len, key, other, 1, "stale region");
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.patch_overwrites, 1);
	cr_assert_eq(m.sources, MRMGR_MONITOR_SRC_PATCH);
	cr_assert_eq(overwrite_warnings, 1);
	cr_assert_gt(exercise(&f, 10), 0, "the address never came back");
	munmap(other - len, 3 * len);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	fx_close(&f);
}

/* ------------------------------------------------------------ UCX */

#if HAVE_UCX
/* UCX's VM_UNMAPPED events: ranges about to be unmapped. */
static uintptr_t ucm_ranges[FP_LOG][2];
static unsigned int ucm_n;

static void ucm_cb(ucm_event_type_t type, ucm_event_t *ev, void *arg)
{
	unsigned int i;

	(void)arg;
	if (type != UCM_EVENT_VM_UNMAPPED)
		return;
	i = __atomic_fetch_add(&ucm_n, 1, __ATOMIC_RELAXED) % FP_LOG;
	ucm_ranges[i][0] = (uintptr_t)ev->vm_unmapped.address;
	ucm_ranges[i][1] = (uintptr_t)ev->vm_unmapped.address + ev->vm_unmapped.size;
}

static int ucm_saw(uintptr_t p)
{
	unsigned int n = __atomic_load_n(&ucm_n, __ATOMIC_ACQUIRE);

	for (unsigned int i = n > FP_LOG ? n - FP_LOG : 0; i < n; i++)
		if (ucm_ranges[i % FP_LOG][0] <= p && p < ucm_ranges[i % FP_LOG][1])
			return 1;
	return 0;
}

/* Load UCX (libucs loads libucm, which patches libc when it loads) and
 * subscribe to its unmap events. */
static void load_ucx(void)
{
	ucs_status_t (*set)(int, int, ucm_event_callback_t, void *);
	void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL), *ucm;

	if (!ucs)
		cr_skip_test("libucs.so.0: %s", dlerror());
	ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD);
	cr_assert_not_null(ucm);
	*(void **)&set = dlsym(ucm, "ucm_set_event_handler");
	cr_assert_not_null(set);
	cr_assert_eq(set(UCM_EVENT_VM_UNMAPPED, 0, ucm_cb, NULL), UCS_OK);
	other_saw = ucm_saw;
}

/* Whether libucm's jump is at munmap's entry (bistro mode). */
static int ucm_patched_munmap(void)
{
	unsigned int len;
	uintptr_t d = mrmgr__patch_arch_foreign((uintptr_t)fp_entry("munmap"), &len);
	Dl_info di;

	return d && dladdr((void *)d, &di) && di.dli_fname &&
	       strstr(di.dli_fname, "libucm");
}

Test(ucx, libucm_first)
{
	struct fixture f;

	load_ucx();
	if (!ucm_patched_munmap())
		cr_skip_test("libucm did not patch munmap (not bistro mode)");
	open_default(&f);
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.patch_error, 0, "patch source: %s", strerror(m.patch_error));
	cr_assert_eq(m.sources, MRMGR_MONITOR_SRC_PATCH);
	cr_assert(m.patch_chained & (1u << MRMGR__PT_MUNMAP), "chained %#x",
		  m.patch_chained);
	cr_assert_gt(exercise(&f, 20), 0);
	check_errno();
	check_sbrk();
	fx_close(&f);
}

Test(ucx, libmrmgr_first_then_libucm)
{
	const size_t len = 16 * PG;
	struct fixture f;
	mrmgr_region_t *r;
	uint32_t key;
	char *p;

	open_default(&f);
	cr_assert_eq(minfo(f.cache).patch_chained, 0);
	p = map_rw(len, 'a');
	cr_assert_eq(mrmgr_get(f.cache, p, len, RW, &r), 0);
	key = mrmgr_region_rkey(r);
	mrmgr_put(r);
	load_ucx(); /* libucm patches libc over our jumps */
	if (!ucm_patched_munmap())
		cr_skip_test("libucm did not patch munmap (not bistro mode)");
	elsewhere(p, len);
	cr_assert(ucm_saw((uintptr_t)p));
	/* No miss in between: libucm's mprotect() after its write told us. */
	(void)remap_is_fresh(&f, p, len, key, NULL, 0, "stale region");
	struct mrmgr_monitor_info m = minfo(f.cache);
	cr_assert_eq(m.sources, MRMGR_MONITOR_SRC_PATCH);
	cr_assert_geq(m.patch_overwrites, 1);
	cr_assert(m.patch_chained & (1u << MRMGR__PT_MUNMAP), "chained %#x",
		  m.patch_chained);
	cr_assert_gt(exercise(&f, 20), 0);
	check_errno();
	check_sbrk();
	fx_close(&f);
}
#endif
