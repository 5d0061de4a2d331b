/*
 * Event sources as tables: what tells the monitor that memory changed.
 * One table per source (userfaultfd, the patched libc, libmrmgr_hooks.so,
 * the program's own notifications); a mode is an ordered list of them.
 * doc/design/sources.md says how to add one and the contract it keeps.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__SOURCE_H
#define MRMGR__SOURCE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

struct mrmgr__mon_cache;
struct mrmgr__watch_tx;
struct mrmgr_monitor_info;

/* Memory kinds a source covers (host virtual memory is kind one). */
#define MRMGR__SRC_KIND_HOST_VA (1u << 0)

/* What a source sees. */
enum mrmgr__src_covers {
	MRMGR__SRC_SEES_CALLS = 1u << 0,  /* the program's memory calls */
	MRMGR__SRC_SEES_RAW = 1u << 1,    /* raw system calls too (the kernel
					   * reports, whoever makes them) */
	MRMGR__SRC_PROMISED = 1u << 2,    /* nothing: the program reports */
};

struct mrmgr__mon_source {
	const char *name;       /* for logs */
	const char *label;      /* in the no-source warning */
	uint32_t report_bit;    /* MRMGR_MONITOR_SRC_* when it is relied on */
	uint32_t mem_kinds;     /* MRMGR__SRC_KIND_* */
	uint32_t vma_kinds;     /* 1u << enum mrmgr__vma_kind it may vouch for */
	uint32_t covers;        /* enum mrmgr__src_covers */
	/*
	 * 0 once delivering (idempotent), else why not; mrmgr__mon_lock
	 * held. asked: a cache is being created, so a failure for a passing
	 * cause (descriptors, memory) is tried again now, not after the
	 * back-off a get waits for.
	 */
	int (*start)(int asked);
	/*
	 * NULL, or no lock held: 1 when start(0) would answer 0 at once
	 * with nothing to do (mrmgr__mon_pick_quiet()). A source that has
	 * it also watches without mrmgr__mon_lock (its watch needs only the
	 * cache's lock).
	 */
	int (*quiet)(void);
	/* Whether it delivers now, without starting it (reports). */
	int (*active)(void);
	/* 2: begin and end of every change (the change protocol, change.c);
	 * 1: one side only. A property of the source, known unstarted. */
	int (*sides)(void);
	/* Cover [start, last] for a get (watch.c's contract), 0 or errno.
	 * NULL: the program promised (nothing is looked at). */
	int (*watch)(struct mrmgr__mon_cache *m, struct mrmgr__watch_tx *tx,
		     uint64_t start, uint64_t last);
	/* In a fork child, before its first cache call (NULL: nothing). */
	void (*fork_child)(void);
	/* Fill its part of the report (process-wide); listed: the cache's
	 * mode lists this source. */
	void (*report)(struct mrmgr_monitor_info *mi, int listed);
	/* Why it does not run, for the no-source warning; err: what its
	 * start returned in this attempt (0: not tried). */
	const char *(*why_not)(int err, int listed);
};

/* One entry of a mode's list: the source, and when it applies (NULL:
 * always); note runs once, the first time it started because of when. */
struct mrmgr__mon_use {
	const struct mrmgr__mon_source *src;
	int (*when)(void);
	void (*note)(void);
};

#define MRMGR__MON_MAX_USES 4

struct mrmgr__mon_mode {
	const char *name;
	/* The program takes responsibility (external reports, none promises
	 * nothing changes): every range is covered without looking. */
	int promised;
	void (*announce)(void); /* said at each cache creation, or NULL */
	unsigned int n;
	struct mrmgr__mon_use use[MRMGR__MON_MAX_USES];
};

/* The list a public enum mrmgr_monitor_mode value means (sources.c). */
const struct mrmgr__mon_mode *mrmgr__mon_mode_of(uint32_t mode);

/*
 * The source a get relies on for mode (mon lock held): the first listed
 * one that sees both sides and starts, else the first one-sided that
 * starts, those that see raw system calls first. NULL: none.
 */
const struct mrmgr__mon_source *
mrmgr__mon_pick(const struct mrmgr__mon_mode *mm);

/*
 * No lock held: mrmgr__mon_pick()'s answer when it is the mode's first
 * source, which always applies, sees both sides and is quiet (so the
 * pick would take it on its first step); else NULL: pick under the lock.
 * A miss in the default mode skips the monitor's lock this way.
 */
const struct mrmgr__mon_source *
mrmgr__mon_pick_quiet(const struct mrmgr__mon_mode *mm);

/* Every source, for fork children and reports. */
extern const struct mrmgr__mon_source mrmgr__src_patch, mrmgr__src_hooks,
	mrmgr__src_uffd, mrmgr__src_external, mrmgr__src_sanalloc;

/*
 * The sanitizer allocator source (sanalloc.c). Its interface, as the
 * sanitizers' sanitizer/allocator_interface.h declares it; tests set
 * mrmgr__san_test_iface to stand in for a sanitizer (before the first
 * cache; install must return non-zero when it took the hooks), or
 * absent to act as a sanitizer without the interface.
 */
struct mrmgr__san_iface {
	int (*install)(void (*malloc_hook)(const volatile void *, size_t),
		       void (*free_hook)(const volatile void *));
	size_t (*size)(const volatile void *);
	int absent;
};
extern struct mrmgr__san_iface mrmgr__san_test_iface;
extern uint64_t mrmgr__san_reports; /* chunks reported past the filter */
int mrmgr__san_applies(void);     /* a sanitizer is in the process */
void mrmgr__san_note(void);       /* said when it starts (info) */
const char *mrmgr__san_why(void); /* why it does not run */

/* Why a range is not watched: the coverage decision's error codes
 * (watch.c), each an errno a cache's monitor figures keep. */
#define MRMGR__WERR_NO_SOURCE ENODEV
#define MRMGR__WERR_SHARED EPERM
#define MRMGR__WERR_FILE EMEDIUMTYPE
#define MRMGR__WERR_HOLE EFAULT
#define MRMGR__WERR_BUDGET EOVERFLOW

/* [start, last] is not watched for err (one of the above, or what the
 * kernel said): counted in m, said once per cause (unwatched.c). */
void mrmgr__watch_unwatched(struct mrmgr__mon_cache *m, uint64_t start,
			    uint64_t last, int err);

/* The watch operations sources share (watch.c). */
int mrmgr__watch_trusted(struct mrmgr__mon_cache *m, struct mrmgr__watch_tx *tx,
			 uint64_t start, uint64_t last);
int mrmgr__watch_uffd(struct mrmgr__mon_cache *m, struct mrmgr__watch_tx *tx,
		      uint64_t start, uint64_t last);

#endif /* MRMGR__SOURCE_H */
