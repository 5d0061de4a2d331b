/*
 * The smallest useful libmrmgr program: get a registration for a buffer,
 * use its keys, put it back, get it again from the cache.
 *
 * Runs on the simulated HCA so it works anywhere; with a real device you
 * would pass the PD from ibv_alloc_pd() instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

static int check(int ret, const char *what)
{
	if (ret)
		fprintf(stderr, "%s: %s\n", what, strerror(ret));
	return ret;
}

int main(void)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	mrmgr_region_t *region;
	struct mrmgr_stats st;
	size_t len = 1 << 20;
	char *buf = malloc(len);

	if (!buf)
		return 1;
	memset(buf, 0, len);
	if (check(mrmgr_sim_open(NULL, &ctx), "open the simulated HCA") ||
	    check(mrmgr_sim_alloc_pd(ctx, &pd), "allocate a PD") ||
	    check(mrmgr_cache_create(pd, NULL, &cache), "create the cache"))
		return 1;

	for (int i = 0; i < 3; i++) {
		/* What a send path does: register (or find) the buffer... */
		if (check(mrmgr_get(cache, buf, len, IBV_ACCESS_LOCAL_WRITE |
				    IBV_ACCESS_REMOTE_READ, &region), "get"))
			return 1;
		/* ...post work requests with its keys... */
		printf("round %d: lkey %#x rkey %#x, range %p + %zu\n", i,
		       mrmgr_region_lkey(region), mrmgr_region_rkey(region),
		       mrmgr_region_addr(region), mrmgr_region_length(region));
		/* ...and release it when the completions are in. */
		mrmgr_put(region);
	}

	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	printf("hits %llu, misses %llu, registrations %llu\n",
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.registrations);

	/* Before freeing memory the cache may have registered, say so. */
	mrmgr_invalidate(cache, buf, len);
	free(buf);
	if (check(mrmgr_cache_destroy(cache), "destroy the cache") ||
	    check(mrmgr_sim_dealloc_pd(pd), "free the PD") ||
	    check(mrmgr_sim_close(ctx), "close the device"))
		return 1;
	return st.hits == 2 && st.registrations == 1 ? 0 : 1;
}
