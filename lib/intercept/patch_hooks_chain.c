/*
 * The chaining hooks: where another patcher owns a libc entry point (it
 * was there first, or took it over and we went back on top), its code
 * issues the system call and ours reports the same ranges around it, one
 * set of hooks per generation (patch_takeover.c). Their bodies also serve
 * follow.c's wrappers around memory calls other objects define. Same
 * rules as patch_hooks.c.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "patch_hooks.h"
#include "release_table.h"

#if MRMGR__PATCH_SUPPORTED

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
