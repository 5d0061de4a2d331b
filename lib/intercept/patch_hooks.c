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

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>

#include "maps.h"
#include "patch.h"
#include "release_table.h"

#if MRMGR__PATCH_SUPPORTED

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#ifndef SHM_REMAP
#define SHM_REMAP 040000
#endif

void **mrmgr__patch_curbrk;
unsigned int mrmgr__patch_probe_on, mrmgr__patch_probe_seen;

#define SYS0(n) mrmgr__patch_sys((n), 0, 0, 0, 0, 0, 0)
#define SYS2(n, a, b) mrmgr__patch_sys((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define SYS3(n, a, b, c) \
	mrmgr__patch_sys((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)

/* The kernel's error range, as glibc's wrappers test it. */
static inline int is_err(long r)
{
	return (unsigned long)r > -4096UL;
}

static inline long set_errno(long r)
{
	errno = (int)-r;
	return -1;
}

static inline void probe(enum mrmgr__patch_target t)
{
	if (mrmgr__unlikely(__atomic_load_n(&mrmgr__patch_probe_on,
					    __ATOMIC_RELAXED)))
		__atomic_fetch_or(&mrmgr__patch_probe_seen, 1u << t,
				  __ATOMIC_RELAXED);
}

/* [a, a + l) as inclusive 4 KiB granules; 0 when empty. */
static inline int span(uintptr_t a, size_t l, uint64_t *s, uint64_t *e)
{
	uint64_t last = (uint64_t)a + (l - 1);

	if (!l)
		return 0;
	if (last < a)
		last = UINT64_MAX;
	*s = (uint64_t)a & ~(uint64_t)4095;
	*e = last | 4095;
	return 1;
}

/*
 * Memory a call maps anew (mmap, mremap, shmat) is reported after it
 * once the sanitizer allocator source asked (intercept.h): the address
 * may be one whose old pages that allocator released with raw system
 * calls while a registration pinned them. Off otherwise: one load.
 */
static unsigned int fresh_on;

void mrmgr__patch_fresh_on(void)
{
	__atomic_store_n(&fresh_on, 1, __ATOMIC_SEQ_CST);
}

static inline int fresh_wanted(void)
{
	return mrmgr__unlikely(__atomic_load_n(&fresh_on, __ATOMIC_SEQ_CST));
}

static inline void fresh(uintptr_t r, size_t l)
{
	uint64_t s, e;

	if (fresh_wanted() && r != (uintptr_t)-1 && span(r, l, &s, &e)) {
		mrmgr__icpt.begin(s, e);
		mrmgr__icpt.end(s, e);
	}
}

/* What an mremap that returned r maps anew: the grown tail in place,
 * everything where it moved. */
static inline void fresh_mremap(uintptr_t old, size_t old_len, size_t new_len,
				uintptr_t r)
{
	if (r != old)
		fresh(r, new_len);
	else if (new_len > old_len)
		fresh(old + old_len, new_len - old_len);
}

/*
 * The ranges an mremap may take away: everything when it may move
 * (@may_move), the tail when it shrinks in place, nothing when it grows
 * in place; and with MREMAP_FIXED whatever was at dest. Each begin
 * before the call and each end after it, by the direct and the chained
 * hook alike.
 */
static inline void mremap_spans(void *old, size_t old_len, size_t new_len,
				int flags, void *dest, int may_move,
				uint64_t sp[4], int rep[2])
{
	if (may_move)
		rep[0] = span((uintptr_t)old, old_len, &sp[0], &sp[1]);
	else if (new_len < old_len)
		rep[0] = span((uintptr_t)old + new_len, old_len - new_len,
			      &sp[0], &sp[1]);
	if (flags & MREMAP_FIXED)
		rep[1] = span((uintptr_t)dest, new_len, &sp[2], &sp[3]);
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

/* SHM_REMAP replaces what was mapped at the (rounded) address. SHMLBA
 * is 4 KiB to 64 KiB across architectures: with SHM_RND the range covers
 * every rounding (rounding to 64 KiB alone would miss the segment's end
 * where SHMLBA is a page). */
static int shmat_range(int id, const void *a, int flg, uint64_t *s, uint64_t *e)
{
	struct shmid_ds ds;
	uintptr_t p = (uintptr_t)a & ~(uintptr_t)4095, at = p;

	if (flg & SHM_RND)
		at = (uintptr_t)a & ~(uintptr_t)0xffff;
	if (!is_err(SYS3(SYS_shmctl, id, IPC_STAT, &ds)) && ds.shm_segsz)
		return span(at, (p - at) + ds.shm_segsz, s, e);
	/* size unknown: everything from there on */
	*s = (uint64_t)at & ~(uint64_t)4095;
	*e = UINT64_MAX;
	return 1;
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

/* Parse one hex number; p moves past it. */
/*
 * The segment attached at a (os/maps.h, async-signal-safe): 1 and
 * [a, *last], 0 when nothing is attached there, -1 when it cannot be
 * told.
 */
static int shm_extent(uintptr_t a, uint64_t *last)
{
	uint64_t end;
	int k = mrmgr__maps_shm_extent(a, &end);

	if (k > 0)
		*last = end - 1;
	return k;
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

/* ------------------------------------------------------------ chained */

/*
 * Chaining hooks: another patcher (UCX's libucm, libfabric's memhooks, a
 * profiler) owned the entry point before us, or took it over after us
 * and we went back on top. Its code -- reached through the address its
 * jump held -- issues the system call and keeps its own books; ours only
 * reports the same ranges around it. errno is the callee's: the end
 * report touches no errno, but it is saved anyway, cheaply.
 */
uintptr_t mrmgr__patch_chain[MRMGR__PATCH_GENS][MRMGR__PT_COUNT];

#define NEXT(t, type) ((type)next)

static inline int chain_munmap(uintptr_t next, void *a, size_t l)
{
	uint64_t s = 0, e = 0;
	int rep = span((uintptr_t)a, l, &s, &e), r, err;

	probe(MRMGR__PT_MUNMAP);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = NEXT(MRMGR__PT_MUNMAP, int (*)(void *, size_t))(a, l);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	errno = err;
	return r;
}

static inline void *chain_mremap(uintptr_t next, void *old, size_t old_len, size_t new_len, int flags,
			  void *dest)
{
	uint64_t sp[4] = { 0 };
	int rep[2] = { 0, 0 }, err;
	void *r;

	probe(MRMGR__PT_MREMAP);
	/* The same ranges as hook_mremap; unknown flags are the callee's
	 * to refuse, and report the whole old range meanwhile. */
	mremap_spans(old, old_len, new_len, flags, dest, flags != 0, sp, rep);
	if (rep[0])
		mrmgr__icpt.begin(sp[0], sp[1]);
	if (rep[1])
		mrmgr__icpt.begin(sp[2], sp[3]);
	/* Variadic in glibc: dest travels as the variadic argument. */
	r = NEXT(MRMGR__PT_MREMAP, void *(*)(void *, size_t, size_t, int, ...))(
		old, old_len, new_len, flags, dest);
	err = errno;
	if (rep[0])
		mrmgr__icpt.end(sp[0], sp[1]);
	if (rep[1])
		mrmgr__icpt.end(sp[2], sp[3]);
	if (r != MAP_FAILED)
		fresh_mremap((uintptr_t)old, old_len, new_len, (uintptr_t)r);
	errno = err;
	return r;
}

static inline int chain_madvise(uintptr_t next, void *a, size_t l, int adv)
{
	uint64_t s = 0, e = 0;
	int rep = mrmgr__advice_releases(adv) && span((uintptr_t)a, l, &s, &e);
	int r, err;

	probe(MRMGR__PT_MADVISE);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = NEXT(MRMGR__PT_MADVISE, int (*)(void *, size_t, int))(a, l, adv);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	errno = err;
	return r;
}

static inline void *chain_mmap(uintptr_t next, void *a, size_t l, int prot, int flags, int fd,
			long off)
{
	uint64_t s = 0, e = 0;
	int rep = mrmgr__mmap_releases(flags) && span((uintptr_t)a, l, &s, &e), err;
	void *r;

	probe(MRMGR__PT_MMAP);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = NEXT(MRMGR__PT_MMAP, void *(*)(void *, size_t, int, int, int, long))(
		a, l, prot, flags, fd, off);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	else if (r != MAP_FAILED)
		fresh((uintptr_t)r, l);
	errno = err;
	return r;
}

/* The break now: glibc's notion, else the kernel's. */
static uintptr_t cur_brk(void)
{
	uintptr_t cur = (uintptr_t)*mrmgr__patch_curbrk;

	return cur ? cur : (uintptr_t)SYS0(SYS_brk);
}

static inline int chain_brk(uintptr_t next, void *a)
{
	uintptr_t cur, want = (uintptr_t)a;
	uint64_t s = 0, e = 0;
	int rep = 0, r, err;

	probe(MRMGR__PT_BRK);
	/* The self-test's probe never reaches the other patcher: a real
	 * brk() could race with malloc over __curbrk. */
	if (mrmgr__unlikely(a == MRMGR__PATCH_BRK_PROBE) &&
	    __atomic_load_n(&mrmgr__patch_probe_on, __ATOMIC_RELAXED)) {
		errno = ENOMEM;
		return -1;
	}
	cur = cur_brk();
	if (want && want < cur)
		rep = span(want, cur - want, &s, &e);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = NEXT(MRMGR__PT_BRK, int (*)(void *))(a);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	errno = err;
	return r;
}

static inline void *chain_sbrk(uintptr_t next, intptr_t inc)
{
	uintptr_t cur;
	uint64_t s = 0, e = 0;
	int rep = 0, err;
	void *r;

	probe(MRMGR__PT_SBRK);
	if (mrmgr__unlikely(inc == MRMGR__PATCH_SBRK_PROBE) &&
	    __atomic_load_n(&mrmgr__patch_probe_on, __ATOMIC_RELAXED)) {
		errno = ENOMEM;
		return (void *)-1;
	}
	cur = cur_brk();
	if (inc < 0 && (uintptr_t)-inc <= cur)
		rep = span(cur + (uintptr_t)inc, (uintptr_t)-inc, &s, &e);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = NEXT(MRMGR__PT_SBRK, void *(*)(intptr_t))(inc);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	errno = err;
	return r;
}

static inline void *chain_shmat(uintptr_t next, int id, const void *a, int flg)
{
	uint64_t s = 0, e = 0;
	int rep = 0, err;
	void *r;

	probe(MRMGR__PT_SHMAT);
	if (mrmgr__shmat_releases(flg) && a)
		rep = shmat_range(id, a, flg, &s, &e);
	if (rep)
		mrmgr__icpt.begin(s, e);
	r = NEXT(MRMGR__PT_SHMAT, void *(*)(int, const void *, int))(id, a, flg);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	else if (r != (void *)-1 && fresh_wanted() &&
		 shmat_range(id, r, 0, &s, &e))
		fresh((uintptr_t)s, (size_t)(e - s + 1));
	errno = err;
	return r;
}

static inline int chain_shmdt(uintptr_t next, const void *a)
{
	uint64_t s = (uint64_t)(uintptr_t)a & ~(uint64_t)4095, e = UINT64_MAX;
	int k, r, err;

	probe(MRMGR__PT_SHMDT);
	k = shm_extent((uintptr_t)a, &e);
	if (k)
		mrmgr__icpt.begin(s, e);
	r = NEXT(MRMGR__PT_SHMDT, int (*)(const void *))(a);
	err = errno;
	if (k)
		mrmgr__icpt.end(s, e);
	errno = err;
	return r;
}

static inline int chain_mprotect(uintptr_t next, void *a, size_t l, int prot)
{
	int r, err;

	probe(MRMGR__PT_MPROTECT);
	r = NEXT(MRMGR__PT_MPROTECT, int (*)(void *, size_t, int))(a, l, prot);
	err = errno;
	if (!(prot & PROT_WRITE))
		mrmgr__patch_text_protected((uintptr_t)a, l);
	errno = err;
	return r;
}

/*
 * One set of chaining hooks per generation: each time we go on top of
 * another patcher, the entry jumps to the next generation's hooks, whose
 * destination is set once and never changed. A patcher that went on top
 * of us and calls what it replaced through a copy of it (a relocated
 * prologue) lands in the previous generation, which leads further down,
 * never back to itself.
 */
#define LOAD(g, t) __atomic_load_n(&mrmgr__patch_chain[g][t], __ATOMIC_ACQUIRE)
#define GEN(g)                                                               \
	static int munmap_##g(void *a, size_t l)                             \
	{                                                                    \
		return chain_munmap(LOAD(g, MRMGR__PT_MUNMAP), a, l);        \
	}                                                                    \
	static void *mremap_##g(void *o, size_t ol, size_t nl, int f, void *d) \
	{                                                                    \
		return chain_mremap(LOAD(g, MRMGR__PT_MREMAP), o, ol, nl, f, d); \
	}                                                                    \
	static int madvise_##g(void *a, size_t l, int adv)                  \
	{                                                                    \
		return chain_madvise(LOAD(g, MRMGR__PT_MADVISE), a, l, adv); \
	}                                                                    \
	static void *mmap_##g(void *a, size_t l, int p, int f, int fd, long o) \
	{                                                                    \
		return chain_mmap(LOAD(g, MRMGR__PT_MMAP), a, l, p, f, fd, o); \
	}                                                                    \
	static int brk_##g(void *a)                                          \
	{                                                                    \
		return chain_brk(LOAD(g, MRMGR__PT_BRK), a);                 \
	}                                                                    \
	static void *sbrk_##g(intptr_t inc)                                  \
	{                                                                    \
		return chain_sbrk(LOAD(g, MRMGR__PT_SBRK), inc);             \
	}                                                                    \
	static void *shmat_##g(int id, const void *a, int flg)              \
	{                                                                    \
		return chain_shmat(LOAD(g, MRMGR__PT_SHMAT), id, a, flg);    \
	}                                                                    \
	static int shmdt_##g(const void *a)                                  \
	{                                                                    \
		return chain_shmdt(LOAD(g, MRMGR__PT_SHMDT), a);             \
	}                                                                    \
	static int mprotect_##g(void *a, size_t l, int prot)                \
	{                                                                    \
		return chain_mprotect(LOAD(g, MRMGR__PT_MPROTECT), a, l, prot); \
	}
#define ROW(g)                                                               \
	{                                                                    \
		[MRMGR__PT_MUNMAP] = (void (*)(void))munmap_##g,             \
		[MRMGR__PT_MREMAP] = (void (*)(void))mremap_##g,             \
		[MRMGR__PT_MADVISE] = (void (*)(void))madvise_##g,           \
		[MRMGR__PT_MMAP] = (void (*)(void))mmap_##g,                 \
		[MRMGR__PT_BRK] = (void (*)(void))brk_##g,                   \
		[MRMGR__PT_SHMAT] = (void (*)(void))shmat_##g,               \
		[MRMGR__PT_SHMDT] = (void (*)(void))shmdt_##g,               \
		[MRMGR__PT_SBRK] = (void (*)(void))sbrk_##g,                 \
		[MRMGR__PT_MPROTECT] = (void (*)(void))mprotect_##g,         \
	}
GEN(0)
GEN(1)
GEN(2)
GEN(3)

void (*const mrmgr__patch_chain_fn[MRMGR__PATCH_GENS][MRMGR__PT_COUNT])(void) = {
	ROW(0), ROW(1), ROW(2), ROW(3),
};
_Static_assert(MRMGR__PATCH_GENS == 4, "one GEN() and ROW() per generation");


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

#if MRMGR__PATCH_SUPPORTED
/* ------------------------------------------------------------ followed */

/*
 * The chaining hooks' bodies, for follow.c's wrappers around the memory
 * calls another object of the process defines itself (tcmalloc's mmap,
 * munmap, ...): the same ranges, reported around the call of next.
 */
int mrmgr__follow_munmap(uintptr_t next, void *a, size_t l)
{
	return chain_munmap(next, a, l);
}

void *mrmgr__follow_mremap(uintptr_t next, void *o, size_t ol, size_t nl,
			   int f, void *d)
{
	return chain_mremap(next, o, ol, nl, f, d);
}

int mrmgr__follow_madvise(uintptr_t next, void *a, size_t l, int adv)
{
	return chain_madvise(next, a, l, adv);
}

void *mrmgr__follow_mmap(uintptr_t next, void *a, size_t l, int p, int f,
			 int fd, long o)
{
	return chain_mmap(next, a, l, p, f, fd, o);
}

void *mrmgr__follow_shmat(uintptr_t next, int id, const void *a, int flg)
{
	return chain_shmat(next, id, a, flg);
}

int mrmgr__follow_shmdt(uintptr_t next, const void *a)
{
	return chain_shmdt(next, a);
}
#endif /* MRMGR__PATCH_SUPPORTED */
