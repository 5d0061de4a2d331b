/*
 * A small program in the default monitor mode, for the tools users debug
 * with: scripts/test-all.sh runs it under valgrind (--error-exitcode=1)
 * and built with -fsanitize=address (LeakSanitizer on). It must finish:
 * a default-mode program used to hang under valgrind (the userfaultfd
 * reader and valgrind's serialised threads deadlocked), and LeakSanitizer
 * aborted on the reader's PROT_NONE stack guard in .bss.
 *
 * Two threads each map, get, put, unmap and allocate page-aligned
 * buffers (page-aligned: the simulated HCA reads whole pages, which
 * valgrind would report for a malloc'd block's neighbours).
 * Exit status 0 on success.
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define LEN ((size_t)256 * 1024)

static mrmgr_cache_t *cache;

static void *worker(void *arg)
{
	long fail = 0;

	(void)arg;
	for (int i = 0; i < 20; i++) {
		char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		void *m;
		mrmgr_region_t *r;

		if (p == MAP_FAILED)
			return (void *)1;
		memset(p, i, LEN);
		for (int k = 0; k < 2; k++) {
			fail |= mrmgr_get(cache, p, LEN, IBV_ACCESS_LOCAL_WRITE, &r);
			if (!fail)
				mrmgr_put(r);
		}
		munmap(p, LEN);
		if (posix_memalign(&m, 4096, LEN))
			return (void *)1;
		memset(m, 1, LEN);
		fail |= mrmgr_get(cache, m, LEN, IBV_ACCESS_LOCAL_WRITE, &r);
		if (!fail)
			mrmgr_put(r);
		free(m);
	}
	return (void *)fail;
}

int main(void)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct mrmgr_monitor_info mi;
	pthread_t th[2];
	void *ret;
	int fail = 0;

	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create(pd, NULL, &cache))
		return 2;
	for (int i = 0; i < 2; i++)
		if (pthread_create(&th[i], NULL, worker, NULL))
			return 2;
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], &ret);
		fail |= ret != NULL;
	}
	memset(&mi, 0, sizeof(mi));
	mrmgr_cache_query_monitor(cache, &mi, sizeof(mi));
	printf("monitor: sources %#x, unwatched gets %llu (causes %#x)\n",
	       mi.sources, (unsigned long long)mi.unwatched, mi.unwatched_causes);
	if (mrmgr_cache_destroy(cache) || mrmgr_sim_dealloc_pd(pd) ||
	    mrmgr_sim_close(ctx))
		return 3;
	return fail ? 1 : 0;
}
