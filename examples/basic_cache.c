/*
 * The smallest useful libmrmgr program: get a registration for a buffer,
 * use its keys, put it back, get it again from the cache.
 *
 * Runs on the first RDMA device, or on the simulated HCA when there is
 * none, so it works anywhere: the cache only needs a PD.
 */
#include <errno.h>
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

/* A PD on the first RDMA device (*real = 1), else on the simulated HCA. */
static int open_pd(struct ibv_context **ctx, struct ibv_pd **pd, int *real)
{
	struct ibv_device **devs = ibv_get_device_list(NULL);

	*ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
	if (devs)
		ibv_free_device_list(devs);
	*real = *ctx != NULL;
	if (!*real)
		return check(mrmgr_sim_open(NULL, ctx), "open the simulated HCA") ||
		       check(mrmgr_sim_alloc_pd(*ctx, pd), "allocate a PD");
	*pd = ibv_alloc_pd(*ctx);
	return *pd ? 0 : check(errno ? errno : ENOMEM, "allocate a PD");
}

static int close_pd(struct ibv_context *ctx, struct ibv_pd *pd, int real)
{
	if (real)
		return check(ibv_dealloc_pd(pd), "free the PD") ||
		       check(ibv_close_device(ctx), "close the device");
	return check(mrmgr_sim_dealloc_pd(pd), "free the PD") ||
	       check(mrmgr_sim_close(ctx), "close the device");
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
	int real;

	if (!buf)
		return 1;
	memset(buf, 0, len);
	if (open_pd(&ctx, &pd, &real))
		return 1;
	printf("device: %s%s\n", ibv_get_device_name(ctx->device),
	       real ? "" : " (simulated)");
	if (check(mrmgr_cache_create(pd, NULL, &cache), "create the cache"))
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
	    close_pd(ctx, pd, real))
		return 1;
	return st.hits == 2 && st.registrations == 1 ? 0 : 1;
}
