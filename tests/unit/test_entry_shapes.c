/*
 * The libc patch engine on the entry shapes other glibc builds have
 * (tests/unit/entry_shapes_x86_64.S, a CET-marked shared object): each
 * accepted shape is planned, encoded and written by the engine's own code
 * (mrmgr__patch_test_site) while threads call it; every call returns
 * either the original's value (before the swap) or the hook's, every call
 * made after the patch returned reaches the hook, and nothing crashes. The
 * shapes the engine must refuse are refused, and left as they were.
 *
 * The interleaving of callers and the swap is whatever the scheduler
 * makes it; what is asserted holds for every interleaving.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "patch.h"

#if defined(__x86_64__)

typedef long (*shape_fn)(long, long, long, long, long, long);

long shape_mmap(long, long, long, long, long, long);
long shape_mremap(long, long, long, long, long, long);
long shape_mremap_231(long, long, long, long, long, long);
long shape_riprel(long, long, long, long, long, long);
long shape_movnr(long, long, long, long, long, long);
long shape_push_r15(long, long, long, long, long, long);
long shape_inner_pad(long, long, long, long, long, long);
long shape_refused_push_rbp(long, long, long, long, long, long);
long shape_refused_loop(long, long, long, long, long, long);
long shape_refused_no_syscall(long, long, long, long, long, long);
long shape_refused_clobbered(long, long, long, long, long, long);
long shape_refused_branch_first(long, long, long, long, long, long);

#define THREADS 4
#define CALLS 20000 /* per thread, before and after the patch each */
#define HOOKED 4242

static unsigned long hook_calls;

static long hook(void)
{
	__atomic_fetch_add(&hook_calls, 1, __ATOMIC_RELAXED);
	return HOOKED;
}

struct shape {
	shape_fn fn;
	long nr;
	long a[6];
	long orig; /* what the unpatched function returns for a[] */
};

static struct shape cur;
static int patched;
static unsigned long before[THREADS], after[THREADS], bad[THREADS],
	hooked_seen[THREADS];

static void *caller(void *arg)
{
	size_t k = (size_t)(uintptr_t)arg;

	while (__atomic_load_n(&after[k], __ATOMIC_RELAXED) < CALLS) {
		int was = __atomic_load_n(&patched, __ATOMIC_ACQUIRE);
		long r = cur.fn(cur.a[0], cur.a[1], cur.a[2], cur.a[3], cur.a[4],
				cur.a[5]);

		if (r == HOOKED)
			hooked_seen[k]++;
		if ((r != HOOKED && (was || r != cur.orig)))
			bad[k]++;
		__atomic_store_n(was ? &after[k] : &before[k],
				 (was ? after[k] : before[k]) + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void patch_under_callers(struct shape sh, const char *name)
{
	pthread_t th[THREADS];
	struct mrmgr__patch_site s;
	unsigned long seen = 0;
	int err;

	cur = sh;
	patched = 0;
	hook_calls = 0;
	memset(before, 0, sizeof(before));
	memset(after, 0, sizeof(after));
	memset(bad, 0, sizeof(bad));
	memset(hooked_seen, 0, sizeof(hooked_seen));
	cr_assert_eq(sh.fn(sh.a[0], sh.a[1], sh.a[2], sh.a[3], sh.a[4], sh.a[5]),
		     sh.orig, "%s unpatched", name);
	for (size_t k = 0; k < THREADS; k++)
		cr_assert_eq(pthread_create(&th[k], NULL, caller, (void *)k), 0);
	/* Patch only once every thread is calling. */
	for (size_t k = 0; k < THREADS; k++)
		while (__atomic_load_n(&before[k], __ATOMIC_RELAXED) < 1000)
			sched_yield();
	err = mrmgr__patch_test_site((void *)sh.fn, sh.nr, (void (*)(void))hook, &s);
	if (!err)
		__atomic_store_n(&patched, 1, __ATOMIC_RELEASE);
	for (size_t k = 0; k < THREADS && err; k++)
		__atomic_store_n(&after[k], CALLS, __ATOMIC_RELAXED);
	for (size_t k = 0; k < THREADS; k++)
		pthread_join(th[k], NULL);
	cr_assert_eq(err, 0, "%s: not patched: %s", name, strerror(err));
	for (size_t k = 0; k < THREADS; k++) {
		cr_expect_eq(bad[k], 0, "%s: thread %zu: %lu calls returned neither "
			     "the original's value nor the hook's, or the original's "
			     "after the patch", name, k, bad[k]);
		seen += hooked_seen[k];
	}
	cr_expect_eq(__atomic_load_n(&hook_calls, __ATOMIC_RELAXED), seen,
		     "%s: the hook ran %lu times, callers saw %lu", name, hook_calls, seen);
	cr_expect_geq(seen, (unsigned long)THREADS * CALLS, "%s", name);
	cr_expect_eq(sh.fn(sh.a[0], sh.a[1], sh.a[2], sh.a[3], sh.a[4], sh.a[5]),
		     HOOKED, "%s patched", name);
	if (s.pad)
		cr_log_info("%s: jump of %u bytes at entry%+ld to the padding at "
			    "entry%+ld", name, s.len, (long)(s.at - s.fn),
			    (long)(s.pad - s.fn));
	else
		cr_log_info("%s: jump of %u bytes at entry%+ld", name, s.len,
			    (long)(s.at - s.fn));
}

#define ARGS(...) { __VA_ARGS__ }

Test(shapes, endbr64_test_r9d_as_2_41_mmap)
{
	/* r9 not page aligned: the wrapper's own EINVAL path */
	patch_under_callers((struct shape){ shape_mmap, 9, ARGS(0, 4096, 0, 0, -1, 1), -22 },
			    "endbr64; test $0xfff,%r9d");
}

Test(shapes, endbr64_sub_rsp_as_2_41_mremap)
{
	patch_under_callers((struct shape){ shape_mremap, 25, ARGS(1, 4096, 4096, 0, 0, 0), -22 },
			    "endbr64; sub $0x58,%rsp");
}

Test(shapes, mov_rcx_r10_as_2_31_mremap)
{
	patch_under_callers((struct shape){ shape_mremap_231, 25, ARGS(1, 4096, 4096, 0, 0, 0), -22 },
			    "mov %rcx,%r10");
}

Test(shapes, rip_relative_first_as_2_41_sbrk)
{
	patch_under_callers((struct shape){ shape_riprel, 28, ARGS(1, 4096, 4, 0, 0, 0), -22 },
			    "endbr64; cmpb $0,disp(%rip)");
}

Test(shapes, mov_nr_eax_as_munmap)
{
	patch_under_callers((struct shape){ shape_movnr, 11, ARGS(1, 4096, 0, 0, 0, 0), -22 },
			    "endbr64; mov $NR,%eax");
}

Test(shapes, push_r15)
{
	patch_under_callers((struct shape){ shape_push_r15, 11, ARGS(1, 4096, 0, 0, 0, 0), -22 },
			    "endbr64; push %r15");
}

Test(shapes, sub_rsp_with_padding_only_inside_as_2_43_sbrk)
{
	patch_under_callers((struct shape){ shape_inner_pad, 11, ARGS(1, 4096, 0, 0, 0, 0), -22 },
			    "sub $0x18,%rsp, padding inside");
	/* Where the plan put the pad, read back from the bytes: the short
	 * jump's target. */
	{
		const unsigned char *p = (const unsigned char *)(uintptr_t)shape_inner_pad;
		uintptr_t pad = (uintptr_t)p + 2 + (uintptr_t)(intptr_t)(signed char)p[1];

		cr_assert_eq(p[0], 0xeb, "a 2-byte jump at the entry");
		cr_expect(pad > (uintptr_t)p && pad < (uintptr_t)p + 64,
			  "the padding inside the body is used");
		cr_expect_eq(*(const unsigned char *)pad, 0xe9);
	}
}

static void refused(shape_fn fn, const char *name)
{
	struct mrmgr__patch_site s;
	unsigned char was[16];

	memcpy(was, (const void *)(uintptr_t)fn, sizeof(was));
	cr_expect_eq(mrmgr__patch_test_site((void *)fn, 11, (void (*)(void))hook, &s),
		     ENOEXEC, "%s must be refused", name);
	cr_expect_arr_eq(was, (const void *)(uintptr_t)fn, sizeof(was),
			 "%s left as it was", name);
}

Test(shapes, refused)
{
	refused(shape_refused_push_rbp, "push %rbp (1 byte)");
	refused(shape_refused_loop, "a branch back to the entry");
	refused(shape_refused_no_syscall, "no syscall");
	refused(shape_refused_clobbered, "NR overwritten before the syscall");
	refused(shape_refused_branch_first, "a jmp first");
}

#else

Test(shapes, not_x86_64, .disabled = 1)
{
}

#endif
