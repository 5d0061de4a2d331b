/*
 * The patch source: find libc's munmap, mremap, madvise, mmap, brk,
 * shmat and shmdt in this process, check each is the wrapper we expect,
 * redirect it to its hook (patch_hooks.c), and check the hooks really
 * receive the calls -- glibc's internal ones included -- before any
 * cache relies on them. Anything unexpected leaves libc untouched, with
 * one warning.
 *
 * Why the exported symbol's body is the right one to patch: glibc's
 * internal calls (free() -> munmap_chunk -> __munmap, heap_trim /
 * shrink_heap -> __madvise / __mmap, delete_heap -> __munmap, sbrk ->
 * __brk, malloc's morecore -> __sbrk) go to hidden aliases
 * (libc_hidden_def) of the very function the public name exports, the
 * same address, never through the PLT. The plan checks that every
 * exported alias of a target (__munmap, __mmap, mmap64, __madvise, ...)
 * has the same address, and that sbrk's body calls brk's.
 *
 * The patch is for the life of the process: the hooks issue the system
 * calls themselves and never call the original, the trampoline page is
 * never unmapped, and libmrmgr is pinned (RTLD_NODELETE) so a dlclose()
 * cannot unmap the hooks under libc. A fork child inherits the patched
 * text.
 *
 * Not used (fallback, one warning) under valgrind, which translates code
 * and would not see the patch; nor when a prologue is not the expected
 * one (another patcher, another libc), the trampoline cannot be placed,
 * the text cannot be made writable, or the self-test misses a call.
 * Under a sanitizer it runs: the runtime's interceptors (ASan's mmap,
 * TSan's mmap and munmap) call libc's entries, the patched ones; what it
 * cannot see there, the sanitizer's allocator and its raw system calls,
 * the monitor follows through the allocator's hooks beside it
 * (lib/monitor/sanalloc.c), and never vouches for it alone.
 *
 * Another patcher writing over our jumps after the install is noticed and
 * chained on top of in patch_takeover.c.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "patch.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

unsigned int mrmgr__patch_test_flags;

/* Shared with patch_takeover.c (patch.h); short here as everywhere. */
struct mrmgr__patch_globals mrmgr__patch_g;
#define P mrmgr__patch_g

int mrmgr__patch_state(int *err)
{
	if (err)
		*err = P.state == PATCH_ACTIVE ? 0 : P.err;
	return P.state;
}

uint32_t mrmgr__patch_targets(void)
{
	return __atomic_load_n(&P.targets, __ATOMIC_ACQUIRE);
}

uint32_t mrmgr__patch_chained(void)
{
	return __atomic_load_n(&P.chained, __ATOMIC_ACQUIRE);
}

uint32_t mrmgr__patch_overwrites(void)
{
	return __atomic_load_n(&P.overwrites, __ATOMIC_ACQUIRE);
}

/*
 * A sanitizer in the process: ASan, TSan, MSan, HWASan, LSan and DFSan
 * intercept these calls and replace malloc with an allocator that maps
 * and unmaps with raw system calls, which no patched libc entry sees.
 * UBSan alone does neither. The patched libc runs there, but vouches
 * only beside the sanitizer allocator's hooks (lib/monitor/sanalloc.c).
 * Decided once (a dlsym() per name: not for every miss).
 */
int mrmgr__patch_sanitizer(void)
{
	static const char *const runtimes[] = {
		"__asan_init", "__tsan_init", "__msan_init", "__hwasan_init",
		"__lsan_do_leak_check", "__dfsan_init",
	};
	static int found = -1;
	int f = __atomic_load_n(&found, __ATOMIC_RELAXED);

	if (mrmgr__patch_test_flags & MRMGR__PATCH_TEST_IGNORE_TOOLS)
		return 0;
	if (mrmgr__patch_test_flags & MRMGR__PATCH_TEST_SANITIZER)
		return 1;
	if (f >= 0)
		return f;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	f = 1; /* libmrmgr itself was built with one */
#else
	f = 0;
	for (size_t i = 0; i < MRMGR__ARRAY_SIZE(runtimes) && !f; i++)
		f = dlsym(RTLD_DEFAULT, runtimes[i]) != NULL;
#endif
	(void)runtimes;
	__atomic_store_n(&found, f, __ATOMIC_RELAXED);
	return f;
}

#if MRMGR__PATCH_SUPPORTED

static const struct target {
	const char *name;
	const char *aliases[3]; /* other exported names of the same body */
	long nr;
} T[MRMGR__PT_COUNT] = {
	[MRMGR__PT_MUNMAP] = { "munmap", { "__munmap" }, SYS_munmap },
	[MRMGR__PT_MREMAP] = { "mremap", { "__mremap" }, SYS_mremap },
	[MRMGR__PT_MADVISE] = { "madvise", { "__madvise" }, SYS_madvise },
	[MRMGR__PT_MMAP] = { "mmap", { "mmap64", "__mmap", "__mmap64" }, SYS_mmap },
	[MRMGR__PT_BRK] = { "brk", { "__brk" }, SYS_brk },
	[MRMGR__PT_SHMAT] = { "shmat", { 0 }, SYS_shmat },
	[MRMGR__PT_SHMDT] = { "shmdt", { 0 }, SYS_shmdt },
	[MRMGR__PT_SBRK] = { "sbrk", { "__sbrk" }, -1 },
	[MRMGR__PT_MPROTECT] = { "mprotect", { "__mprotect" }, SYS_mprotect },
};

const char *mrmgr__patch_target_name(int t)
{
	return T[t].name;
}

/* ------------------------------------------------------------ tools */

static int dso_named(struct dl_phdr_info *info, size_t sz, void *arg)
{
	(void)sz;
	return info->dlpi_name && strstr(info->dlpi_name, (const char *)arg);
}

/* A tool that intercepts or translates these calls, or NULL. */
static const char *tool_in_process(void)
{
	if (mrmgr__patch_test_flags & MRMGR__PATCH_TEST_IGNORE_TOOLS)
		return NULL;
#if defined(__SANITIZE_THREAD__)
	/* libmrmgr itself built with TSan (the tsan CI job): its atomics on
	 * libc's text go through TSan's shadow, which text does not have
	 * (the install crashed). A TSan program with a plain libmrmgr is
	 * patched. */
	return "libmrmgr built with ThreadSanitizer";
#endif
	if (dl_iterate_phdr(dso_named, (void *)"vgpreload"))
		return "valgrind";
	return NULL;
}

/* ------------------------------------------------------------ install */

static long page_size(void)
{
	return sysconf(_SC_PAGESIZE);
}

/* Make the text pages holding [a, a + n) writable (keeping them
 * executable: other threads run there), or restore them. */
static int text_rw(uintptr_t a, size_t n, int on)
{
	uintptr_t pg = (uintptr_t)page_size();
	uintptr_t lo = a & ~(pg - 1), hi = (a + n + pg - 1) & ~(pg - 1);

	/* PROT_BTI kept where the loader set it (patch_bti.c), also while
	 * writable: other threads run there. */
	return mprotect((void *)lo, hi - lo,
			PROT_READ | PROT_EXEC | (on ? PROT_WRITE : 0) |
				mrmgr__patch_bti_prot(lo, hi)) ? errno : 0;
}

/* Every thread of the process executes a serialising instruction before
 * it runs user code again (see patch_x86_64.c / patch_aarch64.c). */
static int sync_cores_ok = -1;
static void sync_cores(void)
{
	enum { QUERY = 0, SYNC_CORE = 1 << 5, REG_SYNC_CORE = 1 << 6 };

	if (sync_cores_ok < 0) {
		long cmds = syscall(SYS_membarrier, QUERY, 0);

		sync_cores_ok = cmds > 0 && (cmds & SYNC_CORE) &&
				syscall(SYS_membarrier, REG_SYNC_CORE, 0) == 0;
	}
	if (sync_cores_ok)
		(void)syscall(SYS_membarrier, SYNC_CORE, 0);
}

uintptr_t mrmgr__patch_tramp_page(const struct mrmgr__patch_image *im,
				  const struct mrmgr__patch_site *site, int n)
{
	uintptr_t pg = (uintptr_t)page_size(), step = (uintptr_t)1 << 20;

	for (uintptr_t k = 1; k <= 64; k++) {
		for (int up = 0; up < 2; up++) {
			uintptr_t hint = up ? ((im->text_hi + pg - 1) & ~(pg - 1)) + k * step
					    : (im->text_lo & ~(pg - 1)) - k * step;
			void *p;
			int ok = 1;

			if (!up && im->text_lo < k * step + pg)
				continue;
			p = mmap((void *)hint, pg, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
				 -1, 0);
			if (p == MAP_FAILED)
				continue;
			for (int t = 0; t < n && ok; t++)
				ok = !site[t].fn ||
				     (mrmgr__patch_arch_reaches(&site[t], (uintptr_t)p) &&
				      mrmgr__patch_arch_reaches(&site[t], (uintptr_t)p + pg));
			if (ok)
				return (uintptr_t)p;
			munmap(p, pg);
		}
	}
	return 0;
}

int mrmgr__patch_plan_one(const struct mrmgr__patch_image *im, int t, struct mrmgr__patch_site *s)
{
	size_t size = 0;
	uintptr_t fn = mrmgr__patch_sym(im, T[t].name, &size), lo, hi;

	memset(s, 0, sizeof(*s));
	if (!fn)
		return ENOENT;
	mrmgr__patch_bti_note(fn);
	for (int a = 0; a < 3 && T[t].aliases[a]; a++) {
		uintptr_t x = mrmgr__patch_sym(im, T[t].aliases[a], NULL);

		if (x && x != fn)
			return ENOEXEC;
	}
	mrmgr__patch_gaps(im, fn, size, &lo, &hi);
	if ((mrmgr__patch_test_flags & MRMGR__PATCH_TEST_UNKNOWN_PROLOGUE) ||
	    mrmgr__patch_arch_plan(fn, size, T[t].nr, lo, hi, s))
		return ENOEXEC;
	if (s->chain && ((mrmgr__patch_test_flags & MRMGR__PATCH_TEST_NO_CHAIN) ||
			 !mrmgr__patch_executable(s->chain)))
		return ENOEXEC;
	return 0;
}

/* Recognise every target; 0 or ENOEXEC with *why set. */
static int plan(const struct mrmgr__patch_image *im, const char **why)
{
	for (int t = 0; t < MRMGR__PT_COUNT; t++) {
		int err = mrmgr__patch_plan_one(im, t, &P.site[t]);

		if (t == MRMGR__PT_SBRK) {
			/* Ours only when another patcher redirected it. */
			if (err || !P.site[t].chain)
				memset(&P.site[t], 0, sizeof(P.site[t]));
			continue;
		}
		if (err) {
			*why = T[t].name;
			return err;
		}
		if (!P.site[t].chain)
			P.direct[t] = P.site[t];
	}
	return 0;
}

int mrmgr__patch_sbrk_calls_brk(const struct mrmgr__patch_image *im)
{
	size_t size = 0;
	uintptr_t sb = mrmgr__patch_sym(im, "sbrk", &size), brk = P.site[MRMGR__PT_BRK].fn;

	return sb && brk && mrmgr__patch_arch_calls(sb, size, brk);
}

void mrmgr__patch_mark(int t, int on)
{
	uint32_t bit = 1u << t;

	if (on)
		__atomic_fetch_or(&P.targets, bit, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&P.targets, ~bit, __ATOMIC_RELEASE);
	if (on && P.site[t].chain)
		__atomic_fetch_or(&P.chained, bit, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&P.chained, ~bit, __ATOMIC_RELEASE);
	memcpy(P.seen[t], (const void *)P.site[t].fn, sizeof(P.seen[t]));
	mrmgr__patch_build_checks();
}

int mrmgr__patch_encode(int t)
{
	struct mrmgr__patch_site *s = &P.site[t];
	size_t slot = mrmgr__patch_arch_tramp_size(), idx = (size_t)t;

	if (s->chain) {
		unsigned int g = P.gen[t];

		if (g >= MRMGR__PATCH_GENS)
			return ENOSPC;
		P.gen[t]++;
		__atomic_store_n(&mrmgr__patch_chain[g][t], s->chain,
				 __ATOMIC_RELEASE);
		idx = MRMGR__PT_COUNT * (1 + (size_t)g) + (size_t)t;
	}
	mrmgr__patch_arch_encode(s, P.tramp + idx * slot);
	return 0;
}

int mrmgr__patch_apply(int t, int undo)
{
	int err = mrmgr__patch_apply_site(&P.site[t], undo);

	if (!err)
		mrmgr__patch_mark(t, !undo);
	return err;
}

int mrmgr__patch_apply_site(const struct mrmgr__patch_site *s, int undo)
{
	uintptr_t lo = s->win, hi = s->win + s->win_len;
	int err;

	if (s->pad) {
		lo = s->pad < lo ? s->pad : lo;
		hi = s->pad + s->pad_len > hi ? s->pad + s->pad_len : hi;
	}
	err = text_rw(lo, hi - lo, 1);
	if (err)
		return err;
	if (s->pad && !undo) {
		/* Dead bytes nothing executes until the short jump is in. */
		memcpy((void *)s->pad, s->pad_new, s->pad_len);
		mrmgr__patch_arch_flush(s->pad, s->pad_len);
		sync_cores();
	}
	err = undo ? mrmgr__patch_arch_swap(s, s->new, s->old)
		   : mrmgr__patch_arch_swap(s, s->old, s->new);
	mrmgr__patch_arch_flush(s->win, s->win_len);
	(void)text_rw(lo, hi - lo, 0);
	sync_cores();
	return err;
}

static void undo_all(void)
{
	for (int t = MRMGR__PT_COUNT - 1; t >= 0; t--)
		if (P.targets & (1u << t))
			(void)mrmgr__patch_apply(t, 1);
}

/* Trampoline slots: the direct hooks, then each chaining generation. */
#define TRAMP_SLOTS (MRMGR__PT_COUNT * (1 + MRMGR__PATCH_GENS))

/* Keep libmrmgr mapped for the life of the process: libc jumps into it. */
static void pin_self(void)
{
	Dl_info di;

	if (dladdr((void *)(uintptr_t)mrmgr__patch_start, &di) && di.dli_fname)
		(void)dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

static int install(const char **why)
{
	struct mrmgr__patch_image im;
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	uintptr_t tramp;
	size_t slot = mrmgr__patch_arch_tramp_size();
	int err;

	memset(&im, 0, sizeof(im));
	*why = "libc.so.6 not found";
	if (!libc)
		return ENOENT;
	im.want = (uintptr_t)dlsym(libc, "munmap");
	dlclose(libc);
	if (!im.want || !dl_iterate_phdr(mrmgr__patch_find_image, &im) || !im.found)
		return ENOENT;
	err = plan(&im, why);
	if (err)
		return err;
	*why = "sbrk does not call brk";
	if (!P.site[MRMGR__PT_SBRK].fn && !mrmgr__patch_sbrk_calls_brk(&im))
		return ENOEXEC;
	mrmgr__patch_curbrk = (void **)dlsym(RTLD_DEFAULT, "__curbrk");
	*why = "__curbrk not found";
	if (!mrmgr__patch_curbrk)
		return ENOENT;
	*why = "no page for the trampolines within reach";
	tramp = mrmgr__patch_tramp_page(&im, P.site, MRMGR__PT_COUNT);
	if (!tramp)
		return ENOMEM;
	P.tramp = tramp;
	for (size_t i = 0; i < TRAMP_SLOTS; i++) {
		size_t t = i % MRMGR__PT_COUNT, g = i / MRMGR__PT_COUNT;
		void (*hook)(void) = g ? mrmgr__patch_chain_fn[g - 1][t]
				       : mrmgr__patch_hook_fn[t];

		if (hook)
			mrmgr__patch_arch_tramp((unsigned char *)tramp + i * slot,
						(uintptr_t)hook);
	}
	for (int t = 0; t < MRMGR__PT_COUNT; t++)
		if (P.site[t].fn)
			(void)mrmgr__patch_encode(t); /* generation 0: never out of them */
	if (mprotect((void *)tramp, (size_t)page_size(),
		     PROT_READ | PROT_EXEC | mrmgr__patch_bti_tramp_prot())) {
		*why = "cannot make the trampolines executable";
		err = errno;
		munmap((void *)tramp, (size_t)page_size());
		return err;
	}
	mrmgr__patch_arch_flush(tramp, (size_t)page_size());
	/* The trampoline page stays, even on failure: a thread may be
	 * between a jump and its hook. */
	for (int t = 0; t < MRMGR__PT_COUNT; t++) {
		err = P.site[t].fn ? mrmgr__patch_apply(t, 0) : 0;
		if (err) {
			*why = err == EBUSY ? "the code changed while patching"
					    : "cannot write libc's text";
			undo_all();
			return err;
		}
	}
	*why = "the self-test missed a call";
	err = mrmgr__patch_selftest(&im);
	if (err) {
		undo_all();
		return err;
	}
	pin_self();
	P.im = im;
	/* sbrk is watched too when it is not ours: another patcher that
	 * redirects it later takes malloc's break changes away from brk. */
	P.entry[MRMGR__PT_SBRK] = mrmgr__patch_sym(&im, "sbrk", NULL);
	if (!P.site[MRMGR__PT_SBRK].fn && P.entry[MRMGR__PT_SBRK])
		memcpy(P.seen[MRMGR__PT_SBRK],
		       (const void *)P.entry[MRMGR__PT_SBRK], 16);
	for (int t = 0; t < MRMGR__PT_COUNT; t++)
		if (P.site[t].fn)
			P.entry[t] = P.site[t].fn;
	mrmgr__patch_build_checks();
	mrmgr__patch_set_text_range();
	return 0;
}


int mrmgr__patch_test_toggle(void)
{
	int err = 0;

	if (P.state != PATCH_ACTIVE)
		return EINVAL;
	for (int t = MRMGR__PT_COUNT - 1; t >= 0 && !err; t--)
		err = P.site[t].fn ? mrmgr__patch_apply(t, 1) : 0;
	for (int t = 0; t < MRMGR__PT_COUNT && !err; t++)
		err = P.site[t].fn ? mrmgr__patch_apply(t, 0) : 0;
	return err;
}

int mrmgr__patch_start(void)
{
	const char *why = NULL, *tool;

	if (P.state == PATCH_ACTIVE)
		mrmgr__patch_check();
	if (P.state != PATCH_UNTRIED)
		return P.state == PATCH_ACTIVE ? 0 : P.err;
	tool = tool_in_process();
	if (tool) {
		P.err = EOPNOTSUPP;
		why = tool;
	} else {
		P.err = install(&why);
	}
	/* Release: mrmgr__patch_quiet() reads it without the lock. */
	__atomic_store_n(&P.state, P.err ? PATCH_FAILED : PATCH_ACTIVE,
			 __ATOMIC_RELEASE);
	if (P.err)
		mrmgr__warn("monitor: libc patching not used (%s: %s); libc is "
			    "left as it was and other sources are used",
			    why, strerror(P.err));
	else if (!P.chained)
		mrmgr__info("monitor: libc's munmap, mremap, madvise, mmap, brk, "
			    "shmat, shmdt and mprotect redirected (self-test "
			    "passed)");
	else
		mrmgr__info("monitor: libc's memory calls redirected (self-test "
			    "passed); chained after another patcher (%s) for "
			    "targets %#x", mrmgr__patch_owner_of(P.site[__builtin_ctz(P.chained)].chain),
			    P.chained);
	return P.err;
}

#else /* !MRMGR__PATCH_SUPPORTED */

int mrmgr__patch_test_toggle(void)
{
	return EINVAL;
}

int mrmgr__patch_start(void)
{
	if (P.state == PATCH_UNTRIED) {
		P.state = PATCH_FAILED;
		P.err = ENOSYS;
		mrmgr__warn("monitor: libc patching is not supported on this "
			    "architecture; other sources are used");
	}
	return P.err;
}

#endif /* MRMGR__PATCH_SUPPORTED */
