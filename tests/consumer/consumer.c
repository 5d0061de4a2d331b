/*
 * A tiny program outside the tree: built only with
 * `pkg-config --cflags --libs mrmgr-sim` against the installed libmrmgr
 * and libmrmgr-sim (the simulated HCA, a device provider of its own).
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

int main(void)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	mrmgr_region_t *r;
	struct mrmgr_stats st;
	/* Anonymous memory: the memory-event monitor can watch it, so it is
	 * cached. (A static buffer may start in the last file-backed page of
	 * .data, which userfaultfd cannot watch: it would not be cached.) */
	const size_t len = 1 << 16;
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int ret;

	if (buf == MAP_FAILED)
		return 1;
	memset(buf, 1, len);
	if ((ret = mrmgr_sim_open(NULL, &ctx)) || (ret = mrmgr_sim_alloc_pd(ctx, &pd)) ||
	    (ret = mrmgr_cache_create(pd, NULL, &cache))) {
		fprintf(stderr, "setup: %s\n", strerror(ret));
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		if ((ret = mrmgr_get(cache, buf, len, IBV_ACCESS_LOCAL_WRITE, &r))) {
			fprintf(stderr, "get: %s\n", strerror(ret));
			return 1;
		}
		mrmgr_put(r);
	}
	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	printf("consumer: libmrmgr %s, hits %llu misses %llu\n", mrmgr_version_string(),
	       (unsigned long long)st.hits, (unsigned long long)st.misses);
	if (st.hits != 1 || st.misses != 1)
		return 1;
	if (mrmgr_cache_destroy(cache) || mrmgr_sim_dealloc_pd(pd) || mrmgr_sim_close(ctx))
		return 1;
	return 0;
}
