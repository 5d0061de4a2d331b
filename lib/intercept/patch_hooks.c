/*
 * The hooks libc's patched entry points jump to. Each one reports the
 * range its call may release before the system call (so no thread can
 * get the address back while the old registration is cached) and again
 * after it (so a registration made in between is dropped too), also when
 * the call failed: a failed madvise may have discarded part of the range
 * already, a failed munmap may have unmapped part of it.
 *
 * Rules, because any thread may be inside malloc (holding an arena lock)
 * or inside the library (holding a cache's lock) when it gets here:
 *   - the system call is issued here, raw: never through libc, whose
 *     entry point now jumps back here;
 *   - no allocation, no lock, no log line; errno is set the way glibc's
 *     wrappers set it, and only on failure;
 *   - async-signal-safe: a signal handler may unmap.
 *
 * Ranges are reported in 4 KiB granules: only overlap matters.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "patch.h"
#include "patch_hooks.h"
#include "release_table.h"

#if MRMGR__PATCH_SUPPORTED

void **mrmgr__patch_curbrk;
unsigned int mrmgr__patch_probe_on, mrmgr__patch_probe_seen;

/*
 * Memory a call maps anew (mmap, mremap, shmat) is reported after it
 * once the sanitizer allocator source asked (intercept.h): the address
 * may be one whose old pages that allocator released with raw system
 * calls while a registration pinned them. Off otherwise: one load
 * (patch_hooks.h, fresh()).
 */
unsigned int mrmgr__patch_fresh;

void mrmgr__patch_fresh_on(void)
{
	__atomic_store_n(&mrmgr__patch_fresh, 1, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------ hooks */

static int hook_munmap(void *a, size_t l)
{
	uint64_t s = 0, e = 0;
	int rep = span((uintptr_t)a, l, &s, &e);
	long r;

	probe(MRMGR__PT_MUNMAP);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = SYS2(SYS_munmap, a, l);
	if (rep)
		mrmgr__icpt.end(s, e);
	return is_err(r) ? (int)set_errno(r) : (int)r;
}

/*
 * Declared with a fifth parameter: glibc's mremap is variadic, and on
 * x86-64 and aarch64 a variadic argument travels in the same register as
 * a named one. glibc only reads it for MREMAP_FIXED or MREMAP_DONTUNMAP
 * (0 otherwise) and refuses unknown flags itself; so does this.
 */
static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags,
			 void *dest)
{
	uint64_t sp[4] = { 0 };
	int rep[2] = { 0, 0 };
	long r;

	probe(MRMGR__PT_MREMAP);
	if (flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP)) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	if (!(flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)))
		dest = NULL;
	mremap_spans(old, old_len, new_len, flags, dest,
		     !!(flags & (MREMAP_MAYMOVE | MREMAP_FIXED |
				 MREMAP_DONTUNMAP)), sp, rep);
	if (rep[0])
		mrmgr__icpt.begin(sp[0], sp[1]);
	if (rep[1])
		mrmgr__icpt.begin(sp[2], sp[3]);
	r = mrmgr__patch_sys(SYS_mremap, (long)old, (long)old_len,
			     (long)new_len, flags, (long)dest, 0);
	if (rep[0])
		mrmgr__icpt.end(sp[0], sp[1]);
	if (rep[1])
		mrmgr__icpt.end(sp[2], sp[3]);
	if (!is_err(r))
		fresh_mremap((uintptr_t)old, old_len, new_len, (uintptr_t)r);
	return is_err(r) ? (set_errno(r), MAP_FAILED) : (void *)r;
}

static int hook_madvise(void *a, size_t l, int adv)
{
	uint64_t s = 0, e = 0;
	int rep = mrmgr__advice_releases(adv) && span((uintptr_t)a, l, &s, &e);
	long r;

	probe(MRMGR__PT_MADVISE);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = SYS3(SYS_madvise, a, l, adv);
	if (rep)
		mrmgr__icpt.end(s, e);
	return is_err(r) ? (int)set_errno(r) : (int)r;
}

static void *hook_mmap(void *a, size_t l, int prot, int flags, int fd,
		       long off)
{
	uint64_t s = 0, e = 0;
	int rep = 0;
	long r;

	probe(MRMGR__PT_MMAP);
	/* glibc refuses an offset that is not a multiple of 4 KiB itself. */
	if (off & 4095) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	/* MAP_FIXED replaces what was there; MAP_FIXED_NOREPLACE alone cannot. */
	if (mrmgr__mmap_releases(flags))
		rep = span((uintptr_t)a, l, &s, &e);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = mrmgr__patch_sys(SYS_mmap, (long)a, (long)l, prot, flags, fd, off);
	if (rep)
		mrmgr__icpt.end(s, e);
	else if (!is_err(r))
		fresh((uintptr_t)r, l);
	return is_err(r) ? (set_errno(r), MAP_FAILED) : (void *)r;
}

/*
 * glibc's brk(): the kernel returns the break it ended with, glibc stores
 * it in __curbrk (sbrk() and malloc's morecore read it back) and fails
 * with ENOMEM when that is below the request. sbrk() calls this body, so
 * malloc's heap growth and systrim() arrive here too.
 */
static int hook_brk(void *a)
{
	uintptr_t cur, want = (uintptr_t)a;
	uint64_t s = 0, e = 0;
	int rep = 0;
	long r;

	probe(MRMGR__PT_BRK);
	if (mrmgr__unlikely(a == MRMGR__PATCH_BRK_PROBE) &&
	    __atomic_load_n(&mrmgr__patch_probe_on, __ATOMIC_RELAXED)) {
		errno = ENOMEM;
		return -1;
	}
	cur = (uintptr_t)*mrmgr__patch_curbrk;
	if (!cur)
		cur = (uintptr_t)SYS0(SYS_brk);
	if (want && want < cur)
		rep = span(want, cur - want, &s, &e);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = mrmgr__patch_sys(SYS_brk, (long)a, 0, 0, 0, 0, 0);
	*mrmgr__patch_curbrk = (void *)r;
	if (rep)
		mrmgr__icpt.end(s, e);
	if ((uintptr_t)r < want) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}


static void *hook_shmat(int id, const void *a, int flg)
{
	uint64_t s = 0, e = 0;
	int rep = 0;
	long r;

	probe(MRMGR__PT_SHMAT);
	if (mrmgr__shmat_releases(flg) && a)
		rep = shmat_range(id, a, flg, &s, &e);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = SYS3(SYS_shmat, id, a, flg);
	if (rep)
		mrmgr__icpt.end(s, e);
	else if (!is_err(r) && fresh_wanted() &&
		 shmat_range(id, (void *)r, 0, &s, &e))
		fresh((uintptr_t)s, (size_t)(e - s + 1));
	return is_err(r) ? (set_errno(r), (void *)-1) : (void *)r;
}

static int hook_mprotect(void *a, size_t l, int prot)
{
	long r;

	probe(MRMGR__PT_MPROTECT);
	r = SYS3(SYS_mprotect, a, l, prot);
	if (!(prot & PROT_WRITE))
		mrmgr__patch_text_protected((uintptr_t)a, l);
	return is_err(r) ? (int)set_errno(r) : (int)r;
}


static int hook_shmdt(const void *a)
{
	uint64_t s = (uint64_t)(uintptr_t)a & ~(uint64_t)4095, e = UINT64_MAX;
	int k;
	long r;

	probe(MRMGR__PT_SHMDT);
	k = shm_extent((uintptr_t)a, &e);
	if (k) /* -1: cannot tell, report everything from a on */
		mrmgr__icpt.begin(s, e);
	r = SYS2(SYS_shmdt, a, 0);
	if (k)
		mrmgr__icpt.end(s, e);
	return is_err(r) ? (int)set_errno(r) : (int)r;
}


void (*const mrmgr__patch_hook_fn[MRMGR__PT_COUNT])(void) = {
	[MRMGR__PT_MPROTECT] = (void (*)(void))hook_mprotect,
	[MRMGR__PT_MUNMAP] = (void (*)(void))hook_munmap,
	[MRMGR__PT_MREMAP] = (void (*)(void))hook_mremap,
	[MRMGR__PT_MADVISE] = (void (*)(void))hook_madvise,
	[MRMGR__PT_MMAP] = (void (*)(void))hook_mmap,
	[MRMGR__PT_BRK] = (void (*)(void))hook_brk,
	[MRMGR__PT_SHMAT] = (void (*)(void))hook_shmat,
	[MRMGR__PT_SHMDT] = (void (*)(void))hook_shmdt,
	/* no MRMGR__PT_SBRK: sbrk is only ever chained (glibc's own calls
	 * brk's body, checked at install) */
};

#endif /* MRMGR__PATCH_SUPPORTED */
