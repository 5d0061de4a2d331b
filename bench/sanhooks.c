/*
 * What the sanitizer allocator source's hooks cost each malloc + free
 * pair, in a sanitized process (build it in build-asan):
 *
 *   make -C build-asan bench-sanhooks      (or: build-asan/bench/sanhooks)
 *   options: --size N    bytes per malloc (64)
 *            --iters N   malloc+free pairs per repetition (1000000)
 *            --reps N    repetitions, median reported (5)
 *
 * Rows, each the median over the repetitions of the mean ns per pair
 * (the thread's CPU time, which a loaded machine inflates less than wall
 * time):
 *   no cache     the sanitizer's allocator alone (no hooks installed yet);
 *   filtered     a cache runs (the hooks installed), nothing registered
 *                in the chunks' 2 MiB blocks: each hook stops at the
 *                filter;
 *   reported     a cached registration in the chunks' block: each hook
 *                pushes the chunk's pages into the queue.
 * The hooks' own cost is a row's difference from "no cache". Outside a
 * sanitizer there are no hooks: the rows then measure glibc's malloc,
 * and the program says so.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static struct {
	size_t size;
	long iters;
	int reps;
} opt = { 64, 1000000, 5 };

static double cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* ns per malloc+free pair, the median of opt.reps. */
static double pairs(void)
{
	double r[32];
	int n = opt.reps < 32 ? opt.reps : 32;

	for (int k = 0; k < n; k++) {
		double t0 = cpu_ns();

		for (long i = 0; i < opt.iters; i++) {
			void *volatile p = malloc(opt.size);

			free(p);
		}
		r[k] = (cpu_ns() - t0) / (double)opt.iters;
	}
	qsort(r, (size_t)n, sizeof(r[0]), cmp);
	return r[n / 2];
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	struct mrmgr_monitor_info mi;
	mrmgr_region_t *r;
	double base, filtered, reported;
	char *keep;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--size"))
			opt.size = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--iters"))
			opt.iters = strtol(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--reps"))
			opt.reps = atoi(argv[i + 1]);
	}
	if (!dlsym(RTLD_DEFAULT, "__sanitizer_install_malloc_and_free_hooks"))
		printf("not a sanitized process: no hooks; the rows measure "
		       "glibc's malloc\n");
	(void)pairs(); /* warm: the allocator's size class, the caches */
	base = pairs();
	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create(pd, NULL, &cache))
		return 1;
	memset(&mi, 0, sizeof(mi));
	mrmgr_cache_query_monitor(cache, &mi, sizeof(mi));
	filtered = pairs();
	/* A chunk of the same size class: its block is the benchmark's. */
	keep = malloc(opt.size);
	if (!keep || mrmgr_get(cache, keep, opt.size, ACCESS, &r))
		return 1;
	mrmgr_put(r);
	reported = pairs();
	printf("malloc+free of %zu bytes, sources %#x, ns per pair (CPU):\n"
	       "  no cache  %8.1f\n  filtered  %8.1f  (+%.1f)\n"
	       "  reported  %8.1f  (+%.1f)\n", opt.size, mi.sources, base,
	       filtered, filtered - base, reported, reported - base);
	free(keep);
	mrmgr_cache_destroy(cache);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	return 0;
}
