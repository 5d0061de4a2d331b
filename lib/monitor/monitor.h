/*
 * The memory-event monitor: sources -> one invalidation queue -> caches.
 *
 * Sources (userfaultfd's reader thread, mrmgr_notify_unmap() and through
 * it libmrmgr_hooks.so) only push ranges into one process-wide bounded
 * lock-free queue. Caches pull: every cache has its own cursor in the
 * queue and applies the events under its own lock, the next time a get
 * misses the fast path. Nothing here calls into a cache.
 *
 * The fast path needs one load to know whether anything is pending: the
 * event word, (events pushed << 1) | reader busy, compared with the word
 * value at which the cache last drained (mon_seen, on the cache's
 * read-mostly line). See queue.c for why that is enough even
 * though userfaultfd lets the unmapping thread go before the reader has
 * pushed the event.
 *
 * The monitor knows no cache: a cache subscribes with a struct
 * mrmgr__mon_cache of its own (its cursor, mode and counters) and calls
 * the functions below; nothing here calls up (lib/core/events.c is the
 * core's side).
 *
 * Locks: a cache's lock, then the monitor lock (mrmgr__mon_lock: the
 * registry of watched ranges and source start-up). The reader thread
 * takes no lock at all, allocates nothing and logs nothing: an unmapping
 * thread may hold any lock (a cache's, malloc's) while the kernel keeps
 * it waiting for the reader.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__MONITOR_H
#define MRMGR__MONITOR_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <mrmgr/mrmgr.h>

#include "compiler.h"
#include "hooks_abi.h"
#include "itree.h"
#include "vma.h"

/* ------------------------------------------------------------ queue */

/* (events pushed << 1) | reader busy. The struct fills a line of its own. */
struct mrmgr__mon_hot {
	_Alignas(MRMGR__CACHELINE) uint64_t word;
};
extern struct mrmgr__mon_hot mrmgr__mon_hot;
#define mrmgr__mon_word (mrmgr__mon_hot.word)

/* Nothing new since this cache last drained? One load of a read-mostly line. */
static inline int mrmgr__mon_quiet(const uint64_t *seen)
{
	return __atomic_load_n(&mrmgr__mon_word, __ATOMIC_ACQUIRE) ==
	       __atomic_load_n(seen, __ATOMIC_ACQUIRE);
}

/* Append [start, last] for every cache. Async-signal-safe. */
void mrmgr__mon_push(uint64_t start, uint64_t last);
/* The same, unless no cache ever registered memory there (the filter):
 * 1 when pushed. */
int mrmgr__mon_push_filtered(uint64_t start, uint64_t last);
/* Whether an event at or after queue index from may overlap [start, last]
 * (1 also when it cannot tell: lapped, a slot still being written). */
int mrmgr__mon_queue_dirty(uint64_t from, uint64_t start, uint64_t last);

/* ------------------------------------------------------------ changes */

/*
 * Both sides of a change (change.c): a source that wraps the program's
 * memory calls (libc's patched entry points, libmrmgr_hooks.so) calls
 * begin before the kernel releases the pages of [start, last] (inclusive,
 * page granular) and end after the call returned, success or not, with
 * the same range. Async-signal-safe: no allocation, no lock, no log.
 */
void mrmgr__mon_change_begin(uint64_t start, uint64_t last);
void mrmgr__mon_change_end(uint64_t start, uint64_t last);
/* Whether a change overlapping [start, last] is between begin and end.
 * Its first step is a seq_cst fence, before any load: watch_commit()
 * relies on it as the fence between the registration and its checks. */
int mrmgr__mon_change_in_flight(uint64_t start, uint64_t last);
/* In a fork child: no change of another thread is in flight there. */
void mrmgr__mon_change_fork_child(void);
extern uint64_t mrmgr__mon_change_count;

/*
 * Remember that [start, last] may be cached, so mrmgr_notify_unmap() does
 * not drop events for it. Call before registering the range.
 */
void mrmgr__mon_filter_add(uint64_t start, uint64_t last);
/* The same for a watch, with no fence of its own: for
 * mrmgr__watch_begin() only, whose commit's fence orders it (change.c). */
void mrmgr__mon_filter_watch(uint64_t start, uint64_t last);
/* What filter_add(start, last) made the filter hold, at least: [*lo, *hi]
 * (whole chunks). A change outside it may never be reported. */
void mrmgr__mon_filter_span(uint64_t start, uint64_t last, uint64_t *lo,
			   uint64_t *hi);

/*
 * The chunks around [start, last] whose bits are set now, as one span
 * [*lo, *hi] (whole chunks, up to 8 GiB each way; everything while the
 * filter holds all). Bits are never cleared, so a change anywhere in it
 * from this call on is reported: what a VMA query made after this call
 * shows there stays true until an event says otherwise. Call after
 * filter_add(start, last).
 */
void mrmgr__mon_filter_run(uint64_t start, uint64_t last, uint64_t *lo,
			   uint64_t *hi);
/* filter_add() of the part of [vs, vl] nearest [start, last], short of
 * what would make the filter hold everything (FILTER_WIDE). */
void mrmgr__mon_filter_widen(uint64_t start, uint64_t last, uint64_t vs,
			     uint64_t vl);

/* A subscriber's monitor state (one per cache); under the subscriber's
 * lock. */
struct mrmgr__mon_cache {
	uint64_t cursor;       /* next queue index to apply */
	uint64_t target;       /* word value the running drain works toward */
	uint32_t mode;         /* enum mrmgr_monitor_mode in force */
	/* Its list of sources (mrmgr__mon_mode_of(mode)): what every
	 * watch reads first, without a call. */
	const struct mrmgr__mon_mode *mm;
	int32_t fork_status;   /* enum ibv_fork_status, -1: pages held with
				* plain references (the core's fork.c) */
	struct mrmgr__mon_cache *fork_next; /* the core's list of
					     * subscribers (fork.c) */
	uint64_t events, invalidations, overflows, unwatched, fork_purges;
	uint64_t window_uncached;  /* commits refused: a change overlapped */
	uint32_t unwatched_causes; /* enum mrmgr_monitor_unwatched_cause */
	int32_t unwatched_error;   /* errno of the last unwatched get */
	/* Extents already classified and watched, valid until an event
	 * overlaps them (drain_next drops those): a miss there makes no
	 * system call beyond its registration. */
	struct mrmgr__mon_known {
		uint64_t start, last;  /* the VMAs' extent; last 0: empty */
		uint32_t kind;         /* enum mrmgr__vma_kind */
	} known[8];
	uint32_t known_next;
	uint32_t known_last;   /* the entry known_find() found last */
};

/* Queue state for a new cache (or one a fork emptied). */
void mrmgr__mon_queue_attach(struct mrmgr__mon_cache *m, uint64_t *seen);

/*
 * Draining, with the cache lock held: begin waits until the reader has
 * pushed what it read; next returns 1 and a range, 0 at the end, or -1
 * when the cache fell behind (then it must invalidate everything); end
 * publishes the word the cache is now up to date with.
 */
void mrmgr__mon_drain_begin(struct mrmgr__mon_cache *m);
int mrmgr__mon_drain_next(struct mrmgr__mon_cache *m, uint64_t *start,
			  uint64_t *last);
void mrmgr__mon_drain_end(struct mrmgr__mon_cache *m, uint64_t *seen);

/* Whether the queue holds an event overlapping [start, last] at or after
 * index from (self-tests). */
int mrmgr__mon_queue_saw(uint64_t from, uint64_t start, uint64_t last);
/* Index the next event will get. */
uint64_t mrmgr__mon_queue_tail(void);
/* Event idx of the queue, when it is still there: 1 with its range, else
 * 0 (for reports: the stale check's, stale.c). */
int mrmgr__mon_queue_read(uint64_t idx, uint64_t *start, uint64_t *last);
/* The reader is never in a batch in a fork child: forget that it was. */
void mrmgr__mon_queue_fork_child(void);

/* Process-wide counters (relaxed atomics). */
extern uint64_t mrmgr__mon_uffd_events;
extern uint64_t mrmgr__mon_notify_events;

/* ------------------------------------------------------------ sources */

extern pthread_mutex_t mrmgr__mon_lock;

enum mrmgr__src_state { SRC_UNTRIED = 0, SRC_ACTIVE, SRC_FAILED };

/* userfaultfd (uffd.c); call with mrmgr__mon_lock held. */
int mrmgr__uffd_start(int asked);        /* 0 or why not */
int mrmgr__uffd_state(int *err, uint32_t *flags, uint64_t *features);
int mrmgr__uffd_register(uint64_t start, uint64_t last);   /* 0 or errno */
int mrmgr__uffd_internal(uint64_t start, uint64_t last);   /* our own memory */
int mrmgr__uffd_registered(uint64_t start, uint64_t last); /* 0, ENOENT */
void mrmgr__uffd_unregister(uint64_t start, uint64_t last);
void mrmgr__uffd_fork_child(void);

/* Retrying a source that failed for want of a resource (monitor.c). */
struct mrmgr__retry {
	uint64_t at_ms;  /* CLOCK_MONOTONIC ms of the next try; 0: none */
	unsigned int count;
};
int mrmgr__retry_transient(int err);
void mrmgr__retry_failed(struct mrmgr__retry *r, int err);
int mrmgr__retry_due(struct mrmgr__retry *r); /* 1: try again now */
/* retry_due, or 1 at once when asked (a cache is being created) and err
 * is passing. */
int mrmgr__retry_now(struct mrmgr__retry *r, int err, int asked);
extern uint64_t mrmgr__mon_retries;

/* Whether growth headroom may register memory nobody asked for, for a
 * subscriber in mode. */
int mrmgr__mon_headroom_ok_mode(uint32_t mode);

/* libmrmgr_hooks.so (monitor.c). */
int mrmgr__hooks_state(int *err);

/* The patched libc and the calls other objects define: the engine's
 * own header (lib/intercept/intercept.h). */
/* auto mode's userfaultfd: in a build without the patch source, or under
 * a sanitizer (monitor.c). */
int mrmgr__mon_auto_uffd(void);

/* mode's name as MRMGR_MONITOR spells it ("?" for an unknown value):
 * the modes table's (sources.c). */
const char *mrmgr__mon_mode_name(uint32_t mode);

/* Whether a source that sees both sides of a change covers mode now
 * (the patched libc or the hooks; external counts: see doc/growth.md). */
int mrmgr__mon_two_sided(uint32_t mode);

/* ------------------------------------------------------------ watching */

/*
 * A registry entry: a range registered with userfaultfd on behalf of one
 * region (or of a get in progress). Entries with the same range share one
 * tree node (every region of a VMA holds the whole VMA): the node is any
 * member's, the members sit on a ring.
 */
struct mrmgr__watch {
	struct mrmgr__itree_node node;
	struct mrmgr__watch *next, *prev; /* members with the same range */
	int in_tree;                      /* this member's node is the one */
	int joined;                       /* in the registry (a commit put it
					   * there; end takes it out) */
	int dirty; /* set by grow.c when its rereg's commit was refused: the
		    * next commit (the region's publish) refuses too */
};

/*
 * A get that is about to register [start, last] for caching asks whether
 * anything will report changes to it. begin returns 0 when it is covered
 * (the range is then watched already, before the registration pins
 * anything), or an errno saying why not (counted in m): the caller then
 * hands the registration out uncached. commit ties the watch to w, the
 * entry of what was made; abort gives it up. end runs when that leaves
 * the subscriber (a no-op unless w joined). All with the subscriber's
 * lock held.
 */
struct mrmgr__watch_tx {
	struct mrmgr__watch w; /* the provisional registry entry */
	int kind;              /* how it is covered */
	uint64_t from;         /* queue index when the window opened */
	uint64_t start, last;  /* the range asked for */
};
int mrmgr__watch_begin(struct mrmgr__mon_cache *m, uint64_t start,
		       uint64_t last, struct mrmgr__watch_tx *tx);
/*
 * 0: cache what w belongs to. EAGAIN: a change overlapping the range was
 * in flight, or began, since watch_begin, so the pages it pinned may be
 * on their way out: hand it out uncached (the watch is given up, as by
 * abort).
 */
int mrmgr__watch_commit(struct mrmgr__mon_cache *m, struct mrmgr__watch_tx *tx,
			struct mrmgr__watch *w);
void mrmgr__watch_abort(struct mrmgr__watch_tx *tx);
void mrmgr__watch_end(struct mrmgr__watch *w);
/* An event overlapped [s, l]: forget what was known about it (queue.c). */
void mrmgr__mon_known_drop(struct mrmgr__mon_cache *m, uint64_t s, uint64_t l);

/* Registry internals shared by watch.c and monitor.c. */
void mrmgr__watch_stats(uint64_t *ranges, uint64_t *runs, uint64_t *budget);
void mrmgr__watch_fork_child(void);
/* In a fork child: every source's fork_child, then the registry's. */
void mrmgr__mon_sources_fork_child(void);

/* ------------------------------------------------------------ caches */

/*
 * A new subscriber (or one a fork emptied): its state, with seen the
 * word its fast path compares (mrmgr__mon_quiet()). fork_status as in
 * struct mrmgr__mon_cache.
 */
void mrmgr__mon_subscribe(struct mrmgr__mon_cache *m, uint64_t *seen,
			  uint32_t mode, int32_t fork_status);
/* Say what mode means, and start the sources it relies on unless
 * sources is 0 (a cache that caches nothing needs none). */
void mrmgr__mon_start(uint32_t mode, int sources);

/* What mrmgr_cache_query_monitor() reports: cache fills the subscriber's
 * part (under its lock), info the process-wide part for info->mode. */
void mrmgr__mon_info_cache(const struct mrmgr__mon_cache *m,
			   struct mrmgr_monitor_info *info);
void mrmgr__mon_info(struct mrmgr_monitor_info *info);

/* Test hooks (unit tests set them before the first cache). */
enum mrmgr__mon_test_flags {
	MRMGR__MON_TEST_UFFD_EPERM = 1u << 0,   /* userfaultfd() refused */
	MRMGR__MON_TEST_DROP_EVENTS = 1u << 1,  /* self-test sees nothing */
};
extern unsigned int mrmgr__mon_test_flags;
extern uint64_t mrmgr__watch_budget_override;
/*
 * Called (when set, with mrmgr__mon_lock held) by the userfaultfd watch
 * with the extent [vs, vl] it is about to vouch for: phase 0 between the
 * classification and UFFDIO_REGISTER, phase 1 between UFFDIO_REGISTER and
 * the second look, phase 2 between a second look that passed and
 * known_add(). Tests change memory there with raw system calls to hold
 * the window open.
 */
enum {
	MRMGR__WATCH_TEST_BEFORE_REGISTER,
	MRMGR__WATCH_TEST_AFTER_REGISTER,
	MRMGR__WATCH_TEST_AFTER_SECOND_LOOK,
};
extern void (*mrmgr__watch_test_between)(int phase, uint64_t vs, uint64_t vl);
/* Second looks that found an unregistered VMA inside an extent just
 * registered (the window of issue 21), and probes that could not tell
 * (EAGAIN for too long), for the torture's report. */
extern uint64_t mrmgr__watch_unregistered_seen, mrmgr__watch_probe_failed;

#endif /* MRMGR__MONITOR_H */
