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
#include "procfs.h"
#include "source.h"
#include "vma.h"

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
 * tried again later, not given up for the life of the process: at once
 * when a cache is created (the program asks again), and at the first get
 * after a back-off that doubles from 100 ms to 12.8 s, at most
 * MAX_RETRIES times (a get in a process short of descriptors must not
 * pay a failed start each time). Other failures (refused by policy, no kernel
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

/* A cache being created asks again now when the cause was passing; a
 * get waits for the back-off. */
int mrmgr__retry_now(struct mrmgr__retry *r, int err, int asked)
{
	if (asked && mrmgr__retry_transient(err)) {
		r->at_ms = 0;
		__atomic_fetch_add(&mrmgr__mon_retries, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return mrmgr__retry_due(r);
}

uint64_t mrmgr__mon_retries;

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

static int hooks_start(int asked)
{
	unsigned int info;

	if (H.state != SRC_UNTRIED && H.pid == mrmgr__getpid() &&
	    !(H.state == SRC_FAILED && mrmgr__retry_now(&H.retry, H.err, asked)))
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
		hooks_start(0);
	if (err)
		*err = H.state == SRC_ACTIVE ? 0 : H.err;
	return H.state;
}

static int hooks_src_start(int asked)
{
	if (H.state != SRC_ACTIVE || H.pid != mrmgr__getpid())
		hooks_start(asked);
	return H.state == SRC_ACTIVE ? 0 : H.err;
}

static int hooks_src_active(void)
{
	return H.state == SRC_ACTIVE;
}

/* An older hooks library without mrmgr_hooks_bind() reports after the
 * call only. */
static int hooks_src_sides(void)
{
	return mrmgr_hooks_bind ? 2 : 1;
}

static void hooks_src_report(struct mrmgr_monitor_info *m, int listed)
{
	(void)listed;
	m->hooks_error = H.state == SRC_ACTIVE ? 0 : H.err;
}

static const char *hooks_src_why(int err, int listed)
{
	(void)listed;
	return err == ENOENT ? "not loaded" : err ? strerror(err) : "not used";
}

const struct mrmgr__mon_source mrmgr__src_hooks = {
	.name = "libmrmgr_hooks.so",
	.label = "hooks",
	.report_bit = MRMGR_MONITOR_SRC_HOOKS,
	.mem_kinds = MRMGR__SRC_KIND_HOST_VA,
	.vma_kinds = 1u << MRMGR__VMA_ANON_PRIVATE,
	.covers = MRMGR__SRC_SEES_CALLS,
	.start = hooks_src_start,
	.active = hooks_src_active,
	.sides = hooks_src_sides,
	.watch = mrmgr__watch_trusted,
	.report = hooks_src_report,
	.why_not = hooks_src_why,
};

/* ------------------------------------------------------------ caches */

void mrmgr__mon_subscribe(struct mrmgr__mon_cache *m, uint64_t *seen,
			  uint32_t mode, int32_t fork_status)
{
	memset(m, 0, sizeof(*m));
	m->mode = mode;
	m->mm = mrmgr__mon_mode_of(mode);
	m->fork_status = fork_status;
	mrmgr__mon_queue_attach(m, seen);
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

