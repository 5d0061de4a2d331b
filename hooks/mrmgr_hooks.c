/*
 * libmrmgr_hooks.so - an optional memory-event source for libmrmgr, for
 * processes where userfaultfd is refused (container seccomp profiles,
 * vm.unprivileged_userfaultfd on kernels before 5.11).
 *
 * It interposes the libc calls that unmap, move or discard memory and
 * reports each change on both sides: before the system call and after it
 * returned, success or not, through the change functions libmrmgr binds
 * (mrmgr_hooks_bind(), hooks_abi.h) when it starts using the hooks;
 * until then, with mrmgr_notify_unmap() after the call.
 * Interposition is plain symbol lookup order: the library must be in the
 * global scope ahead of libc (LD_PRELOAD, or linked before libc). There is
 * no run-time code patching, so nothing races with running threads.
 *
 *   munmap, mmap/mmap64 with MAP_FIXED, mremap, madvise with any advice
 *   but those known to keep the pages (lib/intercept/release_table.h, the
 *   table libc's patched entries use too), brk, sbrk, shmat with
 *   SHM_REMAP, shmdt;
 *   free, realloc, reallocarray of glibc chunks glibc mmap'd (glibc
 *   unmaps those with internal calls no interposer can see);
 *   malloc_trim (reported as "everything changed").
 *
 * And it sets M_TRIM_THRESHOLD to its maximum at load (MRMGR_HOOKS_MALLOPT=0
 * leaves it), so glibc never gives heap memory back with its internal
 * madvise/munmap; main-arena shrinks that still happen are seen by
 * comparing the break around free().
 *
 * What it cannot see: raw syscall(SYS_munmap, ...) and the like; calls
 * from code that does not go through the dynamic symbol table (static
 * binaries, libraries with their own libc, inline system calls); another
 * allocator's internal releases when it is not the one that calls these
 * functions; memory changed by other processes (shared mappings, which
 * libmrmgr never lets these hooks vouch for).
 *
 * The wrappers allocate nothing, take no lock and do not log.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>

#include "hooks_abi.h"
#include "release_table.h"
#include "maps.h"

#define EXPORT __attribute__((visibility("default")))

#ifndef SHM_REMAP
#define SHM_REMAP 040000
#endif

extern void __libc_free(void *);

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);
static int (*real_madvise)(void *, size_t, int);
static int (*real_brk)(void *);
static void *(*real_sbrk)(intptr_t);
static int (*real_shmdt)(const void *);
static void *(*real_shmat)(int, const void *, int);
static void (*real_free)(void *);
static void *(*real_realloc)(void *, size_t);
static void *(*real_reallocarray)(void *, size_t, size_t);
static int (*real_malloc_trim)(size_t);
static unsigned int info;
static int resolving;

static void resolve(void)
{
	if (__atomic_load_n(&info, __ATOMIC_ACQUIRE) & MRMGR__HOOKS_READY)
		return;
	if (__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL))
		return; /* dlsym() called back into us: use the fallbacks */
	real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	real_munmap = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
	real_mremap = (void *(*)(void *, size_t, size_t, int, ...))dlsym(RTLD_NEXT, "mremap");
	real_madvise = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "madvise");
	real_brk = (int (*)(void *))dlsym(RTLD_NEXT, "brk");
	real_sbrk = (void *(*)(intptr_t))dlsym(RTLD_NEXT, "sbrk");
	real_shmdt = (int (*)(const void *))dlsym(RTLD_NEXT, "shmdt");
	real_shmat = (void *(*)(int, const void *, int))dlsym(RTLD_NEXT, "shmat");
	real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
	real_reallocarray = (void *(*)(void *, size_t, size_t))dlsym(RTLD_NEXT, "reallocarray");
	real_malloc_trim = (int (*)(size_t))dlsym(RTLD_NEXT, "malloc_trim");
	real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	{
		unsigned int i = MRMGR__HOOKS_READY;

		/* Chunk headers are only read when the next free() is glibc's. */
		if (real_free == __libc_free)
			i |= MRMGR__HOOKS_GLIBC_MALLOC;
		if (!real_mmap || !real_munmap || !real_mremap || !real_madvise ||
		    !real_brk || !real_sbrk || !real_shmdt || !real_shmat || !real_free ||
		    !real_realloc || !real_malloc_trim)
			i &= ~(unsigned int)MRMGR__HOOKS_READY;
		__atomic_store_n(&info, i | (info & MRMGR__HOOKS_NO_TRIM),
				 __ATOMIC_RELEASE);
	}
	__atomic_store_n(&resolving, 0, __ATOMIC_RELEASE);
}

/*
 * MRMGR_HOOKS_MALLOPT, a switch like libmrmgr's (doc/environment.md):
 * unset or on: 1; off: 0; anything else is ignored with a warning (one
 * write(): this runs before the program, maybe inside malloc's first use).
 */
static int mallopt_wanted(void)
{
	static const char *const on[] = { "1", "yes", "on", "true" };
	static const char *const off[] = { "0", "no", "off", "false" };
	const char *e = getenv("MRMGR_HOOKS_MALLOPT");
	char line[160];
	int n;

	if (!e)
		return 1;
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(e, on[i]))
			return 1;
		if (!strcasecmp(e, off[i]))
			return 0;
	}
	n = snprintf(line, sizeof(line), "libmrmgr warn: ignoring "
		     "MRMGR_HOOKS_MALLOPT=\"%.64s\": expected 0 or 1\n", e);
	if (n > 0)
		(void)!write(2, line, (size_t)n < sizeof(line) ? (size_t)n
							 : sizeof(line) - 1);
	return 1;
}

__attribute__((constructor)) static void hooks_init(void)
{
	int want = mallopt_wanted();

	resolve();
	if (want && (info & MRMGR__HOOKS_GLIBC_MALLOC) &&
	    mallopt(M_TRIM_THRESHOLD, INT_MAX))
		__atomic_fetch_or(&info, MRMGR__HOOKS_NO_TRIM, __ATOMIC_RELEASE);
}

EXPORT unsigned int mrmgr_hooks_info(void)
{
	resolve();
	return __atomic_load_n(&info, __ATOMIC_ACQUIRE);
}

static const struct mrmgr__hooks_ops *ops;

EXPORT void mrmgr_hooks_bind(const struct mrmgr__hooks_ops *o)
{
	__atomic_store_n(&ops, o, __ATOMIC_RELEASE);
}

/* [addr, addr + len) as inclusive 4 KiB granules; 0 when empty/wrapping. */
static int span(const void *addr, size_t len, uint64_t *s, uint64_t *l)
{
	uint64_t a = (uintptr_t)addr;

	if (!len || a + (len - 1) < a)
		return 0;
	*s = a & ~(uint64_t)4095;
	*l = (a + (len - 1)) | 4095;
	return 1;
}

/* Before the system call that may release [addr, addr + len). */
static void before(const void *addr, size_t len)
{
	const struct mrmgr__hooks_ops *o = __atomic_load_n(&ops, __ATOMIC_ACQUIRE);
	uint64_t s, l;

	if (o && span(addr, len, &s, &l))
		o->change_begin(s, l);
}

/* After it, with the same range, whatever it returned (changed says
 * whether it may have released anything, for the one-sided report). */
static void after(const void *addr, size_t len, int changed)
{
	const struct mrmgr__hooks_ops *o = __atomic_load_n(&ops, __ATOMIC_ACQUIRE);
	uint64_t s, l;

	if (o) {
		if (span(addr, len, &s, &l))
			o->change_end(s, l);
	} else if (changed && len) {
		(void)mrmgr_notify_unmap((void *)(uintptr_t)addr, len);
	}
}

/* A change seen only after the fact (a main-arena trim inside free()). */
static void report(const void *addr, size_t len)
{
	if (len)
		(void)mrmgr_notify_unmap((void *)(uintptr_t)addr, len);
}

static void report_all(void)
{
	(void)mrmgr_notify_unmap(NULL, SIZE_MAX);
}

/* ------------------------------------------------------------ mappings */

static void *do_mmap(void *a, size_t l, int prot, int flags, int fd, off_t off)
{
	void *p;

	/* MAP_FIXED replaces what was there; MAP_FIXED_NOREPLACE cannot. */
	int fixed = mrmgr__mmap_releases(flags);

	resolve();
	if (fixed)
		before(a, l);
	p = real_mmap ? real_mmap(a, l, prot, flags, fd, off)
		      : (void *)syscall(SYS_mmap, a, l, prot, flags, fd, off);
	/* A failed MAP_FIXED may have unmapped the old mapping already. */
	if (fixed)
		after(a, l, 1);
	return p;
}

EXPORT void *mmap(void *a, size_t l, int prot, int flags, int fd, off_t off)
{
	return do_mmap(a, l, prot, flags, fd, off);
}

EXPORT void *mmap64(void *a, size_t l, int prot, int flags, int fd, off_t off)
{
	return do_mmap(a, l, prot, flags, fd, off);
}

EXPORT int munmap(void *a, size_t l)
{
	int r;

	resolve();
	before(a, l);
	r = real_munmap ? real_munmap(a, l) : (int)syscall(SYS_munmap, a, l);
	after(a, l, r == 0);
	return r;
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	void *dest = NULL, *p;
	va_list ap;

	if (flags & MREMAP_FIXED) {
		va_start(ap, flags);
		dest = va_arg(ap, void *);
		va_end(ap);
	}
	resolve();
	/* Before: the old range may move away (or shrink), and whatever is
	 * at a fixed destination is unmapped. */
	before(old, old_len);
	if (flags & MREMAP_FIXED)
		before(dest, new_len);
	p = real_mremap ? real_mremap(old, old_len, new_len, flags, dest)
			: (void *)syscall(SYS_mremap, old, old_len, new_len, flags, dest);
	if (flags & MREMAP_FIXED)
		after(dest, new_len, p != MAP_FAILED);
	/* Grown or kept in place: the pages stayed; the end's push costs an
	 * invalidation, never correctness. */
	after(old, old_len, p != MAP_FAILED && (p != old || new_len < old_len));
	return p;
}

EXPORT int madvise(void *a, size_t l, int advice)
{
	int r;

	/* release_table.h: every advice but those known to keep the pages. */
	int discard = mrmgr__advice_releases(advice);

	resolve();
	if (discard)
		before(a, l);
	r = real_madvise ? real_madvise(a, l, advice)
			 : (int)syscall(SYS_madvise, a, l, advice);
	/* Even when it failed: ENOMEM/EINVAL come after part of the range
	 * was discarded already. */
	if (discard)
		after(a, l, 1);
	return r;
}

EXPORT int brk(void *a)
{
	char *old;
	size_t shrink;
	int r;

	resolve();
	if (!real_brk || !real_sbrk)
		return -1;
	old = real_sbrk(0);
	shrink = (char *)a < old ? (size_t)(old - (char *)a) : 0;
	if (shrink)
		before(a, shrink);
	r = real_brk(a);
	if (shrink)
		after(a, shrink, r == 0);
	return r;
}

EXPORT void *sbrk(intptr_t inc)
{
	char *old;

	resolve();
	if (!real_sbrk)
		return (void *)-1;
	if (inc < 0) {
		char *top = real_sbrk(0);

		before(top + inc, (size_t)-inc);
		old = real_sbrk(inc);
		after(top + inc, (size_t)-inc, old != (void *)-1);
		return old;
	}
	return real_sbrk(inc);
}

/*
 * The extent of the segment attached at a: consecutive VMAs of one inode,
 * from the text (os/maps.h, async-signal-safe): the ioctl's shared
 * descriptor is behind a lock, and these wrappers take none.
 */
static size_t shm_extent(const void *a)
{
	uint64_t end;

	return mrmgr__maps_shm_extent((uintptr_t)a, &end) > 0
		       ? (size_t)(end - (uintptr_t)a) : 0;
}

/*
 * What shmat(id, a, flg) with SHM_REMAP replaces: the segment's size from
 * a, rounded down to SHMLBA with SHM_RND (4 KiB to 64 KiB across
 * architectures: the range covers every rounding). Everything from there
 * on when the size cannot be read: a spurious invalidation, never a miss.
 */
static size_t shmat_extent(int id, const void *a, int flg, const void **at)
{
	struct shmid_ds ds;
	uintptr_t p = (uintptr_t)a & ~(uintptr_t)4095;
	uintptr_t lo = flg & SHM_RND ? (uintptr_t)a & ~(uintptr_t)0xffff : p;

	*at = (const void *)lo;
	if (shmctl(id, IPC_STAT, &ds) == 0 && ds.shm_segsz &&
	    p + ds.shm_segsz > p)
		return (size_t)(p - lo) + ds.shm_segsz;
	return (size_t)(UINTPTR_MAX - lo) + 1 - 4096;
}

/* SHM_REMAP puts the segment over whatever was mapped there. */
EXPORT void *shmat(int id, const void *a, int flg)
{
	const void *at = NULL;
	size_t len = 0;
	void *r;

	resolve();
	if (mrmgr__shmat_releases(flg) && a)
		len = shmat_extent(id, a, flg, &at);
	if (len)
		before(at, len);
	r = real_shmat ? real_shmat(id, a, flg)
		       : (void *)syscall(SYS_shmat, id, a, flg);
	/* A failed remap may have unmapped the old pages already. */
	if (len)
		after(at, len, 1);
	return r;
}

EXPORT int shmdt(const void *a)
{
	size_t len;
	int r;

	resolve();
	if (!real_shmdt)
		return (int)syscall(SYS_shmdt, a);
	len = shm_extent(a);
	if (len)
		before(a, len);
	r = real_shmdt(a);
	if (len)
		after(a, len, r == 0);
	else if (r == 0)
		report_all();
	return r;
}

/* ------------------------------------------------------------ malloc */

/*
 * glibc's chunk header, just before the pointer malloc() returned: the
 * size word's bit 1 (IS_MMAPPED) marks a chunk with a mapping of its own,
 * which free() unmaps [p - 16 - prev_size, + prev_size + size) with an
 * internal munmap (malloc/malloc.c: munmap_chunk; stable since 2.26).
 */
static int glibc_mmapped(const void *p, const void **base, size_t *len)
{
	const size_t *h = (const size_t *)p;
	size_t size, prev;

	if (!p || !(info & MRMGR__HOOKS_GLIBC_MALLOC))
		return 0;
	size = h[-1];
	if (!(size & 2))
		return 0;
	prev = h[-2];
	*base = (const char *)p - 2 * sizeof(size_t) - prev;
	*len = (size & ~(size_t)7) + prev;
	return 1;
}

EXPORT void free(void *p)
{
	const void *base;
	size_t len;
	char *top0, *top1;

	resolve();
	if (!real_free) {
		/* Called from dlsym() while resolving: leak rather than guess
		 * which allocator owns it. */
		return;
	}
	if (glibc_mmapped(p, &base, &len)) {
		before(base, len);
		real_free(p);
		after(base, len, 1);
		return;
	}
	if (!p || !(info & MRMGR__HOOKS_GLIBC_MALLOC) || !real_sbrk) {
		real_free(p);
		return;
	}
	top0 = real_sbrk(0);
	real_free(p);
	top1 = real_sbrk(0);
	if (top1 < top0) /* the main arena gave its top back */
		report(top1, (size_t)(top0 - top1));
}

static void *after_realloc(void *p, size_t n, void *q, int mmapped,
			   const void *base, size_t len)
{
	(void)p;
	/* Failed with the old block intact: nothing changed (the end still
	 * closes what before_realloc() opened). */
	if (mmapped)
		after(base, len, q || !n);
	return q;
}

EXPORT void *realloc(void *p, size_t n)
{
	const void *base = NULL;
	size_t len = 0;
	int m;

	resolve();
	if (!real_realloc)
		return NULL;
	m = glibc_mmapped(p, &base, &len);
	if (m) /* an mmap'd chunk may be moved (mremap) or freed */
		before(base, len);
	return after_realloc(p, n, real_realloc(p, n), m, base, len);
}

EXPORT void *reallocarray(void *p, size_t nmemb, size_t size)
{
	const void *base = NULL;
	size_t len = 0;
	int m;

	resolve();
	if (!real_reallocarray)
		return NULL;
	m = glibc_mmapped(p, &base, &len);
	if (m)
		before(base, len);
	return after_realloc(p, nmemb * size, real_reallocarray(p, nmemb, size),
			     m, base, len);
}

EXPORT int malloc_trim(size_t pad)
{
	int r;

	resolve();
	if (!real_malloc_trim)
		return 0;
	r = real_malloc_trim(pad);
	/* It madvise()s free chunks of every arena with internal calls. */
	report_all();
	return r;
}
