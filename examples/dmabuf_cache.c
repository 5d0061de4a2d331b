/*
 * A dma-buf registration cache (doc/device-memory.md), on the simulated
 * HCA with a memfd standing in for a GPU's exported buffer: get, hit,
 * put, and the caller's descriptor closed while the cache keeps its own.
 * On a real HCA, open the device instead of the sim and pass the
 * dma-buf descriptor the GPU driver exported (cuMemGetHandleForAddressRange).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

int main(void)
{
	const size_t len = 1 << 20;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *dc;
	mrmgr_region_t *r1, *r2;
	struct mrmgr_stats st;
	uint64_t roff;
	int fd, ret;

	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd))
		return 1;
	ret = mrmgr_cache_create_dmabuf(pd, NULL, &dc);
	if (ret) {
		fprintf(stderr, "dma-buf cache: %s\n", strerror(ret));
		return 1;
	}
	fd = memfd_create("example-dmabuf", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len))
		return 1;

	struct mrmgr_dmabuf_attr a = { .fd = fd, .offset = 0, .length = len,
				       .access = IBV_ACCESS_LOCAL_WRITE };
	ret = mrmgr_get_dmabuf(dc, &a, &r1); /* a miss: registers */
	if (ret) {
		fprintf(stderr, "mrmgr_get_dmabuf: %s\n", strerror(ret));
		return 1;
	}
	a.offset = 4096;
	a.length = 8192;
	ret = mrmgr_get_dmabuf(dc, &a, &r2); /* inside it: a hit */
	if (ret)
		return 1;
	mrmgr_region_dmabuf_offset(r2, &roff);
	printf("lkey %#x, buffer offset 4096 at MR address %#llx\n",
	       mrmgr_region_lkey(r2),
	       (unsigned long long)(mrmgr_region_mr(r2)->addr + (4096 - roff)));
	mrmgr_put(r2);
	mrmgr_put(r1);
	close(fd); /* the cache holds its own duplicate while cached */

	mrmgr_cache_query_stats(dc, &st, sizeof(st));
	printf("hits %llu, misses %llu\n", (unsigned long long)st.hits,
	       (unsigned long long)st.misses);
	mrmgr_cache_destroy(dc); /* deregisters, closes the duplicate */
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	return st.hits == 1 && st.misses == 1 ? 0 : 1;
}
