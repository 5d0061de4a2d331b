/*
 * The userfaultfd source's delivery self-test, run before the source is
 * used: map three pages, register them, and have a helper thread discard
 * one (REMOVE), move one (REMAP) and unmap the rest (UNMAP) while this
 * thread reads the descriptor with a timeout. If an event does not come,
 * the descriptor is closed (which releases the helper from whichever
 * wait it is in) and the source is not used.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "compat.h"
#include "monitor.h"
#include "uffd.h"

#define SELFTEST_TIMEOUT_MS 2000

struct selftest {
	char *base;       /* 3 pages, registered */
	char *dest;       /* 1 page the middle one moves onto */
	long page;
};

static void *selftest_helper(void *arg)
{
	struct selftest *t = arg;

	/* Each call waits until the event is read. */
	(void)madvise(t->base, (size_t)t->page, MADV_DONTNEED);
	(void)mremap(t->base + t->page, (size_t)t->page, (size_t)t->page,
		     MREMAP_MAYMOVE | MREMAP_FIXED, t->dest);
	(void)munmap(t->base, 3 * (size_t)t->page);
	return NULL;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Read events until REMOVE, REMAP and UNMAP of the test pages came. */
static int selftest_read(int fd, const struct selftest *t)
{
	uint64_t b = (uintptr_t)t->base;
	unsigned int seen = 0;
	struct timespec t0;
	long timeout = (mrmgr__mon_test_flags & MRMGR__MON_TEST_DROP_EVENTS)
			       ? 100 : SELFTEST_TIMEOUT_MS;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (seen != 7) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct uffd_msg m;
		long left = timeout - ms_since(&t0);
		ssize_t r;

		if (left <= 0)
			return ETIMEDOUT;
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
			return errno;
		if (mrmgr__mon_test_flags & MRMGR__MON_TEST_DROP_EVENTS)
			continue; /* pretend nothing arrives */
		r = read(fd, &m, sizeof(m));
		if (r != (ssize_t)sizeof(m))
			continue;
		if (m.event == UFFD_EVENT_REMOVE && m.arg.remove.start == b)
			seen |= 1;
		else if (m.event == UFFD_EVENT_REMAP &&
			 m.arg.remap.from == b + (uint64_t)t->page)
			seen |= 2;
		else if (m.event == UFFD_EVENT_UNMAP &&
			 m.arg.remove.start <= b && m.arg.remove.end > b)
			seen |= 4;
	}
	return 0;
}

int mrmgr__uffd_selftest(int fd)
{
	struct selftest t;
	struct uffdio_register reg;
	pthread_t helper;
	int err;

	t.page = sysconf(_SC_PAGESIZE);
	t.base = mmap(NULL, 3 * (size_t)t.page, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	t.dest = mmap(NULL, (size_t)t.page, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t.base == MAP_FAILED || t.dest == MAP_FAILED) {
		err = ENOMEM;
		goto out_unmap;
	}
	memset(t.base, 1, 3 * (size_t)t.page);
	memset(&reg, 0, sizeof(reg));
	reg.range.start = (uintptr_t)t.base;
	reg.range.len = 3 * (uint64_t)t.page;
	reg.mode = UFFDIO_REGISTER_MODE_WP;
	if (ioctl(fd, UFFDIO_REGISTER, &reg)) {
		err = errno;
		goto out_unmap;
	}
	/* Touching a registered page must not fault to us. */
	t.base[0] = 2;
	err = mrmgr__uffd_thread(&helper, selftest_helper, &t);
	if (err) {
		struct uffdio_range r = { reg.range.start, reg.range.len };

		(void)ioctl(fd, UFFDIO_UNREGISTER, &r);
		goto out_unmap;
	}
	err = selftest_read(fd, &t);
	if (err) {
		/* Closing releases the helper from whichever wait it is in;
		 * it then finishes with nothing registered. */
		close(fd);
	}
	pthread_join(helper, NULL);
	if (!err) {
		/* The moved page took its registration along: drop it, or
		 * unmapping it would wait for a reader that is not there. */
		struct uffdio_range r = { (uintptr_t)t.dest, (uint64_t)t.page };

		(void)ioctl(fd, UFFDIO_UNREGISTER, &r);
	}
	munmap(t.dest, (size_t)t.page);
	return err ? -err : 0;

out_unmap:
	if (t.base != MAP_FAILED)
		munmap(t.base, 3 * (size_t)t.page);
	if (t.dest != MAP_FAILED)
		munmap(t.dest, (size_t)t.page);
	return -err;
}
