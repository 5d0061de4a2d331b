/*
 * What releases pages: the one table both interposers decide by, libc's
 * patched entries (patch_hooks.c) and libmrmgr_hooks.so
 * (hooks/mrmgr_hooks.c), and the tests (test_release_table) walk.
 *
 * "Releases" means: after the call the virtual range may be backed by
 * other pages than the ones a registration pinned (or by none), so a
 * cached registration of it would be stale. The rule is conservative:
 * an advice value not in this table, or newer than it, is taken to
 * release; only values the kernel is known to leave the pages under are
 * "keeps". A wrong "releases" costs an invalidation, a wrong "keeps"
 * costs silent corruption.
 *
 * The other calls and flags that release, decided by the same rule in
 * both interposers (one predicate each below):
 *   munmap                      always, the whole range
 *   mmap with MAP_FIXED         the range it replaces
 *                               (MAP_FIXED_NOREPLACE alone: nothing)
 *   mremap                      the old range when it may move
 *                               (MREMAP_MAYMOVE, MREMAP_FIXED,
 *                               MREMAP_DONTUNMAP: the old range stays
 *                               mapped but its pages move to the new one),
 *                               the tail when it shrinks in place, and the
 *                               destination with MREMAP_FIXED
 *   shmat with SHM_REMAP        the segment's extent at the address
 *   shmdt, brk/sbrk shrinking   the range they drop
 * (mremap's ranges need its lengths: patch_hooks.h's mremap_spans();
 * libmrmgr_hooks.so reports the whole old range whatever the flags.)
 * Not libc calls, so no interposer sees them (doc/monitor.md, the
 * per-mode table): process_madvise() (the kernel takes only part of
 * the advice there: COLD, PAGEOUT, WILLNEED, COLLAPSE in 6.1, more in
 * newer kernels; the same table says which release), io_uring's
 * IORING_OP_MADVISE, a raw syscall().
 *
 * Header only, async-signal-safe and lock-free: the hooks run inside
 * malloc and signal handlers, and libmrmgr_hooks.so links nothing of
 * libmrmgr.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__RELEASE_TABLE_H
#define MRMGR__RELEASE_TABLE_H

#ifndef MAP_FIXED
#define MAP_FIXED 0x10
#endif
#ifndef SHM_REMAP
#define SHM_REMAP 040000
#endif

enum mrmgr__release {
	MRMGR__KEEPS = 0,    /* the pages stay mapped where they are */
	MRMGR__RELEASES = 1, /* the range may be backed by other pages after */
};

/*
 * X(value, name, effect, why): every madvise() advice Linux defines up
 * to 6.18 (uapi asm-generic/mman-common.h; the same numbers on x86-64
 * and arm64). Values in between and above are unknown: they release.
 */
#define MRMGR__ADVICE_TABLE(X)                                                  \
	X(0, "NORMAL", MRMGR__KEEPS, "readahead hint")                          \
	X(1, "RANDOM", MRMGR__KEEPS, "readahead hint")                          \
	X(2, "SEQUENTIAL", MRMGR__KEEPS, "readahead hint")                      \
	X(3, "WILLNEED", MRMGR__KEEPS, "reads ahead, replaces nothing")         \
	X(4, "DONTNEED", MRMGR__RELEASES, "zaps the pages")                     \
	X(8, "FREE", MRMGR__RELEASES, "lazy free: reclaim may drop them")       \
	X(9, "REMOVE", MRMGR__RELEASES, "punches the backing store")            \
	X(10, "DONTFORK", MRMGR__KEEPS, "the child's view only")                \
	X(11, "DOFORK", MRMGR__KEEPS, "the child's view only")                  \
	X(12, "MERGEABLE", MRMGR__KEEPS, "KSM never merges a pinned page")      \
	X(13, "UNMERGEABLE", MRMGR__KEEPS, "unmerging breaks only KSM pages")   \
	X(14, "HUGEPAGE", MRMGR__KEEPS, "khugepaged skips pinned pages")        \
	X(15, "NOHUGEPAGE", MRMGR__KEEPS, "a flag on the mapping")              \
	X(16, "DONTDUMP", MRMGR__KEEPS, "core dump flag")                       \
	X(17, "DODUMP", MRMGR__KEEPS, "core dump flag")                         \
	X(18, "WIPEONFORK", MRMGR__KEEPS, "the child's copy only")              \
	X(19, "KEEPONFORK", MRMGR__KEEPS, "the child's copy only")              \
	X(20, "COLD", MRMGR__KEEPS, "reclaim hint; pinned pages stay")          \
	X(21, "PAGEOUT", MRMGR__KEEPS, "reclaims, but never a pinned page")     \
	X(22, "POPULATE_READ", MRMGR__KEEPS, "faults in, replaces nothing")     \
	X(23, "POPULATE_WRITE", MRMGR__KEEPS, "a pinned page is exclusive")     \
	X(24, "DONTNEED_LOCKED", MRMGR__RELEASES, "zaps, locked pages too")     \
	X(25, "COLLAPSE", MRMGR__RELEASES, "copies into a huge page")           \
	X(100, "HWPOISON", MRMGR__RELEASES, "unmaps the page")                  \
	X(101, "SOFT_OFFLINE", MRMGR__RELEASES, "migrates the page")            \
	X(102, "GUARD_INSTALL", MRMGR__RELEASES, "zaps, installs guards")       \
	X(103, "GUARD_REMOVE", MRMGR__KEEPS, "removes guard markers only")

/* Whether madvise(adv) may release the pages of its range. */
static inline int mrmgr__advice_releases(int adv)
{
	switch (adv) {
#define MRMGR__ADVICE_CASE(v, n, e, w) \
	case v:                        \
		return e;
		MRMGR__ADVICE_TABLE(MRMGR__ADVICE_CASE)
#undef MRMGR__ADVICE_CASE
	default:
		return MRMGR__RELEASES;
	}
}

/* mmap(flags) replaces what was mapped at its address. */
static inline int mrmgr__mmap_releases(int flags)
{
	return !!(flags & MAP_FIXED);
}

/* shmat(flg) at a given address replaces what was mapped there. */
static inline int mrmgr__shmat_releases(int flg)
{
	return !!(flg & SHM_REMAP);
}

#endif /* MRMGR__RELEASE_TABLE_H */
