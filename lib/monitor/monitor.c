/*
 * The monitor's front: which sources a cache relies on, starting them,
 * the hooks library's self-test, and the coverage report.
 *
 * Sources are process-wide and start once, when the first cache that
 * wants them is created (again in a fork child, whose first cache get
 * needs them). A cache's mode only decides which of the running sources
 * may vouch for its regions (see watch.c).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hooks_abi.h"
#include "log.h"
#include "monitor.h"
#include "patch.h"
#include "procfs.h"

pthread_mutex_t mrmgr__mon_lock = PTHREAD_MUTEX_INITIALIZER;

/* Defined by libmrmgr_hooks.so when it is in the global scope. */
extern unsigned int mrmgr_hooks_info(void)
	__attribute__((weak, visibility("default")));
extern void mrmgr_hooks_bind(const struct mrmgr__hooks_ops *ops)
	__attribute__((weak, visibility("default")));

static const struct mrmgr__hooks_ops hooks_ops = {
	.change_begin = mrmgr__mon_change_begin,
	.change_end = mrmgr__mon_change_end,
};

static struct {
	int state; /* enum mrmgr__src_state */
	int err;
	pid_t pid;
	struct mrmgr__retry retry;
} H;

/* ------------------------------------------------------------ retries */

/*
 * A source that failed for want of a resource (descriptors, memory) is
 * tried again later, not given up for the life of the process: at the
 * first get after a back-off that doubles from 100 ms to 12.8 s, at most
 * MAX_RETRIES times. Other failures (refused by policy, no kernel
 * support, a self-test that got no event) are final.
 */
#define MAX_RETRIES 24

int mrmgr__retry_transient(int err)
{
	return err == EMFILE || err == ENFILE || err == ENOMEM ||
	       err == EAGAIN || err == ENOBUFS || err == ENOSPC;
}

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

void mrmgr__retry_failed(struct mrmgr__retry *r, int err)
{
	if (!mrmgr__retry_transient(err) || r->count >= MAX_RETRIES) {
		r->at_ms = 0;
		return;
	}
	r->at_ms = now_ms() + ((uint64_t)100 << (r->count < 7 ? r->count : 7));
	r->count++;
}

int mrmgr__retry_due(struct mrmgr__retry *r)
{
	if (!r->at_ms || now_ms() < r->at_ms)
		return 0;
	r->at_ms = 0;
	__atomic_fetch_add(&mrmgr__mon_retries, 1, __ATOMIC_RELAXED);
	return 1;
}

uint64_t mrmgr__mon_retries;

static int warned_no_source, warned_sanitizer_uffd;

static int patch_started(void)
{
	return mrmgr__patch_start && mrmgr__patch_start() == 0;
}

/* The patched libc vouches only when every memory call the process
 * defines outside libc is followed too (follow.c). */
static int patch_active(void)
{
	return patch_started() && !mrmgr__follow_check();
}

/* The patched libc runs but cannot vouch: calls it cannot see. */
static int patch_blind(void)
{
	return patch_started() && mrmgr__follow_check();
}

/*
 * auto falls back to userfaultfd where the patched libc cannot see what
 * the program's memory does: a build without it, and a sanitizer, whose
 * allocator maps and unmaps with raw system calls (the kernel reports
 * those to userfaultfd, whoever makes them). Nothing cached under a
 * sanitizer would make the program behave unlike the one it debugs;
 * userfaultfd's limits (one-sided, what it does not follow: the table in
 * doc/monitor.md) are the price, said once at start. Not valgrind: its
 * serialised threads would deadlock with the reader (uffd.c).
 */
int mrmgr__mon_auto_uffd(void)
{
	return !mrmgr__patch_start ||
	       (mrmgr__patch_sanitizer && mrmgr__patch_sanitizer()) ||
	       patch_blind();
}

/* Modes that take the patched libc: auto prefers it, patch is it alone. */
static int mode_uses_patch(uint32_t mode)
{
	return mode == MRMGR_MONITOR_AUTO || mode == MRMGR_MONITOR_PATCH;
}

int mrmgr__mon_two_sided(uint32_t mode)
{
	if (mode_uses_patch(mode) && patch_active())
		return 1;
	if (mode != MRMGR_MONITOR_AUTO && mode != MRMGR_MONITOR_HOOKS)
		return 0;
	/* An older hooks library without mrmgr_hooks_bind() reports after
	 * the call only. */
	return mrmgr_hooks_bind && mrmgr__hooks_state(NULL) == SRC_ACTIVE;
}

/*
 * Whether growth headroom is safe for this cache: it registers memory the
 * program did not ask for, so every change to that memory must reach the
 * cache on both sides (doc/growth.md). A two-sided source does that; in
 * external mode the program promises it (the contract in doc/growth.md);
 * with none it has promised everything. userfaultfd alone is one-sided:
 * UFFD_EVENT_REMOVE comes before madvise() discards, nothing after, so a
 * registration in between would pin pages on their way out.
 */
int mrmgr__mon_headroom_ok_mode(uint32_t mode)
{
	int ok;

	if (mode == MRMGR_MONITOR_EXTERNAL || mode == MRMGR_MONITOR_NONE)
		return 1;
	pthread_mutex_lock(&mrmgr__mon_lock);
	ok = mrmgr__mon_two_sided(mode);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	return ok;
}

static const char *mode_name(uint32_t m)
{
	static const char *const names[] = { "auto", "uffd", "hooks",
					     "external", "none", "patch" };

	return m < MRMGR__ARRAY_SIZE(names) ? names[m] : "?";
}

/* ------------------------------------------------------------ hooks */

/*
 * Check the hooks deliver: unmap a page through the ordinary munmap()
 * call (which binds to the hooks exactly when they interpose), and free
 * a chunk glibc can only have mmap'd (over its 32 MiB threshold ceiling).
 */
static int hooks_selftest(unsigned int info)
{
	long page = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t from;

	if (p == MAP_FAILED)
		return ENOMEM;
	from = mrmgr__mon_queue_tail();
	mrmgr__mon_filter_add((uintptr_t)p, (uintptr_t)p + (uint64_t)page - 1);
	munmap(p, (size_t)page);
	if (!mrmgr__mon_queue_saw(from, (uintptr_t)p,
				  (uintptr_t)p + (uint64_t)page - 1))
		return EPROTO;
	if (info & MRMGR__HOOKS_GLIBC_MALLOC) {
		const size_t n = (size_t)33 << 20;
		char *volatile m = malloc(n);

		if (!m)
			return ENOMEM;
		from = mrmgr__mon_queue_tail();
		mrmgr__mon_filter_add((uintptr_t)m, (uintptr_t)m + n - 1);
		free(m);
		if (!mrmgr__mon_queue_saw(from, (uintptr_t)m,
					  (uintptr_t)m + n - 1))
			return EPROTO;
	}
	return 0;
}

static int hooks_start(void)
{
	unsigned int info;

	if (H.state != SRC_UNTRIED && H.pid == mrmgr__getpid() &&
	    !(H.state == SRC_FAILED && mrmgr__retry_due(&H.retry)))
		return H.state == SRC_ACTIVE ? 0 : H.err;
	H.pid = mrmgr__getpid();
	if (!mrmgr_hooks_info) {
		H.state = SRC_FAILED;
		H.err = ENOENT;
		return H.err;
	}
	info = mrmgr_hooks_info();
	/* Both sides from now on, before the self-test, which then checks
	 * the path the hooks will take. */
	if ((info & MRMGR__HOOKS_READY) && mrmgr_hooks_bind)
		mrmgr_hooks_bind(&hooks_ops);
	H.err = !(info & MRMGR__HOOKS_READY) ? ENOSYS : hooks_selftest(info);
	H.state = H.err ? SRC_FAILED : SRC_ACTIVE;
	if (H.err)
		mrmgr__retry_failed(&H.retry, H.err);
	if (H.err)
		mrmgr__warn("monitor: libmrmgr_hooks.so is loaded but its "
			    "self-test failed (%s): not used. Preload it "
			    "(LD_PRELOAD) or link it before libc.",
			    strerror(H.err));
	else
		mrmgr__info("monitor: libmrmgr_hooks.so active%s%s",
			    info & MRMGR__HOOKS_GLIBC_MALLOC ? ", glibc malloc tracked" : "",
			    info & MRMGR__HOOKS_NO_TRIM ? ", heap trimming off" : "");
	return H.err;
}

int mrmgr__hooks_state(int *err)
{
	if (H.state != SRC_ACTIVE || H.pid != mrmgr__getpid())
		hooks_start();
	if (err)
		*err = H.state == SRC_ACTIVE ? 0 : H.err;
	return H.state;
}

/* ------------------------------------------------------------ caches */

void mrmgr__mon_subscribe(struct mrmgr__mon_cache *m, uint64_t *seen,
			  uint32_t mode, int32_t fork_status)
{
	memset(m, 0, sizeof(*m));
	m->mode = mode;
	m->fork_status = fork_status;
	mrmgr__mon_queue_attach(m, seen);
}

/* Why the patched libc does not run, for the warning below. */
static const char *patch_why(uint32_t mode)
{
	int err = 0;

	if (!mode_uses_patch(mode))
		return "not used";
	if (!mrmgr__patch_start)
		return "not built in";
	if (mrmgr__patch_sanitizer && mrmgr__patch_sanitizer())
		return "a sanitizer is in the process";
	if (patch_blind())
		return "memory calls it cannot see (see the warning above)";
	(void)mrmgr__patch_state(&err);
	return err ? strerror(err) : "not used";
}

void mrmgr__mon_start(uint32_t mode, int sources)
{
	int uerr = 0, herr = 0, any = 0;

	if (mode == MRMGR_MONITOR_NONE) {
		mrmgr__warn("MONITORING OFF (monitor mode none): this cache "
			    "will hand out STALE registrations after memory is "
			    "unmapped or remapped, and RDMA will silently write "
			    "to the old pages. Call mrmgr_invalidate() or "
			    "mrmgr_notify_unmap() before reusing memory.");
		return;
	}
	if (mode == MRMGR_MONITOR_EXTERNAL) {
		mrmgr__info("monitor: external (the program reports changes "
			    "with mrmgr_notify_unmap()/mrmgr_invalidate())");
		return;
	}
	if (!sources)
		return;
	pthread_mutex_lock(&mrmgr__mon_lock);
	/*
	 * auto: the patched libc when it is built in and runs, else the
	 * hooks library when preloaded. userfaultfd is opt-in (uffd): its
	 * registration stops VMA merging, which changes what the program's
	 * own mremap() does (doc/monitor.md). Only a build without the
	 * patched source, and a sanitizer, fall back to it in auto.
	 */
	if (mode_uses_patch(mode))
		any |= patch_active();
	if (mode != MRMGR_MONITOR_UFFD && mode != MRMGR_MONITOR_PATCH && !any)
		any |= !(herr = hooks_start());
	if ((mode == MRMGR_MONITOR_UFFD ||
	     (mode == MRMGR_MONITOR_AUTO && mrmgr__mon_auto_uffd())) && !any) {
		any |= !(uerr = mrmgr__uffd_start());
		if (!uerr && mode == MRMGR_MONITOR_AUTO && mrmgr__patch_start &&
		    mrmgr__patch_sanitizer && mrmgr__patch_sanitizer() &&
		    !warned_sanitizer_uffd) {
			warned_sanitizer_uffd = 1;
			/* Info, as other automatic fallbacks (ODP's): the
			 * program keeps caching, and a run under a sanitizer
			 * prints what it prints without one. */
			mrmgr__info("monitor (auto): a sanitizer is in the "
				    "process, so libc is not patched (its "
				    "allocator unmaps with raw system calls); "
				    "userfaultfd follows the memory instead, "
				    "with its limits: one-sided, no growth "
				    "headroom, and shmat(SHM_REMAP) and "
				    "MADV_GUARD_INSTALL over cached memory are "
				    "not followed (doc/monitor.md, \"What each "
				    "mode follows\")");
		}
	}
	if (!any && !warned_no_source) {
		warned_no_source = 1;
		mrmgr__warn("monitor (%s): no memory-event source works in this "
			    "process (libc patching: %s; userfaultfd: %s; "
			    "hooks: %s): nothing will "
			    "be cached, every get registers. Allow userfaultfd, "
			    "preload libmrmgr_hooks.so, or set "
			    "MRMGR_MONITOR=external if you report changes with "
			    "mrmgr_notify_unmap().",
			    mode_name(mode), patch_why(mode),
			    uerr ? strerror(uerr) : "not used",
			    herr == ENOENT ? "not loaded"
					   : herr ? strerror(herr) : "not used");
	}
	pthread_mutex_unlock(&mrmgr__mon_lock);
}

void mrmgr__mon_info_cache(const struct mrmgr__mon_cache *mc,
			   struct mrmgr_monitor_info *m)
{
	m->mode = mc->mode;
	m->fork_status = mc->fork_status;
	m->events = mc->events;
	m->invalidations = mc->invalidations;
	m->overflows = mc->overflows;
	m->unwatched = mc->unwatched;
	m->fork_purges = mc->fork_purges;
	m->unwatched_causes = mc->unwatched_causes;
	m->unwatched_error = mc->unwatched_error;
	m->window_uncached = mc->window_uncached;
}

/* The process-wide part, for the mode already in *mi. */
void mrmgr__mon_info(struct mrmgr_monitor_info *mi)
{
	struct mrmgr_monitor_info m = *mi;
	int ustate, hstate, uerr, herr, perr, patch;

	m.changes = __atomic_load_n(&mrmgr__mon_change_count, __ATOMIC_RELAXED);
	m.retries = __atomic_load_n(&mrmgr__mon_retries, __ATOMIC_RELAXED);

	pthread_mutex_lock(&mrmgr__mon_lock);
	ustate = mrmgr__uffd_state(&uerr, &m.uffd_flags, &m.uffd_features);
	hstate = H.state;
	herr = H.state == SRC_ACTIVE ? 0 : H.err;
	patch = mode_uses_patch(m.mode) && patch_active();
	(void)mrmgr__patch_state(&perr);
	m.patch_targets = mrmgr__patch_targets();
	m.patch_chained = mrmgr__patch_chained();
	m.patch_overwrites = mrmgr__patch_overwrites();
	if (mode_uses_patch(m.mode) && patch_started())
		mrmgr__follow_info(&m);
	if (mrmgr__vma_uses_query())
		m.uffd_flags |= MRMGR_MONITOR_UFFD_PROCMAP_QUERY;
	mrmgr__watch_stats(&m.watched_ranges, &m.watched_runs, &m.watch_budget);
	pthread_mutex_unlock(&mrmgr__mon_lock);

	m.uffd_error = uerr;
	m.hooks_error = herr;
	m.patch_error = perr;
	/* What watch.c relies on for this mode: auto takes the patched libc,
	 * else the hooks, and userfaultfd only in a build without the patch
	 * source or under a sanitizer, when the hooks do not report both
	 * sides. */
	if (patch)
		m.sources |= MRMGR_MONITOR_SRC_PATCH;
	if (hstate == SRC_ACTIVE && !patch && m.mode != MRMGR_MONITOR_PATCH &&
	    (m.mode == MRMGR_MONITOR_AUTO || m.mode == MRMGR_MONITOR_HOOKS))
		m.sources |= MRMGR_MONITOR_SRC_HOOKS;
	if (ustate == SRC_ACTIVE &&
	    (m.mode == MRMGR_MONITOR_UFFD ||
	     (m.mode == MRMGR_MONITOR_AUTO && mrmgr__mon_auto_uffd() &&
	      !(hstate == SRC_ACTIVE && mrmgr_hooks_bind))))
		m.sources |= MRMGR_MONITOR_SRC_UFFD;
	if (m.mode == MRMGR_MONITOR_EXTERNAL)
		m.sources |= MRMGR_MONITOR_SRC_EXTERNAL;
	m.uffd_events = __atomic_load_n(&mrmgr__mon_uffd_events, __ATOMIC_RELAXED);
	m.notify_events = __atomic_load_n(&mrmgr__mon_notify_events,
					  __ATOMIC_RELAXED);
	*mi = m;
}
