/*
 * The cache on a real device: get, put, merge, evict, invalidate, with the
 * ibv_mr the device returned checked field by field, and deregistration
 * proven by the device itself (an RDMA WRITE through a key the cache let go
 * must fail with a remote access error).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "cache_helpers.h"

#define LEN (64 * RDMA_KiB)

/*
 * Write `fill` into [dst, +len) through rkey, from a source registered in
 * src_cache: a cache of its own, so the source never merges with, or
 * evicts, what the test looks at.
 */
static enum ibv_wc_status write_fill(struct rdma_fixture *f,
				     mrmgr_cache_t *src_cache, void *dst,
				     uint32_t rkey, size_t len, int fill)
{
	mrmgr_cache_t *c = src_cache;
	void *src = rdma_map(len, fill);
	mrmgr_region_t *rs = rxe_get(c, src, len, IBV_ACCESS_LOCAL_WRITE);
	enum ibv_wc_status st = rdma_write(f, src, mrmgr_region_lkey(rs),
					   (uintptr_t)dst, rkey, len);

	mrmgr_put(rs);
	/* The source may be cached: say it goes before it is unmapped. */
	cr_assert_eq(mrmgr_invalidate(c, src, len), 0);
	munmap(src, len);
	return st;
}

Test(rxe_cache, get_returns_the_devices_mr)
{
	struct rdma_fixture f;
	mrmgr_cache_t *c;
	char *buf = rdma_map(LEN + RDMA_KiB * 4, 'x');

	rdma_fixture_open(&f, 0);
	c = rxe_cache(&f, 0, 0, 0);

	/* An unaligned request is widened to pages. */
	mrmgr_region_t *r = rxe_get(c, buf + 100, LEN, RXE_RW);
	struct ibv_mr *mr = mrmgr_region_mr(r);

	cr_assert_not_null(mr);
	cr_assert_eq(mr->context, f.ctx, "the MR belongs to %s", f.name);
	cr_assert_eq(mr->pd, f.pd);
	cr_assert_eq(mr->addr, (void *)buf);
	cr_assert_eq(mr->length, LEN + 4 * RDMA_KiB);
	cr_assert_eq(mr->lkey, mrmgr_region_lkey(r));
	cr_assert_eq(mr->rkey, mrmgr_region_rkey(r));
	cr_assert_eq(mrmgr_region_addr(r), (void *)buf);
	cr_assert_eq(mrmgr_region_length(r), LEN + 4 * RDMA_KiB);
	cr_assert_eq(mrmgr_region_access(r), RXE_RW);
	cr_log_info("%s: MR [%p, +%zu) lkey %#x rkey %#x", f.name, mr->addr,
		    mr->length, mr->lkey, mr->rkey);

	/* A contained request with less access is a hit on the same MR. */
	mrmgr_region_t *r2 = rxe_get(c, buf + 8192, 10, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_eq(r2, r);
	cr_assert_eq(mrmgr_region_mr(r2), mr);
	mrmgr_put(r2);
	mrmgr_put(r);

	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.misses, 1);
	cr_assert_eq(s.hits, 1);
	cr_assert_eq(s.registrations, 1);
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_eq(s.pinned_bytes, LEN + 4 * RDMA_KiB);
	/* The device's limits reached the cache. */
	cr_assert_leq(s.max_regions, (uint64_t)f.dev_attr.max_mr);

	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f); /* the PD frees only if no MR is left */
	munmap(buf, LEN + 4 * RDMA_KiB);
}

Test(rxe_cache, merge_adjacent_requests_into_one_mr)
{
	struct rdma_fixture f;
	mrmgr_cache_t *c;
	char *buf = rdma_map(2 * LEN, 0);

	rdma_fixture_open(&f, RDMA_FX_QP);
	c = rxe_cache(&f, 0, 0, 0);
	mrmgr_cache_t *src_cache = rxe_cache(&f, 0, 0, 0);

	mrmgr_region_t *lo = rxe_get(c, buf, LEN, RXE_RW);
	uint32_t lo_rkey = mrmgr_region_rkey(lo);
	mrmgr_region_t *hi = rxe_get(c, buf + LEN, LEN, RXE_RW);
	struct ibv_mr *mr = mrmgr_region_mr(hi);

	cr_assert_neq(hi, lo);
	cr_assert_eq(mr->addr, (void *)buf, "the merged MR starts at the lower half");
	cr_assert_eq(mr->length, 2 * LEN);
	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.merges, 1);
	cr_assert_eq(s.registrations, 2);
	cr_assert_eq(s.regions, 2, "the absorbed MR lives on for its holder");

	/* The merged MR reaches both halves; the absorbed one still works. */
	cr_assert_eq(write_fill(&f, src_cache, buf, mr->rkey, 2 * LEN, 'M'), IBV_WC_SUCCESS);
	rdma_expect_bytes(buf, 2 * LEN, 'M', "WRITE through the merged MR");
	cr_assert_eq(write_fill(&f, src_cache, buf, lo_rkey, LEN, 'L'), IBV_WC_SUCCESS);
	rdma_expect_bytes(buf, LEN, 'L', "WRITE through the absorbed MR while held");

	/* Its last put deregisters the absorbed MR on the device. */
	mrmgr_put(lo);
	cr_assert_eq(rxe_stats(c).regions, 1);
	cr_assert_eq(write_fill(&f, src_cache, buf, lo_rkey, LEN, 'X'), IBV_WC_REM_ACCESS_ERR,
		     "the absorbed MR's rkey must be dead after its last put");
	rdma_expect_bytes(buf, LEN, 'L', "no WRITE through a deregistered rkey");

	mrmgr_put(hi);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(mrmgr_cache_destroy(src_cache), 0);
	rdma_fixture_close(&f);
	munmap(buf, 2 * LEN);
}

Test(rxe_cache, eviction_deregisters_the_least_recently_used)
{
	struct rdma_fixture f;
	mrmgr_cache_t *c;
	char *a = rdma_map(LEN, 'a'), *b = rdma_map(LEN, 'b'), *d = rdma_map(LEN, 'd');

	rdma_fixture_open(&f, RDMA_FX_QP);
	/* Room for two cached regions; the write source of write_fill()
	 * needs a third, so it comes from a cache of its own. */
	c = rxe_cache(&f, 2, 0, MRMGR_CACHE_NO_MERGE);
	mrmgr_cache_t *src_cache = rxe_cache(&f, 0, 0, 0);

	mrmgr_region_t *ra = rxe_get(c, a, LEN, RXE_RW);
	uint32_t a_rkey = mrmgr_region_rkey(ra);
	mrmgr_put(ra);
	mrmgr_region_t *rb = rxe_get(c, b, LEN, RXE_RW);
	uint32_t b_rkey = mrmgr_region_rkey(rb);
	mrmgr_put(rb);
	/* a is used again, so b is the least recently used. */
	mrmgr_put(rxe_get(c, a, LEN, RXE_RW));
	mrmgr_region_t *rd = rxe_get(c, d, LEN, RXE_RW);

	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.evictions, 1);
	cr_assert_eq(s.regions, 2);
	cr_assert_eq(s.hits, 1);
	cr_assert_eq(write_fill(&f, src_cache, b, b_rkey, LEN, 'X'),
		     IBV_WC_REM_ACCESS_ERR, "b's MR must be gone from %s", f.name);
	rdma_expect_bytes(b, LEN, 'b', "evicted region untouched");
	cr_assert_eq(write_fill(&f, src_cache, a, a_rkey, LEN, 'A'), IBV_WC_SUCCESS,
		     "a's MR must still be registered");
	rdma_expect_bytes(a, LEN, 'A', "WRITE into the region kept");
	cr_assert_eq(write_fill(&f, src_cache, d, mrmgr_region_rkey(rd), LEN, 'D'),
		     IBV_WC_SUCCESS);
	rdma_expect_bytes(d, LEN, 'D', "WRITE into the new region");
	mrmgr_put(rd);

	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(mrmgr_cache_destroy(src_cache), 0);
	rdma_fixture_close(&f);
	munmap(a, LEN);
	munmap(b, LEN);
	munmap(d, LEN);
}

Test(rxe_cache, invalidate_idle_now_and_in_use_at_last_put)
{
	struct rdma_fixture f;
	mrmgr_cache_t *c;
	char *idle = rdma_map(LEN, 'i'), *held = rdma_map(LEN, 'h');

	rdma_fixture_open(&f, RDMA_FX_QP);
	c = rxe_cache(&f, 0, 0, MRMGR_CACHE_NO_MERGE);
	mrmgr_cache_t *src_cache = rxe_cache(&f, 0, 0, 0);

	mrmgr_region_t *ri = rxe_get(c, idle, LEN, RXE_RW);
	uint32_t idle_rkey = mrmgr_region_rkey(ri);
	mrmgr_put(ri);
	mrmgr_region_t *rh = rxe_get(c, held, LEN, RXE_RW);
	uint32_t held_rkey = mrmgr_region_rkey(rh);

	cr_assert_eq(mrmgr_invalidate(c, idle, LEN), 0);
	cr_assert_eq(mrmgr_invalidate(c, held, LEN), 0);
	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.invalidations, 2);
	cr_assert_eq(s.regions, 1, "only the held region is still registered");
	cr_assert_eq(s.deregistrations, 1);

	cr_assert_eq(write_fill(&f, src_cache, idle, idle_rkey, LEN, 'X'),
		     IBV_WC_REM_ACCESS_ERR, "an idle invalidated MR is deregistered at once");
	rdma_expect_bytes(idle, LEN, 'i', "invalidated idle region untouched");
	cr_assert_eq(write_fill(&f, src_cache, held, held_rkey, LEN, 'H'),
		     IBV_WC_SUCCESS, "a held MR stays valid for its holder");
	rdma_expect_bytes(held, LEN, 'H', "WRITE through an invalidated region still held");

	mrmgr_put(rh);
	cr_assert_eq(rxe_stats(c).regions, 0);
	cr_assert_eq(write_fill(&f, src_cache, held, held_rkey, LEN, 'Y'),
		     IBV_WC_REM_ACCESS_ERR, "deregistered at its last put");
	rdma_expect_bytes(held, LEN, 'H', "no WRITE after the last put");

	/* The next get registers afresh. */
	mrmgr_region_t *again = rxe_get(c, held, LEN, RXE_RW);
	cr_assert_eq(rxe_stats(c).registrations, 3);
	mrmgr_put(again);

	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(mrmgr_cache_destroy(src_cache), 0);
	rdma_fixture_close(&f);
	munmap(idle, LEN);
	munmap(held, LEN);
}

Test(rxe_cache, destroy_refuses_while_held_and_leaks_nothing)
{
	struct rdma_fixture f;
	mrmgr_cache_t *c;
	char *buf = rdma_map(LEN, 0);

	rdma_fixture_open(&f, 0);
	c = rxe_cache(&f, 0, 0, 0);
	mrmgr_region_t *r = rxe_get(c, buf, LEN, RXE_RW);

	cr_assert_eq(mrmgr_cache_destroy(c), EBUSY);
	cr_assert_eq(ibv_dealloc_pd(f.pd), EBUSY,
		     "%s must still hold the cache's MR", f.name);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f); /* asserts the PD is free of MRs */
	munmap(buf, LEN);
}

/* Threads sharing registrations on a real device: no MR leaked or lost. */
#define NTHREADS 4
#define NBUFS 8
#define ROUNDS 200

struct worker {
	mrmgr_cache_t *cache;
	char **bufs;
	unsigned int seed;
	int failures;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < ROUNDS; i++) {
		unsigned int k = (w->seed = w->seed * 1103515245u + 12345u) >> 16;
		mrmgr_region_t *r;

		if (mrmgr_get(w->cache, w->bufs[k % NBUFS], LEN, RXE_RW, &r) != 0 ||
		    mrmgr_region_mr(r)->addr != (void *)w->bufs[k % NBUFS]) {
			w->failures++;
			continue;
		}
		mrmgr_put(r);
	}
	return NULL;
}

Test(rxe_cache, threads_share_registrations)
{
	struct rdma_fixture f;
	struct worker w[NTHREADS];
	pthread_t t[NTHREADS];
	char *bufs[NBUFS];
	mrmgr_cache_t *c;

	rdma_fixture_open(&f, 0);
	/* Fewer regions than buffers: hits, misses and evictions all race. */
	c = rxe_cache(&f, NBUFS / 2, 0, MRMGR_CACHE_NO_MERGE);
	for (int i = 0; i < NBUFS; i++)
		bufs[i] = rdma_map(LEN, i);
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){ .cache = c, .bufs = bufs, .seed = (unsigned int)i + 1 };
		cr_assert_eq(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(w[i].failures, 0, "thread %d: %d failed gets", i,
			     w[i].failures);
	}
	struct mrmgr_stats s = rxe_stats(c);
	/* (Hit counts are per thread slot and may lose an increment when
	 * two threads share a slot, so no exact total.) */
	cr_assert_gt(s.misses, 0);
	cr_assert_leq(s.hits + s.misses, NTHREADS * ROUNDS);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_leq(s.regions, NBUFS / 2);
	cr_assert_eq(s.registrations - s.deregistrations, s.regions);
	cr_log_info("%s: %d threads, %llu hits, %llu misses, %llu evictions",
		    f.name, NTHREADS, (unsigned long long)s.hits,
		    (unsigned long long)s.misses, (unsigned long long)s.evictions);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
	for (int i = 0; i < NBUFS; i++)
		munmap(bufs[i], LEN);
}
