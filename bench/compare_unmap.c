/*
 * bench/compare: what unmapping costs with a cache's invalidation source
 * installed. Every figure comes from a fresh process (this program
 * re-executed with --unmap-child): UCX's memory hooks, once installed,
 * stay for the life of the process and would tax whatever ran next.
 *
 * Per process: `live` regions registered first (64 KiB each, 128 KiB
 * apart, in a mapping of their own), then `iters` pairs of mmap+munmap of
 * 64 KiB anonymous memory the cache never saw, then `iters` rounds of
 * mmap, get+put of the whole new mapping, munmap. Each pair or round is
 * timed on its own and the median reported (robust to preemption). A cache whose event
 * source does not cover munmap (libmrmgr without a memory-event monitor)
 * is told with its invalidate call before each munmap, as its contract
 * asks of the caller; the report names the source in force.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare.h"

#define LEN (64 * KiB)
#define LIVE_STRIDE (128 * KiB)

static void *raw_mmap(size_t len)
{
	long p = syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == -1 ? MAP_FAILED : (void *)p;
}

static void *libc_mmap(size_t len)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

/* The median ns of iters rounds (after a tenth more as warm-up). */
static double pairs(int raw, const struct drv_ops *ops, struct drv *d,
		    int with_get, uint64_t iters)
{
	uint64_t warm = iters / 10;
	double *t = calloc(iters, sizeof(*t)), m;

	if (!t)
		exit(9);
	for (uint64_t i = 0; i < iters + warm; i++) {
		double t0 = now_ns();
		void *p;

		p = raw ? raw_mmap(LEN) : libc_mmap(LEN);
		if (p == MAP_FAILED)
			exit(3);
		if (with_get) {
			void *h = ops->get(d, p, LEN);

			if (!h)
				exit(4);
			ops->put(d, h);
		}
		if (ops && ops->invalidate)
			ops->invalidate(d, p, LEN);
		if (raw)
			syscall(SYS_munmap, p, LEN);
		else
			munmap(p, LEN);
		if (i >= warm)
			t[i - warm] = now_ns() - t0;
	}
	qsort(t, iters, sizeof(*t), cmp_double);
	m = t[iters / 2];
	free(t);
	return m;
}

int unmap_child(const char *impl, uint64_t live, uint64_t iters, int fd)
{
	static const struct cost_model zero = { 0, 0 };
	struct unmap_result res;
	const struct drv_ops *ops = NULL;
	struct drv *d = NULL;
	char *area = NULL;

	memset(&res, 0, sizeof(res));
	if (!strcmp(impl, "libmrmgr"))
		ops = &mrmgr_drv;
#ifdef HAVE_UCX
	else if (!strcmp(impl, "ucx"))
		ops = &ucx_drv;
#endif
	else if (strcmp(impl, "raw") && strcmp(impl, "libc"))
		return 2;
	if (ops) {
		if (ops->open(&d, 4 * (live + iters) + 64, (uint64_t)1 << 50,
			      &zero))
			return 5;
		if (live) {
			area = mmap(NULL, live * LIVE_STRIDE,
				    PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				    -1, 0);
			if (area == MAP_FAILED)
				return 6;
			for (uint64_t i = 0; i < live; i++) {
				void *h = ops->get(d, area + i * LIVE_STRIDE, LEN);

				if (!h)
					return 7;
				ops->put(d, h);
			}
		}
		snprintf(res.source, sizeof(res.source), "%s",
			 ops->event_source(d));
	}
	res.ns_pair = pairs(!strcmp(impl, "raw"), ops, d, 0, iters);
	if (ops)
		res.ns_get_pair = pairs(0, ops, d, 1, iters);
	if (write(fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		return 8;
	/* No teardown: the process ends here, and a cache's teardown is
	 * not what is measured. */
	return 0;
}

int unmap_run(const char *self, const char *impl, uint64_t live,
	      uint64_t iters, struct unmap_result *res)
{
	int fds[2], status;
	pid_t pid;
	ssize_t n;

	if (pipe(fds))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		char a_live[32], a_iters[32], a_fd[16];

		close(fds[0]);
		snprintf(a_live, sizeof(a_live), "%llu", (unsigned long long)live);
		snprintf(a_iters, sizeof(a_iters), "%llu",
			 (unsigned long long)iters);
		snprintf(a_fd, sizeof(a_fd), "%d", fds[1]);
		execl(self, self, "--unmap-child", impl, a_live, a_iters, a_fd,
		      (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	n = read(fds[0], res, sizeof(*res));
	close(fds[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0 || n != (ssize_t)sizeof(*res)) {
		fprintf(stderr, "compare: unmap child %s exited with %d\n", impl,
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return -1;
	}
	return 0;
}
