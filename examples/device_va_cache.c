/*
 * A device-VA registration cache (doc/device-memory.md) on the simulated
 * HCA and the simulated device allocator: a get by device address
 * registers the whole allocation (here of two segments), a get of
 * another part of it hits, a free and a new allocation at the same
 * address misses. On a GPU, open the CUDA domain instead
 * (mrmgr_domain_open_cuda()) and report frees with mrmgr_domain_freed().
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <string.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

static int get(mrmgr_cache_t *c, uint64_t va, size_t len, const char *what)
{
	mrmgr_region_t *r;
	int ret = mrmgr_get_device(c, va, len, IBV_ACCESS_LOCAL_WRITE, &r);

	if (ret) {
		fprintf(stderr, "mrmgr_get_device (%s): %s\n", what, strerror(ret));
		return 1;
	}
	printf("%-28s MR of %zu bytes\n", what, (size_t)mrmgr_region_mr(r)->length);
	mrmgr_put(r);
	return 0;
}

int main(void)
{
	const size_t len = 4 << 20;
	struct mrmgr_sim_gpu *gpu;
	struct ibv_context *ctx;
	struct mrmgr_stats st;
	mrmgr_domain_t *dom;
	struct ibv_pd *pd;
	mrmgr_cache_t *c;
	uint64_t a, b;
	int bad = 0;

	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_sim_gpu_open(&gpu) ||
	    mrmgr_domain_create(mrmgr_sim_gpu_ops(), gpu, &dom) ||
	    mrmgr_cache_create_device(pd, NULL, dom, &c))
		return 1;
	if (mrmgr_sim_gpu_alloc(gpu, len, 2, &a))
		return 1;
	bad |= get(c, a + len / 2 + 64, 256, "inside segment 2 (miss)");
	bad |= get(c, a, 64, "segment 1 (hit)");
	mrmgr_sim_gpu_free(gpu, a);
	if (mrmgr_sim_gpu_alloc(gpu, len, 2, &b))
		return 1;
	bad |= get(c, b, 64, b == a ? "same address, new buffer" : "new buffer");
	mrmgr_cache_query_stats(c, &st, sizeof(st));
	printf("hits %llu, misses %llu\n", (unsigned long long)st.hits,
	       (unsigned long long)st.misses);
	mrmgr_cache_destroy(c);
	mrmgr_domain_destroy(dom);
	mrmgr_sim_gpu_close(gpu);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	return bad || st.hits != 1 || st.misses != 2;
}
