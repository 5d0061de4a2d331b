/*
 * What the memory-event monitor costs: mmap/munmap pairs and discards
 * beside the same loop without the library, on memory the monitor watches
 * and memory it does not, with no cached region and with 100,000; an
 * munmap() and a free() of memory the cache holds and of memory it does
 * not; and a cache hit. One process per source (none, userfaultfd,
 * libmrmgr_hooks.so preloaded, libc patched, the default), each running
 * the same loops on the simulated HCA.
 *
 *   make -C build bench-monitor
 *   build/bench/monitor [--pairs N] [--regions N]
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define PAGE 4096
#define PAIR_LEN (64 * 1024)

static long pairs = 200000, nregions = 100000;

#define ROUNDS 7

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median of ROUNDS runs of expr, each with n = total / ROUNDS. */
#define MEDIAN(expr, total)                                              \
	({                                                               \
		double v_[ROUNDS];                                       \
		long each_ = (total) / ROUNDS > 0 ? (total) / ROUNDS : 1; \
		for (int r_ = 0; r_ < ROUNDS; r_++) {                    \
			long n = each_;                                  \
			v_[r_] = (expr);                                 \
		}                                                        \
		qsort(v_, ROUNDS, sizeof(v_[0]), cmp_double);            \
		v_[ROUNDS / 2];                                          \
	})

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/*
 * mmap + munmap of 64 KiB somewhere the kernel chooses (not watched),
 * through libc (interposed by the hooks when they are loaded) or through
 * raw syscall() (never interposed, no library code at all).
 */
static double bench_pairs(long n, int raw)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		void *p;

		if (raw) {
			p = (void *)syscall(SYS_mmap, NULL, PAIR_LEN,
					    PROT_READ | PROT_WRITE,
					    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED || syscall(SYS_munmap, p, PAIR_LEN))
				abort();
			continue;
		}
		p = mmap(NULL, PAIR_LEN, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED || munmap(p, PAIR_LEN))
			abort();
	}
	return (now_ns() - t0) / (double)n;
}

/* Medians of a and b, run alternately round by round (noise cancels). */
#define AB(expr_a, expr_b, total, ma, mb)                                \
	do {                                                             \
		double a_[ROUNDS], b_[ROUNDS];                           \
		long each_ = (total) / ROUNDS > 0 ? (total) / ROUNDS : 1; \
		for (int r_ = 0; r_ < ROUNDS; r_++) {                    \
			long n = each_;                                  \
			a_[r_] = (expr_a);                               \
			b_[r_] = (expr_b);                               \
		}                                                        \
		qsort(a_, ROUNDS, sizeof(a_[0]), cmp_double);            \
		qsort(b_, ROUNDS, sizeof(b_[0]), cmp_double);            \
		*(ma) = a_[ROUNDS / 2];                                  \
		*(mb) = b_[ROUNDS / 2];                                  \
	} while (0)

/* madvise(MADV_DONTNEED) of one page of p (watched or not). */
static double bench_dontneed(char *p, long n)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		p[0] = 1;
		if (madvise(p, PAGE, MADV_DONTNEED))
			abort();
	}
	return (now_ns() - t0) / (double)n;
}

/* munmap + mmap back (MAP_FIXED_NOREPLACE) of a page of p, then a get of
 * it: the whole cycle a program pays when it recycles registered memory. */
static double bench_recycle(mrmgr_cache_t *c, char *p, long n)
{
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		mrmgr_region_t *r;

		if (mrmgr_get(c, p, PAGE, IBV_ACCESS_LOCAL_WRITE, &r))
			abort();
		mrmgr_put(r);
		if (munmap(p, PAGE) ||
		    mmap(p, PAGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != p)
			abort();
	}
	return (now_ns() - t0) / (double)n;
}

static double median_of(double *t, long n)
{
	double m;

	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	m = t[n / 2];
	free(t);
	return m;
}

/*
 * munmap() of 64 KiB, timed alone (median of the calls), after a get+put
 * of it when cached. raw: through syscall(), which nothing sees; the
 * cache is then told with mrmgr_invalidate(), untimed, so it stays honest.
 */
static double bench_unmap(mrmgr_cache_t *c, long n, int raw, int cached)
{
	double *t = malloc((size_t)n * sizeof(*t));

	if (!t)
		abort();
	for (long i = 0; i < n; i++) {
		char *p = (char *)syscall(SYS_mmap, NULL, PAIR_LEN,
					  PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		mrmgr_region_t *r;
		double t0;

		if (p == MAP_FAILED)
			abort();
		p[0] = 1;
		if (cached) {
			if (mrmgr_get(c, p, PAIR_LEN, IBV_ACCESS_LOCAL_WRITE, &r))
				abort();
			mrmgr_put(r);
		}
		t0 = now_ns();
		if (raw ? syscall(SYS_munmap, p, PAIR_LEN) : munmap(p, PAIR_LEN))
			abort();
		t[i] = now_ns() - t0;
		if (raw && cached)
			mrmgr_invalidate(c, p, PAIR_LEN);
	}
	return median_of(t, n);
}

/* free() of a 1 MiB chunk glibc mmap'd (its internal munmap), timed
 * alone, after a get+put of it when cached. */
static double bench_free(mrmgr_cache_t *c, long n, int cached)
{
	const size_t len = 1 << 20;
	double *t = malloc((size_t)n * sizeof(*t));

	if (!t)
		abort();
	for (long i = 0; i < n; i++) {
		char *p = malloc(len);
		mrmgr_region_t *r;
		double t0;

		if (!p)
			abort();
		p[0] = 1;
		if (cached) {
			if (mrmgr_get(c, p, len, IBV_ACCESS_LOCAL_WRITE, &r))
				abort();
			mrmgr_put(r);
		}
		t0 = now_ns();
		free(p);
		t[i] = now_ns() - t0;
	}
	return median_of(t, n);
}

/*
 * munmap() of a misaligned address: the kernel refuses it at once
 * (EINVAL), so what is left is the call, the system call's entry and exit
 * and, through libc, whatever a source adds: the hook's reports about the
 * page at p (filtered out when no cache holds memory there).
 */
static double bench_refused(char *p, long n, int raw)
{
	double best = 1e18;

	/* The fastest of many short rounds: on a loaded machine the median
	 * of a difference this small is noise; the minimum is not. */
	for (long done = 0; done < n; done += 64) {
		double t0 = now_ns(), t;

		for (int i = 0; i < 64; i++) {
			if (raw ? syscall(SYS_munmap, p + 1, PAGE) != -1
				: munmap(p + 1, PAGE) != -1)
				abort();
		}
		t = (now_ns() - t0) / 64;
		if (t < best)
			best = t;
	}
	return best;
}

static double bench_hits(mrmgr_cache_t *c, char *p, long n)
{
	mrmgr_region_t *r;
	double t0;

	if (mrmgr_get(c, p, PAGE, IBV_ACCESS_LOCAL_WRITE, &r))
		abort();
	mrmgr_put(r);
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		if (mrmgr_get(c, p, PAGE, IBV_ACCESS_LOCAL_WRITE, &r))
			abort();
		mrmgr_put(r);
	}
	return (now_ns() - t0) / (double)n;
}

/* A hit right after an event elsewhere: the slow path applies it. */
static double bench_hits_after_event(mrmgr_cache_t *c, char *p, char *other, long n)
{
	mrmgr_region_t *r;
	double t0 = now_ns();

	for (long i = 0; i < n; i++) {
		mrmgr_notify_unmap(other, PAGE);
		if (mrmgr_get(c, p, PAGE, IBV_ACCESS_LOCAL_WRITE, &r))
			abort();
		mrmgr_put(r);
	}
	return (now_ns() - t0) / (double)n;
}

static void row(const char *mode, const char *what, double ns, double base)
{
	if (base > 0)
		printf("| %-6s | %-58s | %8.0f | %+7.0f |\n", mode, what, ns, ns - base);
	else
		printf("| %-6s | %-58s | %8.0f |         |\n", mode, what, ns);
	fflush(stdout);
}

static int child(const char *mode)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK,
		.flags = MRMGR_SIM_FLAG_NO_PIN,
		.memlock_bytes = UINT64_MAX,
	};
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS | MRMGR_CACHE_ATTR_MAX_BYTES |
			     MRMGR_CACHE_ATTR_FLAGS,
		.max_regions = 1 << 20,
		.max_bytes = 1ull << 40,
		.flags = MRMGR_CACHE_NO_MERGE,
	};
	struct mrmgr_monitor_info mi;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *c;
	size_t big = (size_t)(nregions + 16) * PAGE;
	char *plain, *arena, label[96];
	double x, y;

	/* Separate mappings: plain is never watched, the arena's one VMA is
	 * watched as soon as one page of it is cached. */
	arena = mmap(NULL, big, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	plain = mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (plain == MAP_FAILED || arena == MAP_FAILED)
		return 1;
	if (mrmgr_sim_open(&sa, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create(pd, &ca, &c))
		return 1;
	mrmgr_cache_query_monitor(c, &mi, sizeof(mi));
	if (!strcmp(mode, "uffd") && !(mi.sources & MRMGR_MONITOR_SRC_UFFD)) {
		printf("| uffd   | userfaultfd unavailable: %-33s |          |         |\n",
		       strerror(mi.uffd_error));
		return 0;
	}
	if (!strcmp(mode, "hooks") && !(mi.sources & MRMGR_MONITOR_SRC_HOOKS)) {
		printf("| hooks  | hooks unavailable: %-39s |          |         |\n",
		       strerror(mi.hooks_error));
		return 0;
	}
	if (!strcmp(mode, "patch") && !(mi.sources & MRMGR_MONITOR_SRC_PATCH)) {
		printf("| patch  | libc patching unavailable: %-31s |          |         |\n",
		       strerror(mi.patch_error));
		return 0;
	}
	/* glibc mmaps every chunk of 128 KiB or more (no dynamic threshold). */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	AB(bench_unmap(c, n, 0, 1), bench_unmap(c, n, 1, 1), pairs / 10, &x, &y);
	row(mode, "munmap 64 KiB the cache holds (vs raw syscall)", x, y);
	AB(bench_unmap(c, n, 0, 0), bench_unmap(c, n, 1, 0), pairs / 10, &x, &y);
	row(mode, "munmap 64 KiB the cache does not hold (vs raw syscall)", x, y);
	row(mode, "free() 1 MiB mmap'd chunk the cache holds",
	    MEDIAN(bench_free(c, n, 1), pairs / 10), 0);
	row(mode, "free() 1 MiB mmap'd chunk the cache does not hold",
	    MEDIAN(bench_free(c, n, 0), pairs / 10), 0);
	AB(bench_pairs(n, 0), bench_pairs(n, 1), pairs, &x, &y);
	row(mode, "mmap+munmap 64 KiB (vs raw syscalls), 0 regions", x, y);

	/* One region in the arena: its whole VMA is now watched (uffd). */
	{
		mrmgr_region_t *r;

		memset(arena, 1, PAGE);
		if (mrmgr_get(c, arena, PAGE, IBV_ACCESS_LOCAL_WRITE, &r))
			return 1;
		mrmgr_put(r);
	}
	AB(bench_dontneed(arena + big - PAGE, n), bench_dontneed(plain + PAGE, n),
	   pairs / 4, &x, &y);
	row(mode, "madvise(DONTNEED) 1 page in a VMA holding a cached region", x, y);

	for (long i = 1; i < nregions; i++) {
		mrmgr_region_t *r;

		arena[i * PAGE] = 1;
		if (mrmgr_get(c, arena + i * PAGE, PAGE, IBV_ACCESS_LOCAL_WRITE, &r))
			return 1;
		mrmgr_put(r);
	}
	snprintf(label, sizeof(label),
		 "mmap+munmap 64 KiB (vs raw syscalls), %ld regions", nregions);
	AB(bench_pairs(n, 0), bench_pairs(n, 1), pairs, &x, &y);
	row(mode, label, x, y);
	row(mode, "get+put hit", MEDIAN(bench_hits(c, arena + PAGE, n), pairs * 5), 0);
	row(mode, "get+put hit after an event elsewhere (slow path)",
	    MEDIAN(bench_hits_after_event(c, arena + PAGE, arena + big - PAGE, n),
		   pairs / 4), 0);
	row(mode, "munmap+mmap a cached page, then get it (re-register)",
	    MEDIAN(bench_recycle(c, plain, n), pairs / 10), 0);
	/* A 2 MiB chunk nothing was ever cached in (the filter's unit). */
	{
		char *cold = mmap(NULL, 8 << 20, PROT_NONE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (cold == MAP_FAILED)
			return 1;
		cold = (char *)(((uintptr_t)cold + (4 << 20)) & ~(uintptr_t)((2 << 20) - 1));
		AB(bench_refused(cold, n, 0), bench_refused(cold, n, 1), pairs,
		   &x, &y);
	}
	row(mode, "munmap EINVAL, not cached (vs raw; fastest of rounds)", x, y);
	AB(bench_refused(arena, n, 0), bench_refused(arena, n, 1), pairs, &x, &y);
	row(mode, "munmap EINVAL, cached range (vs raw; fastest of rounds)", x, y);
	mrmgr_cache_query_monitor(c, &mi, sizeof(mi));
	fprintf(stderr, "  [%s: %llu uffd events, %llu notifications, %llu regions "
		"invalidated, %llu watched ranges in %llu runs]\n", mode,
		(unsigned long long)mi.uffd_events, (unsigned long long)mi.notify_events,
		(unsigned long long)mi.invalidations,
		(unsigned long long)mi.watched_ranges, (unsigned long long)mi.watched_runs);
	return 0;
}

/* Run one mode in a fresh process. */
static int run(const char *self, const char *mode, const char *preload)
{
	pid_t pid;
	int st;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		char p[32], r[32];

		setenv("MRMGR_MONITOR", mode, 1);
		setenv("MRMGR_LOG_LEVEL", "error", 0);
		if (preload)
			setenv("LD_PRELOAD", preload, 1);
		snprintf(p, sizeof(p), "%ld", pairs);
		snprintf(r, sizeof(r), "%ld", nregions);
		execl(self, self, "--child", mode, "--pairs", p, "--regions", r,
		      (char *)NULL);
		_exit(127);
	}
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(int argc, char **argv)
{
	const char *mode = NULL;
	char self[PATH_MAX], hooks[PATH_MAX + 64];
	ssize_t n;
	int ret = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--child") && i + 1 < argc)
			mode = argv[++i];
		else if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
			pairs = atol(argv[++i]);
		else if (!strcmp(argv[i], "--regions") && i + 1 < argc)
			nregions = atol(argv[++i]);

		else {
			fprintf(stderr, "usage: %s [--pairs N] [--regions N]\n", argv[0]);
			return 2;
		}
	}
	if (mode)
		return child(mode);

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	/* libtool puts the real program in .libs; the hooks sit in
	 * lib/.libs of the same build tree. */
	snprintf(hooks, sizeof(hooks), "%s", self);
	*strrchr(hooks, '/') = '\0';
	if (strstr(hooks, "/.libs"))
		*strrchr(hooks, '/') = '\0';
	strcat(hooks, "/../lib/.libs/libmrmgr_hooks.so");
	if (access(hooks, R_OK))
		snprintf(hooks, sizeof(hooks), "libmrmgr_hooks.so.1");

	printf("%ld mmap/munmap pairs per row, %ld cached regions; ns per "
	       "operation (median of %d rounds); last column: added to the same "
	       "calls through raw syscall() (pairs) or on an unwatched VMA "
	       "(madvise), measured alternately in the same process\n\n",
	       pairs, nregions, ROUNDS);
	printf("| source | operation                                                  |    ns/op |   added |\n");
	printf("|--------|------------------------------------------------------------|---------:|--------:|\n");
	ret |= run(self, "none", NULL);
	ret |= run(self, "uffd", NULL);
	ret |= run(self, "hooks", hooks);
	ret |= run(self, "patch", NULL);
	ret |= run(self, "auto", NULL);
	return ret;
}
