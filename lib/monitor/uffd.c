/*
 * The userfaultfd source: the kernel reports every unmap (munmap, mmap
 * MAP_FIXED over, mremap shrink, brk shrink, glibc's internal munmap),
 * discard (madvise DONTNEED/FREE/REMOVE) and move (mremap) of a
 * registered range, whoever makes it: libc, raw syscall(), a library
 * built statically against its own libc.
 *
 * Registration mode: write-protect, with nothing ever write-protected.
 * A WP registration only makes faults on pages carrying the uffd-wp bit,
 * which only UFFDIO_WRITEPROTECT sets (and UFFD_FEATURE_WP_ASYNC /
 * WP_UNPOPULATED, which are never requested). Missing-page mode would
 * make first touches and refaults after MADV_DONTNEED wait for this
 * process's reader; minor mode would do the same for shmem. Measured on
 * 6.1 and 6.18: reads, writes, MADV_POPULATE_WRITE and vmsplice() on a
 * WP-registered anonymous range never fault to userspace.
 *
 * The reader thread: polls the descriptor; when it is readable it sets
 * the queue's busy bit, read()s everything (non-blocking, until EAGAIN),
 * pushes every range, clears the bit (see queue.c for why).
 * While the kernel waits for that read(), the unmapping thread is
 * blocked, holding whatever it holds (a cache lock if a cache frees
 * memory under it, a malloc arena lock when free() trims the heap), so
 * the reader takes no lock, calls no allocator, logs nothing and never
 * unmaps anything: it only polls, reads and does atomic stores.
 *
 * Start-up: the delivery self-test (uffd_selftest.c); if it fails, the
 * source is not used.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "compat.h"
#include "log.h"
#include "monitor.h"
#include "procfs.h"
#include "uffd.h"

#define WANT_FEATURES                                                     \
	(UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |            \
	 UFFD_FEATURE_EVENT_REMAP)
#define READ_BATCH 32
#define THREAD_STACK (256 * 1024)
#define GUARD 4096

/*
 * The stack of the reader (and, before it, of the self-test helper):
 * mapped here once and never unmapped, so its address is never one the
 * program just freed; a stack the program passes in is never madvise()d
 * by glibc at thread exit; and it is never watched
 * (mrmgr__uffd_internal()). Its PROT_NONE guard below makes it a VMA of
 * its own, which never merges with memory of the program's whose whole
 * VMA may be registered. Not in .bss: tools that scan the data segment
 * (LeakSanitizer) fault on a PROT_NONE page there.
 */
static char *stack_area;
#define thread_stack (stack_area + GUARD)
static struct {
	int state;            /* enum mrmgr__src_state */
	int err;
	int fd;
	int stop_fd;          /* eventfd that ends the reader */
	uint32_t flags;       /* enum mrmgr_monitor_uffd_flags */
	uint64_t features;
	pthread_t reader;
	int reader_running;
	int dead;             /* the reader gave up (never expected) */
	pid_t pid;
	struct mrmgr__retry retry;
} U = { .fd = -1, .stop_fd = -1 };

unsigned int mrmgr__mon_test_flags;

/* ------------------------------------------------------------ opening */

static int open_uffd(uint32_t *flags)
{
	int fd, err, dev;

	*flags = 0;
	if (mrmgr__mon_test_flags & MRMGR__MON_TEST_UFFD_EPERM)
		return -EPERM;
#ifdef SYS_userfaultfd
	fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0)
		return fd;
	err = errno;
	/* vm.unprivileged_userfaultfd=0 and no CAP_SYS_PTRACE: Linux 5.11
	 * still allows user-mode-only descriptors, which see every event
	 * (only faults taken in the kernel differ, and we take none). */
	if (err == EPERM) {
		fd = (int)syscall(SYS_userfaultfd,
				  O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
		if (fd >= 0) {
			*flags |= MRMGR_MONITOR_UFFD_USER_MODE_ONLY;
			return fd;
		}
	}
#else
	err = ENOSYS;
#endif
	/* Linux 6.1: /dev/userfaultfd, where the system call is filtered
	 * (seccomp) but the device was made accessible. */
	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev >= 0) {
		fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
		close(dev);
		if (fd >= 0) {
			*flags |= MRMGR_MONITOR_UFFD_DEVICE;
			return fd;
		}
	}
	return -err;
}

/* Negotiate the API. A descriptor takes UFFDIO_API once, so the supported
 * features are asked on a first one and the real one asks for ours. */
static int open_negotiated(uint32_t *flags, uint64_t *features)
{
	struct uffdio_api api = { .api = UFFD_API, .features = 0 };
	uint64_t want = WANT_FEATURES;
	int fd = open_uffd(flags);

	if (fd < 0)
		return fd;
	if (ioctl(fd, UFFDIO_API, &api)) {
		int err = errno;

		close(fd);
		return -err;
	}
	close(fd);
	if ((api.features & want) != want)
		return -ENOTSUP;
	/* Write-protect registration of anonymous memory (Linux 5.7). */
	if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
		return -ENOTSUP;
	/* Huge pages and shmem take WP registration with this (5.19). */
	want |= api.features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM;

	fd = open_uffd(flags);
	if (fd < 0)
		return fd;
	api.api = UFFD_API;
	api.features = want;
	if (ioctl(fd, UFFDIO_API, &api)) {
		int err = errno;

		close(fd);
		return -err;
	}
	*features = want;
	return fd;
}

/* ------------------------------------------------------------ registering */

int mrmgr__uffd_internal(uint64_t start, uint64_t last)
{
	uint64_t s = (uintptr_t)stack_area;

	return stack_area && start < s + GUARD + THREAD_STACK + GUARD &&
	       last >= s;
}

/* Threads of ours run on thread_stack; fall back to glibc's on EINVAL
 * (static TLS too large for it). */
int mrmgr__uffd_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	int err;

	if (!stack_area) {
		void *p = mmap(NULL, GUARD + THREAD_STACK + GUARD,
			       PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);

		if (p == MAP_FAILED)
			return errno;
		stack_area = p;
		(void)mprotect(stack_area, GUARD, PROT_NONE);
		(void)mprotect(thread_stack + THREAD_STACK, GUARD, PROT_NONE);
	}

	if (pthread_attr_init(&a))
		return pthread_create(t, NULL, fn, arg);
	err = pthread_attr_setstack(&a, thread_stack, THREAD_STACK);
	if (!err)
		err = pthread_create(t, &a, fn, arg);
	pthread_attr_destroy(&a);
	if (err == EINVAL)
		err = pthread_create(t, NULL, fn, arg);
	return err;
}

int mrmgr__uffd_register(uint64_t start, uint64_t last)
{
	struct uffdio_register reg;

	if (__atomic_load_n(&U.dead, __ATOMIC_SEQ_CST))
		return ESHUTDOWN;
	memset(&reg, 0, sizeof(reg));
	reg.range.start = start;
	reg.range.len = last - start + 1;
	reg.mode = UFFDIO_REGISTER_MODE_WP;
	if (U.fd < 0)
		return EBADF;
	return ioctl(U.fd, UFFDIO_REGISTER, &reg) ? errno : 0;
}

/*
 * Whether the mapping holding [start, last] (inside one VMA) is registered:
 * 0, ENOENT when it is not (or is not mapped), or another errno (EAGAIN
 * while the kernel delivers an event). Maps show no registration, so the
 * kernel is asked with a write-protect clear: it refuses a VMA without
 * userfaultfd write-protect tracking, and clearing protection nobody set
 * changes nothing the program sees (a page may be mapped writable a fault
 * early, as the fault would have). One page: the cost of one PTE.
 */
int mrmgr__uffd_registered(uint64_t start, uint64_t last)
{
	struct uffdio_writeprotect wp;

	if (U.fd < 0)
		return EBADF;
	memset(&wp, 0, sizeof(wp));
	wp.range.start = start;
	wp.range.len = last - start + 1;
	wp.mode = 0;
	/*
	 * EAGAIN: some thread's unmap, discard or move of registered memory
	 * is being delivered (the kernel counts it from the change until
	 * that thread runs again after the reader read the event). Under
	 * load that is most of the time in a process that changes memory
	 * all the time (measured: most probes of the uffd torture), so wait
	 * for it a little: the reader takes no lock, and the thread only
	 * needs a CPU. Bounded; then the caller does not cache.
	 */
	for (int i = 0; i < 256; i++) {
		int err = ioctl(U.fd, UFFDIO_WRITEPROTECT, &wp) ? errno : 0;

		if (err != EAGAIN)
			return err;
		sched_yield();
	}
	return EAGAIN;
}

void mrmgr__uffd_unregister(uint64_t start, uint64_t last)
{
	struct uffdio_range r = { .start = start, .len = last - start + 1 };

	/* Fails harmlessly where the memory is gone or was never ours. */
	if (U.fd >= 0)
		(void)ioctl(U.fd, UFFDIO_UNREGISTER, &r);
}

/* ------------------------------------------------------------ reader */

static void handle(const struct uffd_msg *m)
{
	uint64_t s, e;

	switch (m->event) {
	case UFFD_EVENT_UNMAP:
	case UFFD_EVENT_REMOVE:
		s = m->arg.remove.start;
		e = m->arg.remove.end;
		break;
	case UFFD_EVENT_REMAP:
		/* The old range is gone; the new one was unmapped first
		 * (its own UNMAP event) if it was watched. */
		s = m->arg.remap.from;
		e = m->arg.remap.from + m->arg.remap.len;
		break;
	case UFFD_EVENT_PAGEFAULT: {
		/* Nothing is ever write-protected, so this cannot happen;
		 * should it, never leave a thread stuck. */
		struct uffdio_range r = {
			.start = m->arg.pagefault.address & ~(uint64_t)4095,
			.len = 4096,
		};
		(void)ioctl(U.fd, UFFDIO_WAKE, &r);
		return;
	}
	default:
		return;
	}
	if (e > s) {
		__atomic_fetch_add(&mrmgr__mon_uffd_events, 1, __ATOMIC_RELAXED);
		mrmgr__mon_push(s, e - 1);
	}
}

static void *reader_main(void *arg)
{
	struct pollfd pfd[2];

	(void)arg;
	pfd[0].fd = U.fd;
	pfd[0].events = POLLIN;
	pfd[1].fd = U.stop_fd;
	pfd[1].events = POLLIN;
	for (;;) {
		struct uffd_msg msg[READ_BATCH];
		int n = poll(pfd, 2, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || (pfd[1].revents & POLLIN) ||
		    (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL))) {
			if (!(pfd[1].revents & POLLIN)) {
				/* Cannot happen; if it does, nothing watches
				 * from now on: say so, and flush every cache. */
				__atomic_store_n(&U.dead, 1, __ATOMIC_SEQ_CST);
				mrmgr__mon_push(0, UINT64_MAX);
			}
			/*
			 * Close it here, before this thread exits: glibc's
			 * thread exit frees and madvise()s memory, which could
			 * be watched, and this thread would wait for itself.
			 * Closing drops every registration and releases any
			 * thread the kernel still holds for an event.
			 */
			close(U.fd);
			break;
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		__atomic_fetch_or(&mrmgr__mon_word, 1, __ATOMIC_SEQ_CST);
		for (;;) {
			ssize_t r = read(U.fd, msg, sizeof(msg));

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break; /* EAGAIN: all read */
			for (size_t i = 0; i < (size_t)r / sizeof(msg[0]); i++)
				handle(&msg[i]);
		}
		__atomic_fetch_and(&mrmgr__mon_word, ~(uint64_t)1,
				   __ATOMIC_SEQ_CST);
	}
	return NULL;
}

/* ------------------------------------------------------------ start */

static int start_reader(void)
{
	sigset_t all, old;
	int err;

	U.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (U.stop_fd < 0)
		return errno;
	/* The reader inherits a full mask: no signal handler of the
	 * program ever runs on it (handlers may take locks). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = mrmgr__uffd_thread(&U.reader, reader_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		close(U.stop_fd);
		U.stop_fd = -1;
		return err;
	}
	pthread_setname_np(U.reader, "mrmgr-uffd");
	U.reader_running = 1;
	return 0;
}

/* The reader gave up: the source is off from now on (mon lock held). */
static void check_dead(void)
{
	if (__atomic_load_n(&U.dead, __ATOMIC_SEQ_CST) && U.state == SRC_ACTIVE) {
		U.state = SRC_FAILED;
		U.err = EIO;
		mrmgr__err("monitor: the userfaultfd reader stopped; nothing is "
			   "cached from now on");
	}
}

/*
 * valgrind runs one thread at a time: a thread the kernel holds in
 * munmap() for the reader keeps valgrind's lock, the reader never runs,
 * and the process hangs (the self-test's first madvise() already). Its
 * preload library is how it shows.
 */
static int under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "vgpreload");
}

int mrmgr__uffd_start(int asked)
{
	int fd, ret;

	check_dead();
	if (U.state != SRC_UNTRIED &&
	    !(U.state == SRC_FAILED && mrmgr__retry_now(&U.retry, U.err, asked)))
		return U.state == SRC_ACTIVE ? 0 : U.err;
	U.pid = mrmgr__getpid();
	fd = under_valgrind() ? -ENOTSUP : open_negotiated(&U.flags, &U.features);
	if (fd >= 0) {
		ret = mrmgr__uffd_selftest(fd);
		if (ret < 0) {
			fd = ret; /* selftest closed it on timeout */
		} else {
			U.fd = fd; /* before the reader starts: it polls it */
			if ((ret = -start_reader()) < 0) {
				close(fd);
				U.fd = -1;
				fd = ret;
			}
		}
	}
	if (fd < 0) {
		U.state = SRC_FAILED;
		U.err = -fd;
		U.features = 0;
		/* Out of descriptors or memory now is not forever. */
		mrmgr__retry_failed(&U.retry, U.err);
		mrmgr__info("monitor: userfaultfd unavailable: %s%s", strerror(U.err),
			    U.err == ETIMEDOUT ? " (delivery self-test got no event)"
			    : under_valgrind() ? " (under valgrind, whose serialised "
						 "threads would deadlock with the reader)"
						 : "");
		return U.err;
	}
	U.state = SRC_ACTIVE;
	mrmgr__info("monitor: userfaultfd active (features %#llx%s%s)",
		    (unsigned long long)U.features,
		    U.flags & MRMGR_MONITOR_UFFD_USER_MODE_ONLY ? ", user-mode only" : "",
		    U.flags & MRMGR_MONITOR_UFFD_DEVICE ? ", via /dev/userfaultfd" : "");
	return 0;
}

int mrmgr__uffd_state(int *err, uint32_t *flags, uint64_t *features)
{
	check_dead();
	if (err)
		*err = U.state == SRC_FAILED ? U.err : 0;
	if (flags)
		*flags = U.flags;
	if (features)
		*features = U.features;
	return U.state;
}

void mrmgr__uffd_fork_child(void)
{
	/*
	 * The child's mappings lost the registration at fork (no
	 * UFFD_FEATURE_EVENT_FORK), the reader thread does not exist here,
	 * and the inherited descriptor still describes the parent's memory:
	 * close it (never UNREGISTER through it: that would act on the
	 * parent). A later get starts a source of the child's own.
	 */
	if (U.fd >= 0)
		close(U.fd);
	if (U.stop_fd >= 0)
		close(U.stop_fd);
	memset(&U, 0, sizeof(U));
	U.fd = U.stop_fd = -1;
}

/*
 * At exit or dlclose: stop the reader, then close the descriptor, which
 * drops every registration and releases any thread the kernel still
 * holds for an event nobody would read.
 */
__attribute__((destructor)) static void uffd_stop(void)
{
	uint64_t one = 1;

	if (!U.reader_running || U.pid != mrmgr__getpid())
		return;
	/* Under the monitor lock: no thread registers through the number
	 * once it is closed (and maybe reused). */
	pthread_mutex_lock(&mrmgr__mon_lock);
	/* The reader closes the descriptor on its way out. */
	if (write(U.stop_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		pthread_join(U.reader, NULL);
	else
		close(U.fd);
	U.reader_running = 0;
	close(U.stop_fd);
	U.fd = U.stop_fd = -1;
	U.state = SRC_FAILED;
	U.err = ESHUTDOWN;
	__atomic_fetch_and(&mrmgr__mon_word, ~(uint64_t)1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&mrmgr__mon_lock);
}
