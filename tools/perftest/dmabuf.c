/*
 * mrmgr_perftest's dma-buf rows: a miss (a buffer not cached: the
 * library's dma-buf cache registers it with ibv_reg_dmabuf_mr) and a hit
 * (the same get again: one fstat of the descriptor, no device call), on
 * memfd buffers. A device that cannot register dma-bufs (rxe; a memfd is
 * no dma-buf to a real HCA's driver) gives an "unsupported" row with the
 * error.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "perftest.h"

#define DMABUF_LEN (64 * 1024)

static int one(unsigned int i, uint64_t *miss, uint64_t *hit)
{
	struct mrmgr_dmabuf_attr a = { .length = DMABUF_LEN,
				       .access = PT_ACCESS };
	uint64_t t0, t1, t2;
	int ret;

	a.fd = memfd_create("mrmgr-perftest-dmabuf", MFD_CLOEXEC);
	if (a.fd < 0)
		return errno;
	if (ftruncate(a.fd, DMABUF_LEN)) {
		ret = errno;
		close(a.fd);
		return ret;
	}
	t0 = pt_now_ns();
	ret = mrmgr_get_dmabuf(pt_live_cache, &a, &pt_live_region);
	if (!ret) {
		mrmgr_put(pt_live_region);
		pt_live_region = NULL;
		t1 = pt_now_ns();
		ret = mrmgr_get_dmabuf(pt_live_cache, &a, &pt_live_region);
	}
	if (!ret) {
		mrmgr_put(pt_live_region);
		pt_live_region = NULL;
		t2 = pt_now_ns();
		miss[i] = t1 - t0;
		hit[i] = t2 - t1;
	}
	close(a.fd); /* the cache holds its own duplicate */
	return ret;
}

int pt_dmabuf(struct pt_dev *d, const struct pt_opts *o)
{
	unsigned int n = o->runs < 32 ? 32 : o->runs;
	uint64_t *hit = calloc(n, sizeof(*hit)), *miss = calloc(n, sizeof(*miss));
	struct pt_row *r;
	int ret = ENOMEM;

	pt_phase("dma-buf");
	while ((uint64_t)n * DMABUF_LEN > o->limit / 2 && n > 1)
		n /= 2;
	if (!hit || !miss ||
	    (ret = mrmgr_cache_create_dmabuf(d->pd, NULL, &pt_live_cache)))
		goto out;
	for (unsigned int i = 0; i < n && !pt_stop; i++) {
		pt_progress("%u of %u", i, n);
		if ((ret = one(i, miss, hit)))
			goto out;
		pt_checkpoint("dmabuf");
	}
	if (pt_stop) {
		ret = EINTR;
		goto out;
	}
	if ((r = pt_row_add("cache", "dmabuf-miss", DMABUF_LEN))) {
		pt_row_samples(r, miss, n);
		snprintf(r->note, sizeof(r->note), "mrmgr_get_dmabuf + mrmgr_put "
			 "of a memfd not cached: ibv_reg_dmabuf_mr");
	}
	if ((r = pt_row_add("cache", "dmabuf-hit", DMABUF_LEN))) {
		pt_row_samples(r, hit, n);
		snprintf(r->note, sizeof(r->note), "the same get + put again: "
			 "one fstat, no device call");
	}
	ret = 0;
out:
	if (ret != EINTR) {
		if (pt_live_cache)
			mrmgr_cache_destroy(pt_live_cache);
		pt_live_cache = NULL;
	}
	if (ret && ret != EINTR)
		pt_row_skip("cache", "dmabuf-hit", DMABUF_LEN,
			    ret == EOPNOTSUPP || ret == EINVAL ? PT_UNSUPPORTED
							       : PT_SKIPPED,
			    "mrmgr_get_dmabuf of a memfd: %s", strerror(ret));
	free(hit);
	free(miss);
	return 0; /* a device without dma-buf: a row that says so */
}
