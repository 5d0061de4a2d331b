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
#include <unistd.h>

#include "cache.h"
#include "hooks_abi.h"
#include "log.h"
#include "monitor.h"
#include "patch.h"

pthread_mutex_t mrmgr__mon_lock = PTHREAD_MUTEX_INITIALIZER;

/* Defined by libmrmgr_hooks.so when it is in the global scope. */
extern unsigned int mrmgr_hooks_info(void)
	__attribute__((weak, visibility("default")));

static struct {
	int state; /* enum mrmgr__src_state */
	int err;
	pid_t pid;
} H;

static int warned_no_source;

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

	if (H.state != SRC_UNTRIED && H.pid == getpid())
		return H.state == SRC_ACTIVE ? 0 : H.err;
	H.pid = getpid();
	if (!mrmgr_hooks_info) {
		H.state = SRC_FAILED;
		H.err = ENOENT;
		return H.err;
	}
	info = mrmgr_hooks_info();
	H.err = !(info & MRMGR__HOOKS_READY) ? ENOSYS : hooks_selftest(info);
	H.state = H.err ? SRC_FAILED : SRC_ACTIVE;
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
	hooks_start();
	if (err)
		*err = H.state == SRC_ACTIVE ? 0 : H.err;
	return H.state;
}

/* ------------------------------------------------------------ patch */

static int mode_uses_hooks(uint32_t m)
{
	return m == MRMGR_MONITOR_AUTO || m == MRMGR_MONITOR_HOOKS;
}

static int mode_uses_patch(uint32_t m)
{
	return m == MRMGR_MONITOR_AUTO || m == MRMGR_MONITOR_PATCH;
}

/*
 * Whether an in-process source vouches for memory of this kind (-1: any
 * kind) in a cache of this mode. Both see this process's calls on its
 * private memory, not what happens to shared memory elsewhere. The patch
 * source vouches for anonymous memory only: a private file mapping's
 * pages not yet copied on write are the file's, which a truncation
 * elsewhere replaces with no call here. In auto mode it vouches only
 * where userfaultfd is not running: a range userfaultfd is running but
 * could not watch (a VMA that changed while it was being registered, the
 * budget) would otherwise be cached with raw syscall() blind to it
 * (test_monitor_torture found that).
 */
int mrmgr__mon_inproc_covers(uint32_t mode, int kind)
{
	int any = kind < 0;

	if (mode_uses_patch(mode) && mrmgr__patch_start() == 0 &&
	    (mode == MRMGR_MONITOR_PATCH ||
	     mrmgr__uffd_state(NULL, NULL, NULL) != SRC_ACTIVE) &&
	    (any || kind == MRMGR__VMA_ANON_PRIVATE))
		return 1;
	return mode_uses_hooks(mode) && mrmgr__hooks_state(NULL) == SRC_ACTIVE &&
	       (any || kind == MRMGR__VMA_ANON_PRIVATE ||
		kind == MRMGR__VMA_FILE_PRIVATE);
}

/* ------------------------------------------------------------ caches */

static int fork_status_of(const struct mrmgr_cache *c)
{
	/* A device that holds pages with plain references, as pre-5.9
	 * kernels pinned them (the simulated HCA does): a fork leaves the
	 * parent's registrations stale. */
	if (c->caps.cap_flags & MRMGR_DEVICE_CAP_PLAIN_PINS)
		return -1;
	return (int)ibv_is_fork_initialized();
}

void mrmgr__mon_cache_init(struct mrmgr_cache *c)
{
	uint32_t mode = c->cfg.monitor;
	int uerr = 0, herr = 0, perr = 0, any = 0;

	memset(&c->mon, 0, sizeof(c->mon));
	c->mon.mode = mode;
	c->mon.fork_status = fork_status_of(c);
	mrmgr__mon_queue_attach(&c->mon, &c->mon_seen);
	mrmgr__fork_track(c);

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
	if (c->cfg.flags & MRMGR_CACHE_DISABLE)
		return;
	pthread_mutex_lock(&mrmgr__mon_lock);
	if (mode_uses_patch(mode))
		any |= !(perr = mrmgr__patch_start());
	if (mode == MRMGR_MONITOR_AUTO || mode == MRMGR_MONITOR_UFFD)
		any |= !(uerr = mrmgr__uffd_start());
	if (mode_uses_hooks(mode))
		any |= !(herr = hooks_start());
	if (!any && !warned_no_source) {
		warned_no_source = 1;
		mrmgr__warn("monitor (%s): no memory-event source works in this "
			    "process (libc patching: %s; userfaultfd: %s; "
			    "hooks: %s): nothing will "
			    "be cached, every get registers. Allow userfaultfd, "
			    "preload libmrmgr_hooks.so, or set "
			    "MRMGR_MONITOR=external if you report changes with "
			    "mrmgr_notify_unmap().",
			    mode_name(mode),
			    perr ? strerror(perr) : "not used",
			    uerr ? strerror(uerr) : "not used",
			    herr == ENOENT ? "not loaded"
					   : herr ? strerror(herr) : "not used");
	}
	pthread_mutex_unlock(&mrmgr__mon_lock);
}

void mrmgr__mon_cache_fini(struct mrmgr_cache *c)
{
	mrmgr__fork_untrack(c);
}

MRMGR_EXPORT int mrmgr_cache_query_monitor(mrmgr_cache_t *c,
					   struct mrmgr_monitor_info *info,
					   size_t size)
{
	struct mrmgr_monitor_info m;
	int ustate, hstate, pstate, uerr, herr, perr;

	if (!c || !info || !size) {
		mrmgr__err("mrmgr_cache_query_monitor: %s",
			   !c ? "NULL cache" : !info ? "NULL info" : "size 0");
		return EINVAL;
	}
	memset(&m, 0, sizeof(m));
	pthread_mutex_lock(&c->lock);
	m.mode = c->mon.mode;
	m.fork_status = c->mon.fork_status;
	m.events = c->mon.events;
	m.invalidations = c->mon.invalidations;
	m.overflows = c->mon.overflows;
	m.unwatched = c->mon.unwatched;
	m.fork_purges = c->mon.fork_purges;
	pthread_mutex_unlock(&c->lock);

	pthread_mutex_lock(&mrmgr__mon_lock);
	ustate = mrmgr__uffd_state(&uerr, &m.uffd_flags, &m.uffd_features);
	hstate = H.state;
	herr = H.state == SRC_ACTIVE ? 0 : H.err;
	pstate = mrmgr__patch_state(&perr);
	m.patch_targets = mrmgr__patch_targets();
	if (mrmgr__vma_uses_query())
		m.uffd_flags |= MRMGR_MONITOR_UFFD_PROCMAP_QUERY;
	mrmgr__watch_stats(&m.watched_ranges, &m.watched_runs, &m.watch_budget);
	pthread_mutex_unlock(&mrmgr__mon_lock);

	m.uffd_error = uerr;
	m.hooks_error = herr;
	if (ustate == SRC_ACTIVE &&
	    (m.mode == MRMGR_MONITOR_AUTO || m.mode == MRMGR_MONITOR_UFFD))
		m.sources |= MRMGR_MONITOR_SRC_UFFD;
	if (hstate == SRC_ACTIVE &&
	    (m.mode == MRMGR_MONITOR_AUTO || m.mode == MRMGR_MONITOR_HOOKS))
		m.sources |= MRMGR_MONITOR_SRC_HOOKS;
	if (m.mode == MRMGR_MONITOR_EXTERNAL)
		m.sources |= MRMGR_MONITOR_SRC_EXTERNAL;
	if (pstate == SRC_ACTIVE && mode_uses_patch(m.mode))
		m.sources |= MRMGR_MONITOR_SRC_PATCH;
	m.patch_error = perr;
	m.uffd_events = __atomic_load_n(&mrmgr__mon_uffd_events, __ATOMIC_RELAXED);
	m.notify_events = __atomic_load_n(&mrmgr__mon_notify_events,
					  __ATOMIC_RELAXED);
	memcpy(info, &m, size < sizeof(m) ? size : sizeof(m));
	return 0;
}
