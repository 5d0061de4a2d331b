/*
 * The zero-cost miss churn of bench/compare alone, for profilers: 10,000
 * buffers of 64 KiB, a limit of 1,000 regions, uniform random get+put on
 * the bench device at zero registration cost, in the calling process (no
 * children; callgrind, perf and strace see everything). Prints ns per
 * miss. The timed loop is churn_loop() (callgrind --toggle-collect).
 *
 *   build/bench/misschurn [OPS] [text|thread|threads|big[N]]
 *
 * "text" makes ioctl(PROCMAP_QUERY) fail with ENOTTY (a seccomp filter),
 * as on kernels before 6.11: the library reads /proc/self/maps instead.
 * "threads" first runs two threads that get and put once each and exit,
 * as compare's hit section does before its miss section (make bench's
 * order): the process is threaded and two more stripes were given.
 * "thread" starts and joins one thread that calls nothing of libmrmgr:
 * the process is threaded (glibc's locks are bus-locked from then on,
 * as in any UCX process), and no stripe was given. bench/misschurn-ab.sh
 * sets these apart, run against run. "big" (or bigN) first fills a
 * cache of its own with 100,000 (N) regions, destroys it and unmaps its
 * memory, as compare's hit section does with its largest rows: whether
 * what that leaves behind (the heap, the filter's bits, the pools) slows
 * later misses (2026-12-03, 300 pairs: 0.996, it does not).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <mrmgr/mrmgr.h>

#include "compare.h"

#define BUFFERS 10000
#define LIMIT 1000
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ)

/* PROCMAP_QUERY as linux/fs.h (6.11) defines it: 104-byte argument. */
#define MAPS_QUERY_CMD _IOWR('f', 17, char[104])

/* The kernel of before 6.11, for the maps reader: ENOTTY for the query. */
static int force_maps_text(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MAPS_QUERY_CMD, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOTTY),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { (unsigned short)(sizeof(f) / sizeof(f[0])), f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return errno;
	return 0;
}

struct once_arg {
	mrmgr_cache_t *c;
	char *p;
	pthread_barrier_t *bar;
};

/* One get and put from a thread of its own, which then exits. */
static void *get_once(void *arg)
{
	struct once_arg *a = arg;
	mrmgr_region_t *reg;

	if (!mrmgr_get(a->c, a->p, REGION_LEN, ACCESS, &reg))
		mrmgr_put(reg);
	pthread_barrier_wait(a->bar); /* both alive: two stripes */
	return NULL;
}

/* Two such threads at once (so they take two stripes) on a cache of
 * their own, as compare's hit section has its own caches; then joined. */
static void threads_once(struct ibv_pd *pd, char *base)
{
	mrmgr_cache_t *c;
	struct once_arg a[2];
	pthread_barrier_t bar;
	pthread_t t[2];

	if (mrmgr_cache_create(pd, NULL, &c) ||
	    pthread_barrier_init(&bar, NULL, 2))
		exit(1);
	a[0] = (struct once_arg){ c, base, &bar };
	a[1] = (struct once_arg){ c, base + STRIDE, &bar };
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, get_once, &a[i]))
			exit(1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&bar);
	mrmgr_cache_destroy(c);
}

/* A cache of many regions, filled and destroyed, its memory unmapped:
 * what compare's hit section leaves behind (its 100,000-region rows). */
static void big_once(struct ibv_pd *pd, uint64_t n)
{
	size_t len = (size_t)n * STRIDE;
	char *area = mmap(NULL, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_regions = 2 * n + 64,
		.max_bytes = (uint64_t)1 << 50,
	};
	mrmgr_cache_t *c;

	if (area == MAP_FAILED || mrmgr_cache_create(pd, &ca, &c))
		exit(1);
	for (uint64_t i = 0; i < n; i++) {
		mrmgr_region_t *reg;

		if (mrmgr_get(c, area + i * STRIDE, REGION_LEN, ACCESS, &reg))
			exit(1);
		mrmgr_put(reg);
	}
	mrmgr_cache_destroy(c);
	munmap(area, len);
}

static void *idle(void *arg)
{
	return arg;
}

/* The process becomes threaded; libmrmgr sees nothing of it. */
static void thread_once(void)
{
	pthread_t t;

	if (pthread_create(&t, NULL, idle, NULL) || pthread_join(t, NULL))
		exit(1);
}

__attribute__((noinline)) static void churn_loop(mrmgr_cache_t *c, char *base,
						  uint64_t n, uint64_t *seed)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = rng_next(seed);
		mrmgr_region_t *reg;
		int ret = mrmgr_get(c, base + rng_below(r, BUFFERS) * STRIDE,
				    REGION_LEN, ACCESS, &reg);

		if (ret) {
			fprintf(stderr, "mrmgr_get: %s\n", strerror(ret));
			exit(1);
		}
		mrmgr_put(reg);
	}
}

/* This thread's CPU time, in ns. */
static double cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	static const struct cost_model zero = { 0, 0 };
	uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000;
	uint64_t seed = 42, regs0, regs, pages;
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_regions = LIMIT,
		.max_bytes = (uint64_t)1 << 50,
	};
	char *base = mmap(NULL, (size_t)BUFFERS * STRIDE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct ibv_pd *pd;
	struct mrmgr_monitor_info mi;
	mrmgr_cache_t *c;
	double t0, t1, c0, c1;
	int ret;

	if (base == MAP_FAILED)
		return 1;
	if (argc > 2 && !strcmp(argv[2], "text") && (ret = force_maps_text())) {
		fprintf(stderr, "seccomp: %s\n", strerror(ret));
		return 1;
	}
	if ((ret = bdev_open(&zero, &pd))) {
		fprintf(stderr, "open: %s\n", strerror(ret));
		return 1;
	}
	if (argc > 2 && !strncmp(argv[2], "big", 3))
		big_once(pd, strtoull(argv[2] + 3, NULL, 10) ?: 100000);
	if ((ret = mrmgr_cache_create(pd, &ca, &c))) {
		fprintf(stderr, "open: %s\n", strerror(ret));
		return 1;
	}
	if (argc > 2 && !strcmp(argv[2], "threads"))
		threads_once(pd, base);
	if (argc > 2 && !strcmp(argv[2], "thread"))
		thread_once();
	churn_loop(c, base, 3 * LIMIT, &seed); /* fill */
	bdev_counts(pd, &regs0, &pages);
	t0 = now_ns();
	c0 = cpu_ns();
	churn_loop(c, base, ops, &seed);
	c1 = cpu_ns();
	t1 = now_ns();
	bdev_counts(pd, &regs, &pages);
	regs -= regs0;
	/* unwatched: gets the monitor could not vouch for, never cached
	 * (tests/perf/check-costs.sh wants 0: a miss that is really a miss) */
	if (mrmgr_cache_query_monitor(c, &mi, sizeof(mi)))
		mi.unwatched = UINT64_MAX;
	/* The CPU time too: on a shared machine, the wall clock also counts
	 * the time others ran instead of this thread. */
	printf("%llu ops, %llu misses, %.1f ns per miss, %llu unwatched, "
	       "%.1f CPU-ns per miss\n",
	       (unsigned long long)ops, (unsigned long long)regs,
	       regs ? (t1 - t0) / (double)regs : 0.0,
	       (unsigned long long)mi.unwatched,
	       regs ? (c1 - c0) / (double)regs : 0.0);
	mrmgr_cache_destroy(c);
	bdev_close(pd);
	munmap(base, (size_t)BUFFERS * STRIDE);
	return 0;
}
