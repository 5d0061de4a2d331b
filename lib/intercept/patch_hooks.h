/*
 * What libc's patched hooks (patch_hooks.c) and the chaining hooks
 * (patch_hooks_chain.c) share: the raw system calls, errno as glibc's
 * wrappers set it, the ranges a call reports, and the memory a call maps
 * anew. Static inline: every hook keeps its own copy, no call. The rules
 * of patch_hooks.c hold for all of it (no allocation, no lock, no log,
 * async-signal-safe).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__PATCH_HOOKS_H
#define MRMGR__PATCH_HOOKS_H

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>

#include "maps.h"
#include "patch.h"

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
extern unsigned int mrmgr__patch_fresh;

static inline int fresh_wanted(void)
{
	return mrmgr__unlikely(
		__atomic_load_n(&mrmgr__patch_fresh, __ATOMIC_SEQ_CST));
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

/* SHM_REMAP replaces what was mapped at the (rounded) address. SHMLBA
 * is 4 KiB to 64 KiB across architectures: with SHM_RND the range covers
 * every rounding (rounding to 64 KiB alone would miss the segment's end
 * where SHMLBA is a page). */
static inline int shmat_range(int id, const void *a, int flg, uint64_t *s, uint64_t *e)
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

/*
 * The segment attached at a (os/maps.h, async-signal-safe): 1 and
 * [a, *last], 0 when nothing is attached there, -1 when it cannot be
 * told.
 */
static inline int shm_extent(uintptr_t a, uint64_t *last)
{
	uint64_t end;
	int k = mrmgr__maps_shm_extent(a, &end);

	if (k > 0)
		*last = end - 1;
	return k;
}

#endif /* MRMGR__PATCH_SUPPORTED */

#endif /* MRMGR__PATCH_HOOKS_H */
